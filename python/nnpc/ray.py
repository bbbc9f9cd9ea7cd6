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
import weakref
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import DiffReport, Graph, _as_array, _nnpc
from . import compile as _compile
from ._errors import DataError, Error, ExecutionError

try:  # Ray is an optional extra.
    import ray
    import ray.data
except ImportError:  # pragma: no cover - exercised only without the extra
    ray = None  # type: ignore[assignment]

__all__ = [
    "Program",
    "Runner",
    "BatchFailed",
    "diff_dataset",
    "read_shards",
    "read_parquet",
    "merge_parts",
]

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
    """A batch's column as one array ``[rows, *shape]``: tensor columns come as one array,
    list columns as an object array of rows or rows of ``prod(shape)`` numbers (reshaped);
    any other shape is an error, never a reshape of its elements into the declaration's."""
    if isinstance(values, np.ndarray) and values.dtype == object:
        values = np.stack([np.asarray(v) for v in values])
    a = _as_array(values, name)
    if a.dtype == object:
        raise DataError(f"column `{name}` does not hold numbers")
    rows = a.shape[0] if a.ndim else 1
    want = (rows,) + tuple(shape)
    if a.shape != want:
        if a.shape != (rows, int(np.prod(shape))):
            raise DataError(
                f"column `{name}` has rows of shape {list(a.shape[1:])}, the declaration is "
                f"{list(shape)}; help: store each row as the declared shape (or as "
                f"{int(np.prod(shape))} numbers in row-major order)"
            )
        a = a.reshape(want)
    return a


def _runs(ids: np.ndarray) -> str:
    """Sorted item ids as ranges: ``0-1023, 2048``."""
    ids = np.unique(np.asarray(ids, dtype=np.int64))
    if ids.size == 0:
        return "no items"
    cut = np.flatnonzero(np.diff(ids) != 1) + 1
    runs = [f"{r[0]}-{r[-1]}" if r.size > 1 else f"{r[0]}" for r in np.split(ids, cut)]
    more = f", ... ({len(runs) - 8} more runs)" if len(runs) > 8 else ""
    return ", ".join(runs[:8]) + more


class BatchFailed(ExecutionError):
    """A campaign's batch killed the worker that ran it more than ``max_retries`` times (a
    crash of the process itself: a signal, an abort, memory). ``items`` are the batch's item
    ids (ranges), ``shards`` the shards they come from (where the dataset names them),
    ``deaths`` how often it killed its worker."""

    def __init__(self, items: str, shards: Sequence[str], deaths: int, max_retries: int):
        self.items, self.shards, self.deaths = items, list(shards), deaths
        where = f" of shard(s) {', '.join(f'`{s}`' for s in self.shards)}" if self.shards else ""
        super().__init__(
            f"the batch of items {items}{where} killed its worker {deaths} time(s) "
            f"(max_retries={max_retries}); help: diff those items alone (Graph.diff) to find "
            "the cause, or raise max_retries if the deaths were the node's, not the batch's"
        )

    def __reduce__(self) -> Any:  # raised on a worker, re-raised on the driver
        return (_batch_failed, (self.items, self.shards, self.deaths, str(self)))


def _batch_failed(items: str, shards: List[str], deaths: int, message: str) -> BatchFailed:
    e = BatchFailed.__new__(BatchFailed)
    e.items, e.shards, e.deaths = items, shards, deaths
    ExecutionError.__init__(e, message)
    return e


