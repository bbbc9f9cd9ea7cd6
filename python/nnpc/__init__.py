"""nnpc from Python: check, run, emulate and diff NNP firmware, bit-exactly.

The computation is nnpc's Rust crates' (the same code as the ``nnpc`` command line, so the
same bits); this package converts arrays and errors. ::

    import nnpc
    g = nnpc.compile("samples/lstm.nnp")
    sw = g.run(batch=4, seed=7)                 # {"h": array [4, ...]}, as `nnpc run`
    hw = g.emulate(batch=4, seed=7)             # the hardware model, as `nnpc emulate`
    print(g.diff(hw, batch=4, seed=7).concordant)

Arrays are numpy arrays of float16, bfloat16 (``ml_dtypes``), float32 or float64 in any
layout (F order, transposed, stepped, negative or zero strides), read in their logical order
(float64 is rounded to the nearest float32, as the command line reads float64 files), or
anything with ``__dlpack__`` or ``__array__`` on the CPU (a ``torch.Tensor``, its views and
``torch.bfloat16`` included). Outputs are numpy arrays that own their memory:
``torch.from_numpy(out)`` takes them without a copy.
"""

from __future__ import annotations

import json
import operator
import os
import struct
import warnings
from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Tuple, Union

import numpy as np

from . import _nnpc
from ._errors import ArgumentError, DataError, Error, ExecutionError, FirmwareError
from ._report import DiffReport

__all__ = [
    "compile",
    "quantize",
    "Quantized",
    "load_tensors",
    "Graph",
    "Weights",
    "DiffReport",
    "Error",
    "FirmwareError",
    "DataError",
    "ArgumentError",
    "ExecutionError",
]

__version__ = "0.1.0"

ArrayLike = Any
"""A numpy array, or a CPU tensor with ``__dlpack__`` or ``__array__`` (``torch.Tensor``)."""


def _as_array(value: ArrayLike, name: str) -> np.ndarray:
    """``value`` as a numpy array that the Rust core reads (float16/32/64 in the machine's
    byte order, any layout), without a copy where its memory allows (DLPack). bfloat16
    (``ml_dtypes.bfloat16``, ``torch.bfloat16``) becomes float32 exactly."""
    if type(value).__module__.startswith("torch") and hasattr(value, "resolve_neg"):
        # A parameter's values are read (no gradient flows through a run); a lazy negation
        # is not in the memory.
        value = value.detach().resolve_conj().resolve_neg()
        if value.device.type == "cpu" and str(value.dtype) in _TORCH_NUMPY_DTYPES:
            return value.numpy()  # a view of the tensor's memory, as DLPack gives
    if _is_torch_bfloat16(value):
        import torch

        # numpy has no bfloat16: the 16-bit patterns cross DLPack as int16.
        return _bfloat16_to_float32(_from_dlpack(value, name, view=torch.int16))
    if np.ma.is_masked(value):
        raise TypeError(
            f"`{name}`: a masked array's masked elements have no values; give "
            "`a.filled(value)` or the array without a mask"
        )
    if isinstance(value, np.ndarray):
        a = value
    elif hasattr(value, "__dlpack__"):
        a = _from_dlpack(value, name)
    elif hasattr(value, "__array__"):
        a = np.asarray(value)
    else:
        raise TypeError(
            f"`{name}`: expected a numpy array or a torch.Tensor, not {type(value).__name__}"
        )
    if a.dtype.name == "bfloat16" and a.dtype.itemsize == 2:  # ml_dtypes.bfloat16
        return _bfloat16_to_float32(a)
    if a.dtype.kind == "f" and not a.dtype.isnative:
        return a.astype(a.dtype.newbyteorder("="))  # a byte swap: the same values
    return a


# The torch dtypes numpy holds as they are.
_TORCH_NUMPY_DTYPES = ("torch.float16", "torch.float32", "torch.float64")


