"""Concordance campaigns on a Ray cluster (``pip install ./python[ray]``).

A dataset holds one row per input set: a column per program input (the declared shape,
float16/32/64), for a diff a column per output holding the hardware's values (named
``hw.<output>`` by default), and an item id column (``item``, int) that numbers the input sets
in the whole dataset. :func:`read_shards` and :func:`read_parquet` make such datasets from
directories of ``.safetensors``/``.npy`` shards or from Parquet files.

:class:`Runner` is a callable class for ``Dataset.map_batches``: each worker compiles the
program once (its text is what is shipped, a few KB) and runs, emulates or diffs every batch
it is given. :func:`diff_dataset` runs the diff over a whole dataset and merges the parts of
all batches (a Rust function, ``nnpc`` core) into the report ``nnpc diff`` gives on the same
data: counts, ULP histogram, maxima, the first mismatches by item id, plus the worst ones.
See docs/python.md for what grows with the dataset.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import DiffReport, Graph, _as_array, _nnpc
from . import compile as _compile

try:  # Ray is an optional extra.
    import ray
    import ray.data
except ImportError:  # pragma: no cover - exercised only without the extra
    ray = None  # type: ignore[assignment]

__all__ = ["Program", "Runner", "diff_dataset", "read_shards", "read_parquet", "merge_parts"]

PathLike = Union[str, "os.PathLike[str]"]


def _need_ray() -> None:
    if ray is None:
        raise ImportError("nnpc.ray needs Ray: pip install './python[ray]' (ray[data], pyarrow)")


class Program:
    """What a worker needs to compile the firmware: its text, name and target (shipped
    to every worker instead of a path that may not exist there)."""

    def __init__(self, path_or_source: PathLike, target: Optional[str] = None):
        text = path_or_source
        if not (isinstance(text, str) and "\n" in text):
            with open(os.fspath(path_or_source), encoding="utf-8") as f:
                text = f.read()
            self.name = os.fspath(path_or_source)
        else:
            self.name = "<source>"
        self.source: str = str(text)
        self.target = target

    def compile(self) -> Graph:
        """The program's graph (checked and lowered here)."""
        return _compile(self.source, self.target, name=self.name)


def _column(values: Any, shape: Tuple[int, ...], name: str) -> np.ndarray:
    """A batch's column as one array ``[rows, *shape]`` (tensor columns come as one array,
    list columns as an object array of rows)."""
    if isinstance(values, np.ndarray) and values.dtype == object:
        values = np.stack([np.asarray(v) for v in values])
    a = _as_array(values, name)
    if a.dtype == object:
        raise TypeError(f"column `{name}` does not hold numbers")
    rows = a.shape[0] if a.ndim else 1
    want = (rows,) + tuple(shape)
    if a.shape != want:
        if a.size != int(np.prod(want)):
            raise ValueError(
                f"column `{name}` has rows of shape {a.shape[1:]}, the declaration is {shape}"
            )
        a = a.reshape(want)
    return a