class _Ledger:
    """The driver's record of a campaign's batches (a Ray actor): each batch's starts and
    finishes, so that a start of a batch whose last start never finished counts a death of
    its worker (Ray restarts the actor and retries the batch on its own)."""

    def __init__(self, max_retries: int):
        self.max_retries = max_retries
        self.running: Dict[Tuple[int, int, int], Tuple[str, List[str]]] = {}
        self.deaths: Dict[Tuple[int, int, int], int] = {}
        self.refused: Optional[Tuple[str, List[str], int]] = None

    def start(self, key: Tuple[int, int, int], items: str, shards: List[str]) -> Tuple[int, int]:
        """The batch's deaths so far and ``max_retries`` (past it the batch is refused)."""
        if key in self.running:
            self.deaths[key] = self.deaths.get(key, 0) + 1
        self.running[key] = (items, shards)
        deaths = self.deaths.get(key, 0)
        if deaths > self.max_retries and self.refused is None:
            self.refused = (items, shards, deaths)
        return deaths, self.max_retries

    def finish(self, key: Tuple[int, int, int]) -> None:
        self.running.pop(key, None)

    def failed(self) -> Optional[Tuple[str, List[str], int]]:
        """The refused batch, else the running batch that killed its worker most often."""
        if self.refused is not None:
            return self.refused
        dead = [(self.deaths[k], v) for k, v in self.running.items() if self.deaths.get(k)]
        if not dead:
            return None
        deaths, (items, shards) = max(dead, key=lambda d: d[0])
        return items, shards, deaths


class Runner:
    """A callable class for ``ray.data.Dataset.map_batches`` (``batch_format="numpy"``).

    ``mode="run"`` (the software graph) or ``"emulate"`` (the hardware model) adds a column
    per output (``out.<name>``, the dtype of ``nnpc run -o``); ``mode="diff"`` compares the
    hardware columns (``hardware_prefix + output``) with the software graph and returns one
    row per batch: ``part``, the batch's campaign part (JSON), for :func:`merge_parts`.
    ``weights`` maps loaded matrices and vectors to arrays; ``None`` is the seeded random
    weights of ``seed`` (those of ``nnpc run --seed``). ``threads`` caps the worker's Rust
    threads (give the CPUs Ray reserves for it: ``num_cpus``). An error of a batch names its
    items and, where the dataset has the column ``shard_column``, its shards.
    Subclasses override :meth:`process` (one batch's work).
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
        shard_column: str = "shard",
        ledger: Any = None,
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
        self.shard_column = shard_column
        self._ledger = ledger  # diff_dataset's _Ledger: batches that kill their worker

    def _where(self, batch: Mapping[str, Any]) -> Tuple[str, List[str]]:
        """The batch's items (ranges of ids) and shards, as errors name them."""
        ids = batch.get(self.id_column)
        items = _runs(np.asarray(ids)) if ids is not None else f"{_rows(batch)} rows"
        shards = batch.get(self.shard_column)
        return items, sorted({str(v) for v in shards}) if shards is not None else []

    def __call__(self, batch: Dict[str, Any]) -> Dict[str, np.ndarray]:
        items, shards = self._where(batch)
        key = None
        if self._ledger is not None:
            ids = np.asarray(batch.get(self.id_column, np.zeros(0)), dtype=np.int64)
            key = (int(ids.min()), int(ids.max()), ids.size) if ids.size else (0, 0, 0)
            deaths, limit = ray.get(self._ledger.start.remote(key, items, shards))
            if deaths > limit:
                raise BatchFailed(items, shards, deaths, limit)
        try:
            out = self.process(batch)
        except Error as e:
            if not isinstance(e, (DataError, ExecutionError)) or isinstance(e, BatchFailed):
                raise
            where = f" of shard(s) {', '.join(f'`{s}`' for s in shards)}" if shards else ""
            raise type(e)(f"items {items}{where}: {e}") from None
        if key is not None:
            self._ledger.finish.remote(key)
        return out

    def _inputs(self, batch: Mapping[str, Any]) -> Dict[str, np.ndarray]:
        missing = [n for n in self.graph.inputs if n not in batch]
        if missing:
            raise DataError(f"the dataset has no column for input(s) {missing}")
        return {n: _column(batch[n], s, n) for n, s in self.graph.inputs.items()}

    def process(self, batch: Dict[str, Any]) -> Dict[str, np.ndarray]:
        """One batch's work: its outputs (run, emulate) or its campaign part (diff)."""
        inputs = self._inputs(batch)
        rows = next(iter(inputs.values())).shape[0] if inputs else _rows(batch)
        if self.mode != "diff":
            run = self.graph.run if self.mode == "run" else self.graph.emulate
            outs = run(self.weights, inputs, batch=rows)
            out = dict(batch)
            for name, a in outs.items():
                out[self.output_prefix + name] = a
            return out
        if self.id_column not in batch:
            raise DataError(
                f"the dataset has no item id column `{self.id_column}` (read_shards and "
                "read_parquet add one)"
            )
        ids = np.asarray(batch[self.id_column]).astype(np.uint64)
        hardware = {}
        for name, shape in self.graph.outputs.items():
            col = self.hardware_prefix + name
            if col not in batch:
                raise DataError(f"the dataset has no hardware column `{col}` for output `{name}`")
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