def _from_dlpack(value: Any, name: str, view: Any = None) -> np.ndarray:
    try:
        return np.from_dlpack(value if view is None else value.view(view))
    except (BufferError, RuntimeError, TypeError, ValueError) as e:
        raise TypeError(
            f"`{name}`: cannot read this {type(value).__name__} through DLPack ({e}); "
            "give a CPU tensor of float16/bfloat16/float32/float64 (`t.detach().cpu()`)"
        ) from None


def _is_torch_bfloat16(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and str(
        getattr(value, "dtype", "")
    ) == "torch.bfloat16"


def _bfloat16_to_float32(a: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 patterns (any 16-bit view of them): a bfloat16 is the
    upper half of the float32 of the same value, so the widening is exact."""
    bits = a.view(np.uint16).astype(np.uint32, order="C")
    return (bits << np.uint32(16)).view(np.float32)


_USIZE_MAX = 2 ** (8 * struct.calcsize("P")) - 1
_U64_MAX = 2**64 - 1


def _int_arg(value: Any, name: str, low: int, high: int) -> int:
    """``value`` as an int in ``[low, high]``; :class:`ArgumentError` naming ``name`` if it is
    not one."""
    if isinstance(value, (bool, np.bool_)) or not hasattr(type(value), "__index__"):
        raise ArgumentError(
            f"`{name}` must be an integer from {low} to {high}, "
            f"not {type(value).__name__} {value!r}"
        )
    v = operator.index(value)
    if not low <= v <= high:
        raise ArgumentError(f"`{name}` = {v} is out of range: it takes {low} to {high}")
    return v


def _count(value: Any, name: str) -> int:
    """A count or index the Rust core takes as a ``usize`` (its own limits apply after)."""
    return _int_arg(value, name, 0, _USIZE_MAX)


def _seed(value: Any) -> int:
    return _int_arg(value, "seed", 0, _U64_MAX)


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ArgumentError(f"`{name}` must be True or False, not {type(value).__name__} {value!r}")
    return bool(value)


def _dtype(dtype: Any) -> Optional[str]:
    """An output dtype as the core names it: ``None``, a name (``"float32"``, ``"f16"``), a
    numpy dtype or type (``np.float32``) or a torch dtype (``torch.float16``)."""
    if dtype is None or isinstance(dtype, str):
        return dtype
    name = str(dtype).rsplit(".", 1)[-1].strip("'>")  # torch.float32, <class 'numpy.float32'>
    try:
        name = np.dtype(dtype).name
    except TypeError:
        pass
    if name in ("float16", "float32"):
        return name
    raise ArgumentError(f"`dtype` = {dtype!r}: outputs are float16 or float32 (a name, a numpy or a torch dtype)")


def _device(device: Any) -> None:
    """The CPU (``"cpu"`` or ``torch.device("cpu")``): the package's graph runs there."""
    if str(device) != "cpu":
        raise ArgumentError(
            f"`device` = {str(device)!r}: this package runs the graph on the CPU (`device=\"cpu\"`); "
            "the graph on a CUDA GPU is the command line's `--device cuda`, built with "
            "scripts/cuda-build.sh"
        )


def _run_args(batch: Any, seed: Any, random_missing: Any) -> Tuple[Optional[int], int, bool]:
    batch = None if batch is None else _count(batch, "batch")
    return batch, _seed(seed), _flag(random_missing, "random_missing")


def _arrays(values: Optional[Mapping[str, ArrayLike]], what: str) -> Optional[Dict[str, np.ndarray]]:
    if values is None:
        return None
    if not isinstance(values, Mapping):
        raise TypeError(f"{what} must be a mapping of declaration names to arrays")
    return {str(k): _as_array(v, str(k)) for k, v in values.items()}


class Weights(Mapping[str, np.ndarray]):
    """Weights copied once into nnpc and frozen: pass them as ``weights=`` to every call.

    ``Weights(mapping)`` takes what ``weights=`` takes (arrays of any dtype and layout that
    :meth:`Graph.run` reads, with the same bits); ``Weights(path)`` reads a weights file as
    ``nnpc run --weights`` does. A graph's warm session prepared with a ``Weights`` knows it
    by identity, so a later call with it reads no weight (arrays are compared with the
    prepared weights, element by element, every call). It is a read-only mapping:
    ``w["W"]`` is a float32 copy; it pickles as its arrays.
    """

    def __init__(self, weights: Union[str, "os.PathLike[str]", Mapping[str, ArrayLike]]):
        if isinstance(weights, (str, os.PathLike)):
            weights = load_tensors(weights)
        if isinstance(weights, Weights):
            self._core: "_nnpc.Weights" = weights._core
        else:
            self._core = _nnpc.Weights(_arrays(weights, "weights") or {})
        self._names: List[str] = self._core.names()

    def __getitem__(self, name: str) -> np.ndarray:
        return self._core.get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{n}{self._core.shape(n)}" for n in self._names)
        return f"<nnpc.Weights {shapes}>"

    def __reduce__(self):
        return (Weights, (dict(self.items()),))


def _weights(values: Any) -> Any:
    """``weights=`` for the Rust core: a dict of arrays, or a ``Weights``' own core."""
    if isinstance(values, Weights):
        return values._core
    return _arrays(values, "weights")


class Graph:
    """A checked firmware program, lowered to its software graph (``nnpc.compile``).

    The software graph's session stays warm between calls: the second ``run`` of a graph
    costs the run alone. Runs release the GIL, so threads may run graphs side by side.
    """

    def __init__(self, core: "_nnpc.Graph"):
        self._core = core
        self._decls: List[Tuple[str, str, List[int]]] = core.declarations()
        self._weights = set(core.weight_names())

    def __repr__(self) -> str:
        outs = ", ".join(f"{n}{list(s)}" for n, s in self.outputs.items())
        return f"<nnpc.Graph {self.name!r} on {self.target!r} (N = {self.native}) -> {outs}>"

    @property
    def name(self) -> str:
        """The firmware's file name (or the name given with its source)."""
        return self._core.source_name()

    @property
    def target(self) -> str:
        """The target's name."""
        return self._core.target()[0]

    @property
    def native(self) -> int:
        """The native dimension N."""
        return self._core.target()[1]

    @property
    def storage(self) -> str:
        """The storage format (e.g. ``fp16``)."""
        return self._core.target()[2]

    def _shapes(self, kind: str) -> Dict[str, Tuple[int, ...]]:
        return {n: tuple(s) for n, k, s in self._decls if k == kind}

    @property
    def inputs(self) -> Dict[str, Tuple[int, ...]]:
        """Each input's declared shape (a run's inputs are ``[batch, *shape]`` or ``shape``)."""
        return self._shapes("input")

    @property
    def outputs(self) -> Dict[str, Tuple[int, ...]]:
        """Each output's declared shape (a run's outputs are ``[batch, *shape]``)."""
        return self._shapes("output")

    @property
    def weights(self) -> Dict[str, Tuple[int, ...]]:
        """Each loaded matrix's and vector's declared shape (what ``weights=`` holds)."""
        return {n: tuple(s) for n, _, s in self._decls if n in self._weights}

    @property
    def warnings(self) -> List[Dict[str, Any]]:
        """The checker's warnings, as dicts like ``FirmwareError.diagnostics``."""
        return list(self._core.warnings())

    def _data(self, weights, inputs) -> Tuple[Any, Optional[dict]]:
        w, x = _weights(weights), _arrays(inputs, "inputs")
        declared = {n for n, _, _ in self._decls}
        names = set(weights) if isinstance(weights, Weights) else set(w or ())
        for where, given in (("weights", names), ("inputs", x)):
            for name in sorted(set(given or ()) - declared):
                warnings.warn(
                    f"{where}: `{name}` is not a declaration of the program; it is not used",
                    stacklevel=3,
                )
        for name in sorted(names & set(x or ()) & declared):
            warnings.warn(f"`{name}` is in both; the one in weights is used", stacklevel=3)
        return w, x

    def run(
        self,
        weights: Optional[Mapping[str, ArrayLike]] = None,
        inputs: Optional[Mapping[str, ArrayLike]] = None,
        batch: Optional[int] = None,
        seed: int = 0,
        *,
        random_missing: bool = False,
        dtype: Any = None,
        device: Any = "cpu",
    ) -> Dict[str, np.ndarray]:
        """Run the software graph: the bits of ``nnpc run``.

        Without ``weights`` and ``inputs``, seeded random data of the declared shapes
        (``batch`` items, 1 by default): the data ``nnpc run --seed SEED --batch B`` uses.
        Inputs are batch-first (``[batch, *shape]``) or one set (``shape``, every item's);
        ``batch`` defaults to the inputs' leading dimension. ``random_missing`` fills the
        tensors the mappings lack with seeded random data (``--random-missing``).

        Returns ``{output: array [batch, *shape]}``, float16 where the storage format fits
        it, else float32 (``nnpc run -o``'s types; ``dtype="float32"``, ``np.float32`` or
        ``torch.float32`` asks for float32). ``device`` is ``"cpu"`` (``--device``; CUDA is
        the command line's).
        """
        _device(device)
        batch, seed, random_missing = _run_args(batch, seed, random_missing)
        w, x = self._data(weights, inputs)
        return self._core.run(w, x, batch, seed, random_missing, _dtype(dtype))

    def emulate(
        self,
        weights: Optional[Mapping[str, ArrayLike]] = None,
        inputs: Optional[Mapping[str, ArrayLike]] = None,
        batch: Optional[int] = None,
        seed: int = 0,
        *,
        random_missing: bool = False,
        dtype: Any = None,
    ) -> Dict[str, np.ndarray]:
        """Run the emulator (the instruction-level hardware model): the bits of
        ``nnpc emulate``. Arguments and result as :meth:`run`'s."""
        batch, seed, random_missing = _run_args(batch, seed, random_missing)
        w, x = self._data(weights, inputs)
        return self._core.emulate(w, x, batch, seed, random_missing, _dtype(dtype))

    def diff(
        self,
        hardware: Mapping[str, ArrayLike],
        weights: Optional[Mapping[str, ArrayLike]] = None,
        inputs: Optional[Mapping[str, ArrayLike]] = None,
        batch: Optional[int] = None,
        seed: int = 0,
        *,
        random_missing: bool = False,
        first: int = 10,
        maps: bool = False,
        device: Any = "cpu",
    ) -> DiffReport:
        """Compare the hardware's outputs with the software graph on the same data, bit for
        bit: the report of ``nnpc diff`` (``first`` mismatches listed). ``maps`` keeps where
        the mismatches are (``"maps"``, the heatmaps of :meth:`DiffReport.to_html`).

        ``hardware`` maps every output to ``[batch, *shape]`` (float16/32/64; a value that is
        not a value of the storage format is a mismatch). The data are the hardware's: the
        same ``weights``/``inputs``, or the same ``seed`` (the batch is read from the dump).
        ``device`` as :meth:`run`'s.
        """
        _device(device)
        batch, seed, random_missing = _run_args(batch, seed, random_missing)
        first = _count(first, "first")
        hw = _arrays(hardware, "hardware")
        w, x = self._data(weights, inputs)
        text = self._core.diff(hw, w, x, batch, seed, random_missing, first, bool(maps))
        return DiffReport(json.loads(text))

    def depgraph(self) -> Dict[str, Any]:
        """The dependency graph (``nnpc graph --format json``, schema in docs/depgraph.md)."""
        return json.loads(self._core.depgraph_json())

    def to_dot(self) -> str:
        """The dependency graph as Graphviz DOT (``nnpc graph --format dot``)."""
        return self._core.to_dot()

    def to_json(self) -> str:
        """The software graph as JSON (what ``nnpc compile`` writes)."""
        return self._core.swgraph_json()

    def score(
        self,
        data: Union[str, "os.PathLike[str]", Mapping[str, ArrayLike]],
        weights: Union[None, str, "os.PathLike[str]", Mapping[str, ArrayLike]] = None,
        *,
        split: str = "test",
        engine: str = "graph",
        loss: Optional[str] = None,
        seed: int = 0,
    ) -> Dict[str, Any]:
        """The program's loss and accuracy on a split of ``data`` with the hardware's
        numerics, as ``nnpc score`` (and ``nnpc train``'s test scores) compute them.

        ``data`` is a data file or mapping as ``nnpc train`` takes (``NAME_train`` /
        ``NAME_test``, or ``NAME``, for every input and output); ``weights`` a weights file,
        a mapping, or ``None`` (seeded random weights). ``engine`` is ``"graph"`` (the
        software graph) or ``"emulator"``; ``loss`` ``"mse"`` or ``"xent"`` overrides the
        choice by targets. Returns ``{"loss", "accuracy" (None for value targets), "items"}``.
        """
        if isinstance(data, (str, os.PathLike)):
            data = load_tensors(data)
        if isinstance(weights, (str, os.PathLike)):
            weights = load_tensors(weights)
        loss_value, accuracy, items = self._core.score(
            _arrays(data, "data") or {}, _arrays(weights, "weights"), split, engine, loss, _seed(seed)
        )
        return {"loss": loss_value, "accuracy": accuracy, "items": items}

    def gradients(
        self,
        weights: Mapping[str, ArrayLike],
        inputs: Mapping[str, ArrayLike],
        output_grads: Mapping[str, ArrayLike],
    ) -> Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]]:
        """The gradient of a loss by weight and by input, from its gradient by output.

        ``weights`` and ``inputs`` hold every weight and input (inputs batch-first); the
        forward pass is the concordant graph's (the bits of ``run``). ``output_grads`` maps
        outputs to the loss's gradient by them (``[batch, *shape]``; an output left out takes
        none). Returns ``(weight_grads, input_grads)``, float64 arrays in the weights' and
        inputs' shapes: the straight-through gradient ``nnpc train`` uses (docs/training.md),
        computed by the same Rust code. ``nnpc.torch.FirmwareLayer`` is built on it.
        """
        tape = self._record(weights, inputs)[1]
        return self._backward(tape, output_grads)

    def _record(self, weights, inputs) -> Tuple[Dict[str, np.ndarray], "_nnpc.Tape"]:
        """The concordant forward pass (float32 outputs) and the tape ``_backward`` reads."""
        w, x = _arrays(weights, "weights"), _arrays(inputs, "inputs")
        return self._core.record(w or {}, x or {})

    def _backward(self, tape: "_nnpc.Tape", output_grads) -> Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]]:
        grads = _arrays(output_grads, "output_grads") or {}
        wide = {n: np.ascontiguousarray(g, dtype=np.float64) for n, g in grads.items()}
        return self._core.backward(tape, wide)

    def random_weights(self, seed: int = 0) -> Dict[str, np.ndarray]:
        """The seeded random weights ``nnpc run --seed SEED`` uses (float32)."""
        return self._core.random_weights(_seed(seed))

    def random_inputs(self, items: Union[int, range], seed: int = 0) -> Dict[str, np.ndarray]:
        """The seeded random inputs of items ``items`` (a count from 0, or a range of
        consecutive items) of any batch ``nnpc run --seed SEED`` makes (float32)."""
        if isinstance(items, range):
            if items.step != 1:
                raise ArgumentError(f"`items` = {items!r}: a range of consecutive items (step 1)")
            start, stop = _count(items.start, "items.start"), _count(items.stop, "items.stop")
        else:
            start, stop = 0, _count(items, "items")
        return self._core.random_inputs(start, stop, _seed(seed))


