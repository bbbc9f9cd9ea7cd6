"""Every memory layout of every accepted dtype is read in logical (C) order: the bits of the
same values given as a C-contiguous float32 array (docs/python.md, "Arrays").

The expected bits are those of the C-contiguous float32 call on the same values; the values
of each dtype are made by numpy, ml_dtypes or torch (not by nnpc), and each layout holds the
same logical values as the C array it is made from.
"""

from __future__ import annotations

import json
from typing import Callable, Dict, List, Tuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nnpc
from conftest import ROOT

ml_dtypes = pytest.importorskip("ml_dtypes")

SAMPLE = ROOT / "samples" / "mlp2_relu.nnp"
SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def mlp() -> nnpc.Graph:
    return nnpc.compile(SAMPLE)


def bits(a: np.ndarray) -> Tuple[str, Tuple[int, ...], bytes]:
    """An array's dtype, shape and bit patterns (no tolerance anywhere)."""
    a = np.ascontiguousarray(a)
    return (a.dtype.str, a.shape, a.view(np.dtype(f"u{a.dtype.itemsize}")).tobytes())


def same_outputs(got: Dict[str, np.ndarray], want: Dict[str, np.ndarray]) -> bool:
    return sorted(got) == sorted(want) and all(bits(got[k]) == bits(want[k]) for k in want)


# --- values of each dtype: (name, make the C array of that dtype from float32 values) ------

DTYPES: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "float32": lambda a: a.astype(np.float32),
    "float16": lambda a: a.astype(np.float16),
    "float64": lambda a: a.astype(np.float64),
    "bfloat16": lambda a: a.astype(ml_dtypes.bfloat16),
    ">f4": lambda a: a.astype(">f4"),
    ">f8": lambda a: a.astype(">f8"),
    ">f2": lambda a: a.astype(">f2"),
}


def as_f32(a: np.ndarray) -> np.ndarray:
    """The C-contiguous float32 array of `a`'s values (exact for every dtype above, float64
    arrays made from float32 values included)."""
    return np.ascontiguousarray(a.astype(np.float32))


# --- layouts: each returns an array with the logical values of its C-contiguous argument ----


