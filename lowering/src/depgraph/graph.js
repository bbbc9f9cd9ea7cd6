// The dependency graph page: pan (drag), zoom (wheel), search, and a clicked node's
// instruction, source line, registers, producers and consumers. Hand-written, no library.
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('graph-data').textContent);
  var view = document.getElementById('view');
  var svg = view.querySelector('svg');
  var vp = svg.querySelector('g.vp');
  var panel = document.getElementById('panel');
  var hits = document.getElementById('hits');
  var W = +svg.getAttribute('width'), H = +svg.getAttribute('height');
  svg.removeAttribute('width');
  svg.removeAttribute('height');
  svg.removeAttribute('viewBox');
  var producers = [], consumers = [], edgeEls = {};
  data.nodes.forEach(function () { producers.push([]); consumers.push([]); });
  data.edges.forEach(function (e, i) {
    producers[e[1]].push(i);
    consumers[e[0]].push(i);
  });
  Array.prototype.forEach.call(svg.querySelectorAll('path.e'), function (p) {
    edgeEls[p.getAttribute('data-f') + '-' + p.getAttribute('data-t')] = p;
  });
  var s = 1, tx = 0, ty = 0;
  function apply() { vp.setAttribute('transform', 'translate(' + tx + ',' + ty + ') scale(' + s + ')'); }
  function fit() {
    var r = view.getBoundingClientRect();
    s = Math.min(r.width / W, r.height / H, 1);
    tx = (r.width - W * s) / 2; ty = 0; apply();
  }
  function centre(id) {
    var g = document.getElementById('n' + id);
    if (!g) return;
    var m = /translate\(([-\d.]+),([-\d.]+)\)/.exec(g.getAttribute('transform'));
    var r = view.getBoundingClientRect();
    s = Math.max(s, 0.8);
    tx = r.width / 2 - (+m[1] + 95) * s; ty = r.height / 2 - (+m[2] + 17) * s; apply();
  }
  view.addEventListener('wheel', function (ev) {
    ev.preventDefault();
    var r = view.getBoundingClientRect(), k = Math.exp(-ev.deltaY * 0.0015);
    var x = ev.clientX - r.left, y = ev.clientY - r.top;
    tx = x - (x - tx) * k; ty = y - (y - ty) * k; s *= k; apply();
  }, { passive: false });
  var drag = null;
  view.addEventListener('mousedown', function (ev) { drag = [ev.clientX - tx, ev.clientY - ty, ev.clientX, ev.clientY]; });
  window.addEventListener('mousemove', function (ev) {
    if (drag) { tx = ev.clientX - drag[0]; ty = ev.clientY - drag[1]; apply(); }
  });
  window.addEventListener('mouseup', function () { drag = null; });
  function clear(cls) {
    Array.prototype.forEach.call(svg.querySelectorAll('.' + cls), function (el) { el.classList.remove(cls); });
  }
  function text(tag, t, cls) {
    var el = document.createElement(tag);
    el.textContent = t;
    if (cls) el.className = cls;
    return el;
  }
  function link(id) {
    var n = data.nodes[id], a = text('a', '#' + id + ' ' + n[3] + ' (line ' + n[2] + ')');
    a.addEventListener('click', function () { select(id, true); });
    return a;
  }
  function list(title, edges, end, cls) {
    panel.appendChild(text('h4', title + ' (' + edges.length + ')'));
    var ul = document.createElement('ul');
    edges.forEach(function (i) {
      var e = data.edges[i], other = e[end];
      var g = document.getElementById('n' + other);
      if (g) g.classList.add(cls);
      var p = edgeEls[e[0] + '-' + e[1]];
      if (p) p.classList.add('lit');
      var li = document.createElement('li');
      li.appendChild(text('span', e[2] + (e[3] ? ' ' + e[3] : '') + ': ', 'mono'));
      li.appendChild(link(other));
      ul.appendChild(li);
    });
    panel.appendChild(ul);
  }
  function select(id, move) {
    var n = data.nodes[id];
    if (!n) return;
    clear('sel'); clear('prod'); clear('cons'); clear('lit');
    svg.classList.add('dim');
    document.getElementById('n' + id).classList.add('sel');
    panel.textContent = '';
    panel.appendChild(text('h3', '#' + id + ' ' + n[3]));
    panel.appendChild(text('div', 'chain ' + n[0] + ', iteration ' + n[1] + ', line ' + n[2]));
    panel.appendChild(text('div', n[4], 'src mono'));
    panel.appendChild(text('div', 'reads: ' + (n[5] || '-'), 'mono'));
    panel.appendChild(text('div', 'writes: ' + (n[6] || '-'), 'mono'));
    list('producers', producers[id], 0, 'prod');
    list('consumers', consumers[id], 1, 'cons');
    panel.setAttribute('data-node', id);
    if (move) centre(id);
  }
  svg.addEventListener('click', function (ev) {
    var g = ev.target.closest ? ev.target.closest('g.node') : null;
    if (g) select(+g.id.slice(1), false);
  });
  var found = [], at = 0;
  function search(q) {
    clear('hit');
    found = [];
    q = q.trim().toLowerCase();
    if (q) {
      var line = /^\d+$/.test(q) ? +q : -1;
      data.nodes.forEach(function (n, i) {
        if (n[2] === line || (line < 0 && (n[3] + ' ' + n[4]).toLowerCase().indexOf(q) >= 0)) found.push(i);
      });
    }
    found.forEach(function (i) { document.getElementById('n' + i).classList.add('hit'); });
    hits.textContent = q ? found.length + ' found' + (found.length ? ' (Enter: next)' : '') : '';
    at = 0;
    if (found.length) centre(found[0]);
  }
  var box = document.getElementById('search');
  box.addEventListener('input', function () { search(box.value); });
  box.addEventListener('keydown', function (ev) {
    if (ev.key === 'Enter' && found.length) { at = (at + 1) % found.length; centre(found[at]); select(found[at], false); }
  });
  fit();
  var h = decodeURIComponent(location.hash.slice(1));
  if (h.indexOf('search=') === 0) { box.value = h.slice(7); search(box.value); }
  if (h.indexOf('node=') === 0) select(+h.slice(5), true);
  document.body.setAttribute('data-ready', data.nodes.length + ' nodes');
})();