class Runner:
    """A callable class for ``ray.data.Dataset.map_batches`` (``batch_format="numpy"``).

    ``mode="run"`` (the software graph) or ``"emulate"`` (the hardware model) adds a column
    per output (``out.<name>``, the dtype of ``nnpc run -o``); ``mode="diff"`` compares the
    hardware columns (``hardware_prefix + output``) with the software graph and returns one
    row per batch: ``part``, the batch's campaign part (JSON), for :func:`merge_parts`.
    ``weights`` maps loaded matrices and vectors to arrays; ``None`` is the seeded random
    weights of ``seed`` (those of ``nnpc run --seed``). ``threads`` caps the worker's Rust
    threads (give the CPUs Ray reserves for it: ``num_cpus``).
    """

    def __init__(
        self,
        program: Program,
        mode: str = "run",
        weights: Optional[Mapping[str, Any]] = None,
        seed: int = 0,
        hardware_prefix: str = "hw.",
        output_prefix: str = "out.",
        id_column: str = "item",
        first: int = 10,
        worst: int = 10,
        threads: Optional[int] = None,
    ):
        # The worker's Rust threads (rayon's pool, made at the first run): the CPUs Ray gives
        # it, not every CPU of the node.
        if threads is not None:
            os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
        if mode not in ("run", "emulate", "diff"):
            raise ValueError(f"mode `{mode}`: one of run, emulate, diff")
        self.graph = program.compile()
        self.mode = mode
        self.seed = seed
        self.weights = (
            {k: _as_array(v, k) for k, v in weights.items()}
            if weights is not None
            else self.graph.random_weights(seed)
        )
        self.hardware_prefix = hardware_prefix
        self.output_prefix = output_prefix
        self.id_column = id_column
        self.first, self.worst = first, worst

    def _inputs(self, batch: Mapping[str, Any]) -> Dict[str, np.ndarray]:
        missing = [n for n in self.graph.inputs if n not in batch]
        if missing:
            raise KeyError(f"the dataset has no column for input(s) {missing}")
        return {n: _column(batch[n], s, n) for n, s in self.graph.inputs.items()}

    def __call__(self, batch: Dict[str, Any]) -> Dict[str, np.ndarray]:
        inputs = self._inputs(batch)
        rows = next(iter(inputs.values())).shape[0] if inputs else len(batch[self.id_column])
        if self.mode != "diff":
            run = self.graph.run if self.mode == "run" else self.graph.emulate
            outs = run(self.weights, inputs, batch=rows)
            out = dict(batch)
            for name, a in outs.items():
                out[self.output_prefix + name] = a
            return out
        if self.id_column not in batch:
            raise KeyError(
                f"the dataset has no item id column `{self.id_column}` (read_shards and "
                "read_parquet add one)"
            )
        ids = np.asarray(batch[self.id_column]).astype(np.uint64)
        hardware = {}
        for name, shape in self.graph.outputs.items():
            col = self.hardware_prefix + name
            if col not in batch:
                raise KeyError(f"the dataset has no hardware column `{col}` for output `{name}`")
            hardware[name] = _column(batch[col], shape, col)
        # The block's rows by item id, so that its first mismatches are its lowest ids.
        if np.any(ids[1:] < ids[:-1]):
            order = np.argsort(ids, kind="stable")
            ids = ids[order]
            inputs = {k: v[order] for k, v in inputs.items()}
            hardware = {k: v[order] for k, v in hardware.items()}
        part = self.graph._core.diff_part(
            hardware, inputs, ids.tolist(), self.weights, self.seed, self.first, self.worst
        )
        return {"part": np.array([part], dtype=object)}


def _actors(concurrency: Union[int, Tuple[int, int]]) -> Dict[str, Any]:
    """``map_batches``' pool of actors: ``compute=ActorPoolStrategy`` where Ray has it (2.51
    and later deprecate ``concurrency``)."""
    strategy = getattr(ray.data, "ActorPoolStrategy", None)
    if strategy is None:
        return {"concurrency": concurrency}
    if isinstance(concurrency, tuple):
        return {"compute": strategy(min_size=concurrency[0], max_size=concurrency[1])}
    return {"compute": strategy(size=concurrency)}


def merge_parts(parts: Iterable[str]) -> str:
    """Merge campaign parts (JSON strings) into one (Rust: ``nnp_runtime::campaign::merge``)."""
    return _nnpc.merge_parts(list(parts))


def report_of(part: str) -> DiffReport:
    """The report of a merged part."""
    report, worst, items = _nnpc.finish_part(part)
    return DiffReport(json.loads(report), json.loads(worst), items)


def diff_dataset(
    program: Union[Program, PathLike],
    dataset: "ray.data.Dataset",
    *,
    target: Optional[str] = None,
    weights: Optional[Mapping[str, Any]] = None,
    seed: int = 0,
    hardware_prefix: str = "hw.",
    id_column: str = "item",
    first: int = 10,
    worst: int = 10,
    batch_size: int = 1024,
    concurrency: Union[int, Tuple[int, int]] = 2,
    num_cpus: float = 1,
) -> DiffReport:
    """The concordance report of a whole dataset: each batch diffed on a worker, the parts
    merged as they arrive (the driver holds one merged part). Equal to ``nnpc diff``'s report
    on the same data (its QSNR up to the order of the f64 sums), with ``items`` and the
    ``worst`` mismatches."""
    _need_ray()
    if not isinstance(program, Program):
        program = Program(program, target)
    parts = dataset.map_batches(
        Runner,
        fn_constructor_kwargs=dict(
            program=program,
            mode="diff",
            weights=weights,
            seed=seed,
            hardware_prefix=hardware_prefix,
            id_column=id_column,
            first=first,
            worst=worst,
            threads=max(1, int(num_cpus)),
        ),
        batch_size=batch_size,
        batch_format="numpy",
        num_cpus=num_cpus,
        **_actors(concurrency),
    )
    merged: Optional[str] = None
    for batch in parts.iter_batches(batch_size=256, batch_format="numpy"):
        texts = [str(p) for p in batch["part"]]
        merged = merge_parts(([merged] if merged else []) + texts)
    if merged is None:
        raise ValueError("the dataset is empty")
    return report_of(merged)