def compile(
    path_or_source: Union[str, "os.PathLike[str]"],
    target: Optional[str] = None,
    *,
    name: Optional[str] = None,
) -> Graph:
    """Check firmware and lower it to its software graph.

    ``path_or_source`` is a path to a ``.nnp`` file, or the firmware's text (a ``str`` that
    holds a newline; ``name`` names it in diagnostics). ``target`` is a built-in target name
    (``bw-default``) or a TOML target file, overriding the firmware's ``target`` statement.

    Raises :class:`FirmwareError` (the rendered diagnostics, and ``.diagnostics``) when the
    firmware has errors, ``OSError`` when the file cannot be read, ``ValueError`` for a bad
    target.
    """
    target = os.fspath(target) if target is not None else None
    if isinstance(path_or_source, str) and "\n" in path_or_source:
        core = _nnpc.compile(None, path_or_source, name, target)
    else:
        path = os.fspath(path_or_source)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no firmware file `{path}` (firmware text holds newlines)")
        core = _nnpc.compile(path, None, None, target)
    return Graph(core)


class Quantized(NamedTuple):
    """What ``quantize(..., codes=True)`` returns: the quantized ``values`` (float32), the
    element ``codes`` (int64, the array's shape) and the shared ``scales`` (int64, the
    array's shape with ``axis`` counting scale groups; one dimension of one scale for
    ``per = tensor``; float32 for ``int(scale = f32)``): the fields of the format's packed
    layout (docs/numerics.md), as torchao's ``to_mx`` gives an MX tensor's E8M0 scales and
    element codes."""

    values: np.ndarray
    codes: np.ndarray
    scales: np.ndarray


