// The diff report page: each heatmap cell's range and count under the pointer.
// Hand-written, no library.
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('report-data').textContent);
  var tip = document.getElementById('tip');
  function range(g, axis, b) {
    var u = g.units[axis], n = g.bins[axis];
    var a = Math.ceil(b * u / n), e = Math.ceil((b + 1) * u / n) - 1;
    return a === e ? '' + a : a + '-' + e;
  }
  Array.prototype.forEach.call(document.querySelectorAll('svg.heat'), function (svg) {
    var map = data.maps[+svg.getAttribute('data-map')];
    var which = svg.getAttribute('data-grid');
    var g = map[which];
    var area = svg.querySelector('rect.area');
    area.addEventListener('mousemove', function (ev) {
      var r = area.getBoundingClientRect();
      var row = Math.min(g.bins[0] - 1, Math.floor((ev.clientY - r.top) / r.height * g.bins[0]));
      var col = Math.min(g.bins[1] - 1, Math.floor((ev.clientX - r.left) / r.width * g.bins[1]));
      var cell = row * g.bins[1] + col, w = g.worst[cell];
      var names = which === 'items' ? ['items ', ', elements '] : ['rows ', ', columns '];
      tip.textContent = names[0] + range(g, 0, row) + names[1] + range(g, 1, col) + ': ' +
        g.count[cell] + ' mismatches' + (w ? ', worst ' + data.labels[w] + (w + 1 < data.labels.length ? ' ULP' : '') : '');
      tip.hidden = false;
      tip.style.left = (ev.clientX + 12) + 'px';
      tip.style.top = (ev.clientY + 12) + 'px';
    });
    area.addEventListener('mouseleave', function () { tip.hidden = true; });
  });
  document.body.setAttribute('data-ready', data.maps.length + ' maps');
})();