def _shard_rows(path: str, name: Optional[str]) -> Dict[str, int]:
    """The leading dimension of each tensor of a shard, from its header alone."""
    if path.endswith(".npy"):
        a = np.load(path, mmap_mode="r")
        return {name or "": int(a.shape[0])}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return {k: int(v["shape"][0]) for k, v in header.items() if k != "__metadata__"}


def _shards(directory: PathLike) -> List[str]:
    d = os.fspath(directory)
    names = sorted(f for f in os.listdir(d) if f.endswith((".safetensors", ".npy")))
    if not names:
        raise ValueError(f"no .safetensors or .npy shards in `{d}`")
    return [os.path.join(d, f) for f in names]


def _read_shard(path: str, npy_name: Optional[str]) -> Dict[str, np.ndarray]:
    tensors = _nnpc.load_tensors(path)
    if path.endswith(".npy"):
        (only,) = tensors.values()
        return {npy_name or os.path.basename(path): only}
    return tensors


def read_shards(
    inputs: PathLike,
    hardware: Optional[PathLike] = None,
    *,
    input_name: Optional[str] = None,
    output_name: Optional[str] = None,
    hardware_prefix: str = "hw.",
    id_column: str = "item",
) -> "ray.data.Dataset":
    """A dataset of the input sets in a directory of shards (``.safetensors`` files holding
    every input as ``[n, *shape]``, or ``.npy`` files holding the one input
    ``input_name``), in file-name order, with the hardware's outputs from a directory of
    shards of the same names and sizes (``output_name`` for ``.npy`` shards), and the item
    id column numbering the input sets across shards. Shards are read on the workers; the
    driver reads their headers only."""
    _need_ray()
    shards = _shards(inputs)
    hw_shards = _shards(hardware) if hardware is not None else [None] * len(shards)
    if len(hw_shards) != len(shards):
        raise ValueError(f"{len(shards)} input shards but {len(hw_shards)} hardware shards")
    rows, first = [], 0
    for path, hw in zip(shards, hw_shards):
        counts = set(_shard_rows(path, input_name).values())
        if hw is not None:
            counts |= set(_shard_rows(hw, output_name).values())
        if len(counts) != 1:
            raise ValueError(f"shard `{path}`: its tensors (and hardware) disagree on items {counts}")
        (n,) = counts
        rows.append({"path": path, "hw": hw or "", "first": first, "n": n})
        first += n

    def expand(shard: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        # One shard per call: its tensors become the columns of its rows.
        path, hw, start, n = (shard[k][0] for k in ("path", "hw", "first", "n"))
        out: Dict[str, np.ndarray] = dict(_read_shard(str(path), input_name))
        if hw:
            for k, v in _read_shard(str(hw), output_name).items():
                out[hardware_prefix + k] = v
        out[id_column] = np.arange(int(start), int(start) + int(n), dtype=np.int64)
        return out

    ds = ray.data.from_items(rows, override_num_blocks=len(rows))
    return ds.map_batches(expand, batch_size=1, batch_format="numpy")


def read_parquet(paths: Union[PathLike, Sequence[PathLike]], **kwargs: Any) -> "ray.data.Dataset":
    """A dataset from Parquet files whose columns are the program's inputs, the hardware's
    outputs (``hw.<output>``) and the item id column, as tensor columns (what
    ``Dataset.write_parquet`` writes) or lists of numbers (reshaped to the declarations)."""
    _need_ray()
    if isinstance(paths, (str, os.PathLike)):
        paths = os.fspath(paths)
    else:
        paths = [os.fspath(p) for p in paths]
    return ray.data.read_parquet(paths, **kwargs)