def quantize(
    array: ArrayLike, format: str, axis: int = -1, native: int = 128, *, codes: bool = False
) -> Union[np.ndarray, Quantized]:
    """Fake-quantize ``array`` with a format literal (``"bfp(mant = 8)"``,
    ``"mx(elem = fp8e4m3, block = 32)"``, ``"mxfp8_e4m3"``, ``"mx6"``, ...
    docs/numerics.md), blocks along ``axis``: the values ``nnpc quantize`` writes (float32).
    ``native`` is what ``block = native`` means.

    ``codes=True`` returns :class:`Quantized` ``(values, codes, scales)``, what ``nnpc
    quantize --codes`` writes: for ``mxfp8_e4m3``, each element's 8-bit code and each
    block's E8M0 scale ``s + 127`` (the value is ``decode(code) * 2**(scale - 127)``)."""
    a = _as_array(array, "array")
    native = _count(native, "native")
    want_codes = _flag(codes, "codes")
    shape = a.shape
    if a.ndim == 0:
        a = a.reshape(1)  # one value: a block of its own
    axis = _int_arg(axis, "axis", -a.ndim, a.ndim - 1)
    moved = np.ascontiguousarray(np.moveaxis(a, axis, -1))
    q = _nnpc.quantize(moved, format, native)
    values = np.ascontiguousarray(np.moveaxis(q, -1, axis)).reshape(shape)
    if not want_codes:
        return values
    elems, scales = _nnpc.quantize_codes(moved, format, native)
    elems = np.ascontiguousarray(np.moveaxis(elems, -1, axis)).reshape(shape)
    if scales.ndim == moved.ndim:  # scales along the axis (not one for the whole tensor)
        scales = np.ascontiguousarray(np.moveaxis(scales, -1, axis))
    return Quantized(values, elems, scales)


def load_tensors(path: Union[str, "os.PathLike[str]"]) -> Dict[str, np.ndarray]:
    """The tensors of a ``.safetensors`` file, a ``.npy`` file or a directory of ``.npy``
    files, read as the command line reads them (float32; float64 where the file holds values
    float32 does not). ``"FILE:NAME=STORED[,NAME=STORED...]"`` gives only the tensors stored
    as ``STORED``, named ``NAME``, as ``--inputs``/``--weights`` take them
    (``load_tensors("digits.safetensors:x=x_test")`` is ``{"x": x_test}``); a name the file
    does not hold raises :class:`DataError` naming those it holds."""
    return _nnpc.load_tensors(os.fspath(path))