def _rows(batch: Mapping[str, Any]) -> int:
    return len(next(iter(batch.values()))) if batch else 0


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


def _nnpc_error(e: BaseException) -> Optional[Error]:
    """The nnpc error a worker raised, from the exceptions Ray wraps it in."""
    seen = set()
    stack: List[Any] = [e]
    while stack:
        x = stack.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        cause = getattr(x, "cause", None)
        if isinstance(x, Error) and not isinstance(x, getattr(ray.exceptions, "RayError", ())):
            return x
        stack += [x.__cause__, x.__context__, cause if isinstance(cause, BaseException) else None]
    return None


def diff_dataset(
    program: Union[Program, PathLike],
    dataset: "ray.data.Dataset",
    *,
    target: Optional[str] = None,
    weights: Optional[Mapping[str, Any]] = None,
    seed: int = 0,
    hardware_prefix: str = "hw.",
    id_column: str = "item",
    shard_column: str = "shard",
    first: int = 10,
    worst: int = 10,
    batch_size: int = 1024,
    concurrency: Union[int, Tuple[int, int]] = 2,
    num_cpus: float = 1,
    max_retries: int = 2,
    runner: type = Runner,
) -> DiffReport:
    """The concordance report of a whole dataset: each batch diffed on a worker, the parts
    merged as they arrive (the driver holds one merged part). Equal to ``nnpc diff``'s report
    on the same data (its QSNR up to the order of the f64 sums), with ``items`` and the
    ``worst`` mismatches.

    A dataset of :func:`read_shards` is checked against the program's declarations first
    (every shard's tensors, names and shapes: :class:`nnpc.DataError` naming the shard). A
    batch that kills its worker (Ray restarts the worker and retries it) is retried
    ``max_retries`` times, then :class:`BatchFailed` names its items and shards. ``runner``
    is the class mapped over the batches (a subclass of :class:`Runner`)."""
    _need_ray()
    if max_retries < 0:
        raise ValueError(f"max_retries={max_retries}: give 0 or more")
    if not isinstance(program, Program):
        program = Program(program, target)
    table = _SHARD_TABLES.get(dataset)
    if table is not None:
        _check_shards(program.compile(), table)
    ledger = ray.remote(num_cpus=0)(_Ledger).remote(max_retries)
    parts = dataset.map_batches(
        runner,
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
            shard_column=shard_column,
            ledger=ledger,
        ),
        batch_size=batch_size,
        batch_format="numpy",
        num_cpus=num_cpus,
        # No remote args of its own (max_task_retries): they would keep Ray Data from fusing
        # the shard reads into the workers, whose reads then wait for CPUs the workers hold.
        **_actors(concurrency),
    )
    merged: Optional[str] = None
    try:
        for batch in parts.iter_batches(batch_size=256, batch_format="numpy"):
            texts = [str(p) for p in batch["part"]]
            merged = merge_parts(([merged] if merged else []) + texts)
    except Exception as e:
        failed = ray.get(ledger.failed.remote())
        if failed is not None:
            raise BatchFailed(*failed, max_retries) from e
        found = _nnpc_error(e)
        if found is not None:
            raise found from e
        raise
    finally:
        ray.kill(ledger)
    if merged is None:
        raise DataError("the dataset is empty")
    return report_of(merged)


