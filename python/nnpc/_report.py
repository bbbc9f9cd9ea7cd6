"""DiffReport: the bit-for-bit comparison of hardware outputs with the software graph."""

from __future__ import annotations

import copy
import json
import os
from typing import Any, Dict, List, Optional, Union


def _float(v: Any) -> float:
    """A statistic of the JSON report: numbers, or "inf", "-inf", "nan"."""
    return float(v)


def _bucket_labels(n: int) -> List[str]:
    labels = []
    for k in range(n):
        if k <= 2:
            labels.append(str(k))
        elif k == n - 2:
            labels.append(f">{1 << (k - 2)}")
        elif k == n - 1:
            labels.append("NaN vs number")
        else:
            labels.append(f"{(1 << (k - 2)) + 1}-{1 << (k - 1)}")
    return labels


class DiffReport:
    """The report of ``nnpc diff`` (schema ``nnpc.diff/1``, docs/diff.md).

    ``concordant`` is bit equality of every element (any NaN equals any NaN; a hardware
    value that is not a value of the storage format is a mismatch). A campaign's report
    (``nnpc.ray.diff_dataset``) also has ``items`` and ``worst``.
    """

    def __init__(
        self,
        report: Dict[str, Any],
        worst: Optional[List[Dict[str, Any]]] = None,
        items: Optional[int] = None,
    ):
        self._report = report
        self._worst = worst
        self._items = items

    @property
    def concordant(self) -> bool:
        """Every element bit-exact."""
        return bool(self._report["concordant"])

    @property
    def elements(self) -> int:
        """Elements compared, over every output."""
        return int(self._report["elements"])

    @property
    def bit_exact(self) -> int:
        """Elements whose bits are equal."""
        return int(self._report["bit_exact"])

    @property
    def mismatched(self) -> int:
        """Elements that differ."""
        return self.elements - self.bit_exact

    @property
    def storage(self) -> str:
        """The storage format whose values the hardware's must be (``fp16``)."""
        return str(self._report.get("storage", ""))

    @property
    def max_ulps(self) -> int:
        """The largest distance, in units in the last place of the storage format."""
        return int(self._report["max_ulps"])

    @property
    def ulp_histogram(self) -> Dict[str, int]:
        """Elements by distance in ULPs: ``"0"`` (equal), ``"1"``, ``"2"``, ``"3-4"``, ...,
        ``">32768"``, ``"NaN vs number"``."""
        counts = self._report["ulp_histogram"]
        return dict(zip(_bucket_labels(len(counts)), counts))

    @property
    def outputs(self) -> List[Dict[str, Any]]:
        """Per output: ``name``, ``shape``, ``elements``, ``bit_exact``, ``max_ulps``,
        ``nan_mismatches``, ``inf_mismatches``, ``not_storage_values``, ``max_abs_err``,
        ``max_rel_err``, ``qsnr_db`` (statistics as floats)."""
        out = []
        for o in self._report["outputs"]:
            o = dict(o)
            for k in ("max_abs_err", "max_rel_err", "qsnr_db"):
                o[k] = _float(o[k])
            out.append(o)
        return out

    @property
    def qsnr_db(self) -> Dict[str, float]:
        """QSNR of the software against the hardware per output, in dB (``inf`` when
        every element is equal)."""
        return {o["name"]: _float(o["qsnr_db"]) for o in self._report["outputs"]}

    @property
    def mismatches(self) -> List[Dict[str, Any]]:
        """The first mismatches in output order: ``output``, ``index`` (item first),
        ``tile``, ``lane``, ``hardware``/``software`` values and bits, ``ulps``, and ``line``
        and ``source``: the firmware's ``v_wr`` that produced the element."""
        return copy.deepcopy(self._report["mismatches"])

    @property
    def first_mismatch(self) -> Optional[Dict[str, Any]]:
        """The first mismatch (with its firmware ``line``), or ``None``."""
        m = self._report["mismatches"]
        return copy.deepcopy(m[0]) if m else None

    @property
    def worst(self) -> Optional[List[Dict[str, Any]]]:
        """A campaign's largest mismatches (NaN against a number first, then the most
        ULPs), or ``None`` for a report of ``Graph.diff``."""
        return copy.deepcopy(self._worst)

    @property
    def items(self) -> Optional[int]:
        """A campaign's input sets compared, or ``None``."""
        return self._items

    def to_dict(self, extras: bool = False) -> Dict[str, Any]:
        """The report as ``nnpc diff --json`` prints it (non-finite statistics are the
        strings ``"inf"``, ``"-inf"``, ``"nan"``). ``extras`` adds a campaign's ``items`` and
        ``worst``."""
        d = copy.deepcopy(self._report)
        if extras and self._items is not None:
            d["items"] = self._items
            d["worst"] = copy.deepcopy(self._worst)
        return d

    def to_html(self) -> str:
        """The report as one self-contained web page, the page ``nnpc diff --report``
        writes (rendered by the same Rust function): verdict, counts, ULP histogram, heatmaps
        where the report has maps (``Graph.diff(..., maps=True)``), the first mismatches with
        their firmware lines, the trace and the explain rows where present."""
        from . import _nnpc

        return _nnpc.report_html(json.dumps(self._report))

    def save_html(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Write :meth:`to_html` to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_html())

    def __repr__(self) -> str:
        state = "concordant" if self.concordant else f"{self.mismatched} mismatched"
        return f"<nnpc.DiffReport {state}: {self.bit_exact}/{self.elements} bit-exact>"