def fortran(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.asfortranarray(a)


def transposed_view(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """`W.T` of a C array that holds the transpose (what `W.T` of a weight matrix gives)."""
    axes = list(rng.permutation(a.ndim))
    back = list(np.argsort(axes))
    return np.ascontiguousarray(a.transpose(axes)).transpose(back)


def negative_strides(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    axes = tuple(int(i) for i in np.flatnonzero(rng.random(a.ndim) < 0.7)) or (0,)
    return np.flip(np.flip(a, axes).copy(order="K"), axes)


def stepped(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Every other (or third) element of a larger array whose other elements are noise."""
    steps = [int(rng.integers(1, 4)) for _ in range(a.ndim)]
    signs = [int(rng.choice([-1, 1])) for _ in range(a.ndim)]
    big = rng.standard_normal([n * s for n, s in zip(a.shape, steps)]).astype(a.dtype)
    index = tuple(slice(None, None, s * g) for s, g in zip(steps, signs))
    view = big[index]
    view[...] = a[tuple(slice(None, None, g) for g in signs)]
    return view[tuple(slice(None, None, g) for g in signs)]


def unaligned(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The values at an odd address (a buffer with a one-byte offset)."""
    buf = bytearray(a.nbytes + 1)
    view = np.frombuffer(buf, dtype=a.dtype, count=a.size, offset=1).reshape(a.shape)
    view[...] = a
    return view


def record_field(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A field of a record array: strides that are not a multiple of the element size."""
    rec = np.zeros(a.shape, dtype=[("v", a.dtype), ("pad", "u1")])
    rec["v"] = a
    return rec["v"]


LAYOUTS = {
    "C": lambda a, rng: a,
    "F": fortran,
    "T": transposed_view,
    "neg": negative_strides,
    "step": stepped,
    "unaligned": unaligned,
    "record": record_field,
}

layouts = st.lists(st.sampled_from(sorted(LAYOUTS)), min_size=1, max_size=2)
arrays_of = st.tuples(st.sampled_from(sorted(DTYPES)), layouts)


def arrange(a: np.ndarray, dtype: str, chain: List[str], seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """`a` in `dtype`, laid out by `chain`; and the C-contiguous float32 of the same values."""
    rng = np.random.default_rng(seed)
    values = DTYPES[dtype](a)
    out = values
    for name in chain:  # each keeps the logical values of any layout it is given
        out = LAYOUTS[name](out, rng)
    return out, as_f32(values)


# --- the regression on the sample: F order and transposed float32 weights ------------------


def test_fortran_order_float32_weights_give_the_c_order_bits(mlp: nnpc.Graph) -> None:
    """W1 in F order (and as `W.T` of its transpose) gives the outputs of W1 in C order, on
    the software graph and the emulator; read in memory order it would be another matrix."""
    w = mlp.random_weights(3)
    x = mlp.random_inputs(2, seed=3)
    f_order = np.asfortranarray(w["W1"])
    # The test can fail: the buffer in memory order is not W1.
    assert f_order.ravel(order="K").tobytes() != w["W1"].tobytes()
    for method in (mlp.run, mlp.emulate):
        want = method(w, x)
        for w1 in (f_order, np.ascontiguousarray(w["W1"].T).T):
            assert same_outputs(method({**w, "W1": w1}, x), want), method.__name__


def test_fortran_order_float32_inputs_and_dump_give_the_c_order_bits(mlp: nnpc.Graph) -> None:
    """F-order float32 inputs give the C-order outputs; an F-order float32 dump of the
    emulator's outputs is concordant with no mismatch."""
    w = mlp.random_weights(4)
    x = mlp.random_inputs(3, seed=4)
    x_f = {k: np.asfortranarray(v) for k, v in x.items()}
    assert same_outputs(mlp.run(w, x_f), mlp.run(w, x))
    hw = {k: np.asfortranarray(v.astype(np.float32)) for k, v in mlp.emulate(w, x).items()}
    report = mlp.diff(hw, w, x_f)
    assert report.concordant and report.mismatched == 0


# --- the properties -------------------------------------------------------------------------


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    batch=st.integers(1, 3),
    layout=st.dictionaries(st.sampled_from(["W1", "W2", "b1", "b2", "x"]), arrays_of),
    broadcast=st.booleans(),
)
def test_run_and_emulate_read_every_layout_in_c_order(
    mlp: nnpc.Graph, seed: int, batch: int, layout: dict, broadcast: bool
) -> None:
    """Each weight and the inputs in a layout and dtype drawn (float32 in C order where none
    is); with `broadcast`, the inputs are their first item for every item, as a stride-0
    view."""
    data = {**mlp.random_weights(seed), **mlp.random_inputs(batch, seed=seed)}
    given_, want = {}, {}
    for name, a in data.items():
        dtype, chain = layout.get(name, ("float32", ["C"]))
        given_[name], want[name] = arrange(a, dtype, chain, seed)
    if broadcast:
        first = DTYPES[layout.get("x", ("float32",))[0]](data["x"][:1])
        given_["x"] = np.broadcast_to(first, data["x"].shape)
        want["x"] = as_f32(np.repeat(first, batch, axis=0))
    weights = {k: v for k, v in given_.items() if k != "x"}
    c_weights = {k: v for k, v in want.items() if k != "x"}
    for method in (mlp.run, mlp.emulate):
        got = method(weights, {"x": given_["x"]})
        assert same_outputs(got, method(c_weights, {"x": want["x"]})), method.__name__


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from(["float32", "float64", "float16", ">f4", ">f8", ">f2"]),
    chain=layouts,
    flips=st.lists(st.integers(0, 2 * 4 * 100 - 1), max_size=4),
)
def test_diff_reads_every_layout_of_the_dump_in_c_order(
    mlp: nnpc.Graph, seed: int, dtype: str, chain: List[str], flips: List[int]
) -> None:
    """A dump (the emulator's outputs with some bits flipped) in any layout and dtype that
    holds its values gives the report of its C-contiguous float32 copy."""
    w, x = mlp.random_weights(seed), mlp.random_inputs(2, seed=seed)
    ((name, out),) = mlp.emulate(w, x).items()
    assert out.dtype == np.float16  # every dtype drawn holds its values
    hw = out.copy()
    flat = hw.reshape(-1).view(np.uint16 if hw.dtype == np.float16 else np.uint32)
    for i in flips:
        flat[i] ^= 1 << (i % 8)
    laid, c_f32 = arrange(hw, dtype, chain, seed)
    got = mlp.diff({name: laid}, w, x, first=50).to_dict()
    want = mlp.diff({name: c_f32}, w, x, first=50).to_dict()
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)


FORMATS = ["bfp(mant = 4, block = 8)", "mx6", "int(bits = 8, scale = f32, per = tensor)"]


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    shape=st.lists(st.integers(0, 7), min_size=0, max_size=3),
    dtype=st.sampled_from(sorted(DTYPES)),
    chain=layouts,
    fmt=st.sampled_from(FORMATS),
    axis=st.integers(-3, 2),
)
def test_quantize_reads_every_layout_in_c_order(
    seed: int, shape: List[int], dtype: str, chain: List[str], fmt: str, axis: int
) -> None:
    """0-d and empty arrays included; the axis is any of the array's (a 0-d array's value is
    a block of its own)."""
    ndim = max(len(shape), 1)
    axis = axis % ndim - (ndim if axis < 0 else 0)
    a = (np.random.default_rng(seed).standard_normal(shape) * 8).astype(np.float32)
    laid, c_f32 = arrange(a, dtype, chain if a.ndim else ["C"], seed)
    got = nnpc.quantize(laid, fmt, axis=axis, native=8)
    want = nnpc.quantize(c_f32, fmt, axis=axis, native=8)
    assert bits(got) == bits(want)
    assert got.shape == a.shape


def test_quantize_of_a_0d_array_is_its_one_element_block() -> None:
    """A 0-d array is quantized as the block of its one value: 3.3 in bfp(mant = 4) is 3.5
    (docs/numerics.md: E = floor(log2 3.3) = 1, a step of 2^(E - (4 - 2)) = 0.5, and
    round(3.3 / 0.5) = 7 is within [-7, 7])."""
    q = nnpc.quantize(np.float32(3.3).reshape(()), "bfp(mant = 4)", native=8)
    assert q.shape == () and q.dtype == np.float32 and float(q) == 3.5


# --- torch: views, expanded tensors and bfloat16 through DLPack -----------------------------


TORCH_VIEWS = ["contiguous", "t", "permute", "expand", "step", "narrow"]


@SETTINGS
@given(
    seed=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from(["float32", "float16", "bfloat16", "float64"]),
    view=st.sampled_from(TORCH_VIEWS),
    on=st.sampled_from(["W1", "x"]),
)
def test_torch_views_give_the_c_order_bits(
    mlp: nnpc.Graph, seed: int, dtype: str, view: str, on: str
) -> None:
    torch = pytest.importorskip("torch")
    data = {**mlp.random_weights(seed), **mlp.random_inputs(3, seed=seed)}
    a = data[on]
    if view == "expand":
        a = np.repeat(a[:1], a.shape[0], axis=0)
    t = torch.from_numpy(np.ascontiguousarray(a)).to(getattr(torch, dtype))
    want = t.float().numpy().copy()  # torch's own widening of the same values
    if view == "t" and t.ndim == 2:
        laid = t.t().contiguous().t()
    elif view == "permute":
        order = list(range(t.ndim))[::-1]
        laid = t.permute(order).contiguous().permute(order)
    elif view == "expand":
        laid = t[:1].expand(*t.shape)
    elif view == "step":
        big = torch.zeros((t.shape[0] * 2, *t.shape[1:]), dtype=t.dtype)
        big[::2] = t
        laid = big[::2]
    elif view == "narrow":
        big = torch.zeros((*t.shape[:-1], t.shape[-1] + 3), dtype=t.dtype)
        big[..., 1 : 1 + t.shape[-1]] = t
        laid = big.narrow(-1, 1, t.shape[-1])
    else:
        laid = t
    assert torch.equal(laid, t)
    weights = {k: v for k, v in data.items() if k != "x"}
    given_w = {**weights, on: laid} if on != "x" else weights
    given_x = {"x": laid} if on == "x" else {"x": data["x"]}
    want_w = {**weights, on: want} if on != "x" else weights
    want_x = {"x": want} if on == "x" else {"x": data["x"]}
    for method in (mlp.run, mlp.emulate):
        assert same_outputs(method(given_w, given_x), method(want_w, want_x)), method.__name__


def test_bfloat16_is_widened_exactly(mlp: nnpc.Graph) -> None:
    """bfloat16 weights give the outputs of their float32 values: 1 + 2^-7 (bits 0x3f81), the
    smallest subnormal (0x0001) and -0 (0x8000) keep their float32 patterns 0x3f810000,
    0x00010000 and 0x80000000."""
    patterns = np.array([0x3F81, 0x0001, 0x8000], dtype=np.uint16)
    a = patterns.view(ml_dtypes.bfloat16)
    q = nnpc.quantize(a, "int(bits = 24, scale = f32, per = tensor)", native=8)
    assert q.dtype == np.float32
    w = mlp.random_weights(5)
    x = mlp.random_inputs(1, seed=5)
    b16 = w["W1"].astype(ml_dtypes.bfloat16)
    want = (b16.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    assert same_outputs(mlp.run({**w, "W1": b16}, x), mlp.run({**w, "W1": want}, x))
    assert np.asarray(nnpc._as_array(a, "a")).view(np.uint32).tolist() == [
        0x3F810000,
        0x00010000,
        0x80000000,
    ]


def test_other_dtypes_are_refused_with_the_conversion() -> None:
    for bad in (np.zeros(3, np.int32), np.zeros(3, np.complex64), np.zeros(3, ml_dtypes.float8_e4m3fn)):
        with pytest.raises(TypeError, match=r"`array` has dtype .*astype\(numpy.float32\)"):
            nnpc.quantize(bad, "mx6")
    masked = np.ma.masked_array(np.ones(3, np.float32), mask=[False, True, False])
    with pytest.raises(TypeError, match=r"`array`: a masked array.*filled"):
        nnpc.quantize(masked, "mx6")