# What read_shards read of each dataset's shards, for diff_dataset's check.
_SHARD_TABLES: "weakref.WeakKeyDictionary[Any, List[Dict[str, Any]]]" = weakref.WeakKeyDictionary()

_SAFETENSORS_BYTES = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}


def _header(path: str) -> Dict[str, Tuple[int, ...]]:
    """Each tensor's shape in a shard, from its header, checked against the file's size (a
    truncated shard is an error naming it here, not a failure on a worker)."""
    size = os.path.getsize(path)
    try:
        with open(path, "rb") as f:
            if path.endswith(".npy"):
                version = np.lib.format.read_magic(f)
                read = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
                shape, _, dtype = read(f)
                spans = {"": (f.tell(), int(np.prod(shape)) * dtype.itemsize, str(dtype))}
                shapes = {"": tuple(shape)}
            else:
                n = int.from_bytes(f.read(8), "little")
                if n > size:
                    raise ValueError(f"its header length {n} is past its end")
                header = json.loads(f.read(n))
                shapes, spans = {}, {}
                for k, v in header.items():
                    if k == "__metadata__":
                        continue
                    shapes[k] = tuple(int(d) for d in v["shape"])
                    start, end = (int(o) for o in v["data_offsets"])
                    per = _SAFETENSORS_BYTES.get(v["dtype"])
                    if per is not None and end - start != int(np.prod(shapes[k])) * per:
                        raise ValueError(
                            f"tensor `{k}` ({v['dtype']} {list(shapes[k])}) has "
                            f"{end - start} bytes of data, its shape needs "
                            f"{int(np.prod(shapes[k])) * per}"
                        )
                    spans[k] = (8 + n + start, end - start, v["dtype"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"shard `{path}`: cannot read its header ({e})") from None
    for k, (offset, length, dtype) in spans.items():
        if offset + length > size:
            name = f"tensor `{k}`" if k else "its array"
            raise DataError(
                f"shard `{path}` is truncated: {name} ({dtype} {list(shapes[k])}) needs "
                f"{offset + length} bytes, the file has {size}; help: write the shard again"
            )
    return shapes


def _shards(directory: PathLike, what: str) -> Dict[str, str]:
    """A directory's shards by name without extension, in file-name order."""
    d = os.fspath(directory)
    try:
        names = sorted(f for f in os.listdir(d) if f.endswith((".safetensors", ".npy")))
    except OSError as e:
        raise DataError(f"{what} directory `{d}`: {e.strerror}") from None
    if not names:
        raise DataError(f"no .safetensors or .npy shards in {what} directory `{d}`")
    out: Dict[str, str] = {}
    for f in names:
        stem = os.path.splitext(f)[0]
        if stem in out:
            raise DataError(f"{what} directory `{d}` has two shards named `{stem}`: keep one")
        out[stem] = os.path.join(d, f)
    return out


def _named(path: str, shapes: Dict[str, Tuple[int, ...]], npy_name: Optional[str], flag: str):
    """A shard's tensors by name: a ``.npy`` shard's one array is ``npy_name``."""
    if not path.endswith(".npy"):
        return shapes
    if not npy_name:
        raise DataError(
            f"shard `{path}` is a .npy file, which holds one unnamed array; help: pass "
            f"{flag}= (the declaration it holds), or use .safetensors shards"
        )
    return {npy_name: shapes[""]}


def _table(inputs, hardware, input_name, output_name) -> List[Dict[str, Any]]:
    """Every shard pair (input shard, hardware shard of the same name), its tensors'
    shapes and items, and its first item id; shards that do not pair or whose tensors
    disagree on their items are an error naming them."""
    shards = _shards(inputs, "input")
    hw_shards = _shards(hardware, "hardware") if hardware is not None else {}
    if hardware is not None and set(hw_shards) != set(shards):
        lone = sorted(set(shards) - set(hw_shards))
        extra = sorted(set(hw_shards) - set(shards))
        said = []
        if lone:
            said.append(f"input shard(s) without a hardware shard: {', '.join(lone[:5])}")
        if extra:
            said.append(f"hardware shard(s) without an input shard: {', '.join(extra[:5])}")
        raise DataError(
            f"the shards of `{os.fspath(inputs)}` and `{os.fspath(hardware)}` do not pair by "
            f"name ({'; '.join(said)}); help: name each hardware shard as its input shard"
        )
    rows, first = [], 0
    for stem, path in shards.items():
        tensors = _named(path, _header(path), input_name, "input_name")
        hw = hw_shards.get(stem)
        hw_tensors = _named(hw, _header(hw), output_name, "output_name") if hw else {}
        counts = {f"`{path}` tensor `{k}`": v[0] if v else None for k, v in tensors.items()}
        counts.update({f"`{hw}` tensor `{k}`": v[0] if v else None for k, v in hw_tensors.items()})
        if len(set(counts.values())) != 1:
            listed = ", ".join(f"{k}: {n}" for k, n in counts.items())
            raise DataError(
                f"shard `{stem}`: its tensors disagree on the number of input sets ({listed}); "
                "help: every tensor of a shard, and of its hardware shard, holds the same items "
                "first"
            )
        (n,) = set(counts.values())
        rows.append(dict(path=path, hw=hw or "", first=first, n=int(n or 0),
                         tensors=tensors, hw_tensors=hw_tensors))
        first += int(n or 0)
    return rows


def _check_shards(graph: Graph, table: List[Dict[str, Any]]) -> None:
    """Every shard holds each input (and its hardware shard each output) as
    ``[items, *declared shape]``: else an error naming the shard, tensor and shape."""
    for row in table:
        wanted = [(row["path"], row["tensors"], graph.inputs, "input")]
        if row["hw"]:
            wanted.append((row["hw"], row["hw_tensors"], graph.outputs, "output"))
        for path, tensors, decls, kind in wanted:
            for name, shape in decls.items():
                want = [row["n"], *shape]
                if name not in tensors:
                    raise DataError(
                        f"shard `{path}` has no tensor `{name}` (the program's {kind}, "
                        f"{want}); it holds {', '.join(f'`{k}`' for k in tensors) or 'none'}"
                    )
                if list(tensors[name]) != want:
                    raise DataError(
                        f"shard `{path}`: tensor `{name}` has shape {list(tensors[name])}, "
                        f"{kind} `{name}` of the program is {list(shape)}, so {want} for its "
                        f"{row['n']} input sets; help: write the shard as [items, *declared shape]"
                    )


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
    shard_column: str = "shard",
) -> "ray.data.Dataset":
    """A dataset of the input sets in a directory of shards (``.safetensors`` files holding
    every input as ``[n, *shape]``, or ``.npy`` files holding the one input
    ``input_name``), in file-name order, with the hardware's outputs from a directory of
    shards of the same names (extension aside) and sizes (``output_name`` for ``.npy``
    shards), the item id column numbering the input sets across shards, and the column
    ``shard_column`` naming each row's input shard. The driver reads the shards' headers
    (checking that shards pair by name, that each file holds what its header says and that
    a shard's tensors agree on their items; :func:`diff_dataset` checks them against the
    program); the shards are read on the workers."""
    _need_ray()
    table = _table(inputs, hardware, input_name, output_name)

    def expand(shard: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        # One shard per call: its tensors become the columns of its rows.
        path, hw, start, n = (shard[k][0] for k in ("path", "hw", "first", "n"))
        out: Dict[str, np.ndarray] = dict(_read_shard(str(path), input_name))
        if hw:
            for k, v in _read_shard(str(hw), output_name).items():
                out[hardware_prefix + k] = v
        out[id_column] = np.arange(int(start), int(start) + int(n), dtype=np.int64)
        out[shard_column] = np.full(int(n), str(path))
        return out

    rows = [{k: r[k] for k in ("path", "hw", "first", "n")} for r in table]
    ds = ray.data.from_items(rows, override_num_blocks=len(rows))
    ds = ds.map_batches(expand, batch_size=1, batch_format="numpy")
    _SHARD_TABLES[ds] = table
    return ds


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
