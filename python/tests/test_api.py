"""The Python API against the command line: the same bits, the same reports, clear errors."""

from __future__ import annotations

import json
import pickle
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import nnpc
from conftest import ROOT, cli, read_safetensors, same_bits, sample_targets


@pytest.fixture(scope="module")
def lstm() -> nnpc.Graph:
    return nnpc.compile(str(ROOT / "samples" / "lstm.nnp"))


@pytest.mark.parametrize("sample,target", sample_targets(), ids=lambda v: str(v))
def test_run_and_emulate_give_the_cli_bits(sample: str, target, tmp_path: Path) -> None:
    """Every sample: Graph.run and Graph.emulate on seeded random data (batch 3, seed 5)
    give the bits, dtypes and shapes that `nnpc run -o` and `nnpc emulate -o` write; the same
    data given explicitly (random_weights/random_inputs) gives them too."""
    g = nnpc.compile(f"samples/{sample}", target)
    on = ["--target", target] if target else []
    for engine, method in (("run", g.run), ("emulate", g.emulate)):
        out = tmp_path / f"{engine}.safetensors"
        cli(engine, f"samples/{sample}", *on, "--batch", "3", "--seed", "5", "-o", str(out))
        want = read_safetensors(out)
        got = method(batch=3, seed=5)
        assert sorted(got) == sorted(want)
        for name in want:
            assert same_bits(got[name], want[name]), f"{sample.name} {engine} `{name}`"
    given = g.run(g.random_weights(5), g.random_inputs(3, seed=5))
    for name, a in g.run(batch=3, seed=5).items():
        assert same_bits(given[name], a)


def test_files_of_each_dtype_give_the_cli_bits(tmp_path: Path) -> None:
    """Weights and inputs given as arrays (float16 inputs, float64 weights) give the bits of
    `nnpc run --weights DIR --inputs x.npy` on the same arrays in files."""
    sample = ROOT / "samples" / "mlp2_relu.nnp"
    g = nnpc.compile(sample)
    weights = {k: v.astype(np.float64) * 0.75 for k, v in g.random_weights(3).items()}
    inputs = {k: v.astype(np.float16) for k, v in g.random_inputs(6, seed=3).items()}
    wdir = tmp_path / "w"
    wdir.mkdir()
    for k, v in weights.items():
        np.save(wdir / f"{k}.npy", v)
    (name,) = inputs
    np.save(tmp_path / "x.npy", inputs[name])
    out = tmp_path / "y.safetensors"
    cli("run", str(sample), "--weights", str(wdir), "--inputs", str(tmp_path / "x.npy"), "-o", str(out))
    want = read_safetensors(out)
    got = g.run(weights, inputs)
    for k in want:
        assert same_bits(got[k], want[k])
    # Non-contiguous arrays (a transposed copy's transpose) are read in logical order.
    strided = {name: np.asfortranarray(inputs[name])}
    assert same_bits(g.run(weights, strided)[k], want[k])


def test_diff_equals_the_cli_report(lstm: nnpc.Graph, tmp_path: Path) -> None:
    """Graph.diff of a dump with faults is `nnpc diff --json`'s report, field for field; the
    emulator's own outputs are concordant."""
    hw = lstm.emulate(batch=8, seed=2)
    assert lstm.diff(hw, seed=2).concordant
    (name,) = hw
    bad = hw[name].copy()
    bad[1, 0, 3] = np.float16(bad[1, 0, 3]) + np.float16(0.5)
    bad[6, 2, 200] = np.nan
    bits = bad.view(np.uint16)
    bits[7, 3, 17] ^= 1  # one ULP
    d = tmp_path / "hw"
    d.mkdir()
    np.save(d / f"{name}.npy", bad)
    ref = json.loads(cli("diff", "samples/lstm.nnp", "--hardware", str(d), "--seed", "2", "--json").stdout)
    report = lstm.diff({name: bad}, seed=2)
    assert report.to_dict() == ref
    assert not report.concordant and report.mismatched == 3
    first = report.first_mismatch
    assert first is not None and first["index"][:2] == [1, 0] and first["line"] > 0
    assert report.ulp_histogram["NaN vs number"] == 1 and report.ulp_histogram["1"] == 1


def test_report_html_is_the_cli_page(lstm: nnpc.Graph, tmp_path: Path) -> None:
    """DiffReport.to_html() is the page `nnpc diff --report` writes, from the same Rust
    renderer: the same verdict, counts and heatmaps; save_html writes it; a report without
    maps has no heatmap."""
    hw = lstm.emulate(batch=8, seed=2)
    (name,) = hw
    bad = hw[name].copy()
    bad[6, 2, 200] = np.nan
    bad.view(np.uint16)[7, 3, 17] ^= 1
    d = tmp_path / "hw"
    d.mkdir()
    np.save(d / f"{name}.npy", bad)
    page = tmp_path / "cli.html"
    cli("diff", "samples/lstm.nnp", "--hardware", str(d), "--seed", "2", "--report", str(page))
    want = page.read_text()
    report = lstm.diff({name: bad}, seed=2, maps=True)
    html = report.to_html()
    verdict = "NOT concordant: 8190 of 8192 elements bit-exact"
    assert verdict in html and verdict in want
    for part in ('id="histogram"', 'data-grid="items"', 'data-grid="rows"', "NaN vs number ULP: 1"):
        assert part in html and part in want, part
    # The heatmaps are the same bits (the images of the same maps).
    img = lambda p: [s.split('"')[0] for s in p.split("base64,")[1:]]
    assert img(html) == img(want)
    out = tmp_path / "py.html"
    report.save_html(out)
    assert out.read_text() == html
    plain = lstm.diff({name: bad}, seed=2).to_html()
    assert verdict in plain and 'data-grid="items"' not in plain


def test_quantize_gives_the_cli_bits(tmp_path: Path) -> None:
    """nnpc.quantize along axis 0 and -1 writes what `nnpc quantize -o` writes."""
    x = np.random.default_rng(0).standard_normal((40, 24)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    for fmt, axis in (("bfp(mant = 4, block = 8)", "0"), ("mx6", "-1"), ("int(bits = 8, scale = f32, per = tensor)", "-1")):
        out = tmp_path / "q.npy"
        cli("quantize", "--format", fmt, "--axis", axis, str(tmp_path / "x.npy"), "-o", str(out))
        want = np.load(out)
        assert same_bits(nnpc.quantize(x, fmt, axis=int(axis)), want), fmt


def test_quantize_codes_by_hand() -> None:
    """codes=True on mx(elem = fp8e4m3, block = 4), by hand (docs/numerics.md, MX; e4m3 bias
    7, emax 8): row 0's amax 448 gives s = 0 (E8M0 127) and the values' own codes; row 1's
    amax 2^-2 gives s = -10 (E8M0 117). Along axis 0 of the transpose, the same transposed.
    decode(code) * 2^(scale - 127), with ml_dtypes' float8_e4m3fn as the decoder, is the
    quantized value, bit for bit."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([[1, -0.5, 3, 448], [0.25, 0.125, 0, -0.0625]], dtype=np.float32)
    codes = np.array([[0x38, 0xB0, 0x44, 0x7E], [0x78, 0x70, 0x00, 0xE8]])
    fmt = "mx(elem = fp8e4m3, block = 4)"
    q = nnpc.quantize(x, fmt, codes=True)
    assert isinstance(q, nnpc.Quantized) and q.codes.dtype == np.int64
    assert q.codes.tolist() == codes.tolist()
    assert q.scales.tolist() == [[127], [117]]
    assert same_bits(q.values, nnpc.quantize(x, fmt))
    decoded = codes.astype(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    back = (decoded * 2.0 ** (q.scales - 127)).astype(np.float32)
    assert same_bits(back, q.values)
    t = nnpc.quantize(x.T, fmt, axis=0, codes=True)
    assert t.codes.tolist() == codes.T.tolist() and t.scales.tolist() == [[127, 117]]
    with pytest.raises(nnpc.ArgumentError, match="several levels of scales"):
        nnpc.quantize(x, "mx6", codes=True)


def test_quantize_codes_are_the_cli_codes(tmp_path: Path) -> None:
    """codes=True gives the codes and scales `nnpc quantize --codes` writes, along either
    axis, for block, per-row and per-tensor formats."""
    x = np.random.default_rng(1).standard_normal((12, 40)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    for fmt, axis in (
        ("mxfp4", -1),
        ("bfp(mant = 4, block = 8)", 0),
        ("int(bits = 8, scale = pow2, per = row)", -1),
        ("int(bits = 8, scale = f32, per = tensor)", 0),
    ):
        out = tmp_path / "codes.safetensors"
        cli("quantize", "--format", fmt, "--axis", str(axis), str(tmp_path / "x.npy"), "--codes", str(out))
        want = nnpc.load_tensors(out)
        q = nnpc.quantize(x, fmt, axis=axis, codes=True)
        assert np.array_equal(q.codes, want["x.codes"]), fmt
        assert q.scales.shape == want["x.scales"].shape, fmt
        assert same_bits(q.scales.astype(np.float32), want["x.scales"]), fmt


def test_load_tensors_selects_as_the_cli_does() -> None:
    """`FILE:NAME=STORED` selects tensors under new names, as `--inputs` does; a name the file
    does not hold is a DataError naming those it holds."""
    data = "samples/train/digits_mlp.data.safetensors"
    whole = nnpc.load_tensors(data)
    picked = nnpc.load_tensors(f"{data}:x=x_test,y=y_test")
    assert sorted(picked) == ["x", "y"]
    assert same_bits(picked["x"], whole["x_test"]) and same_bits(picked["y"], whole["y_test"])
    with pytest.raises(nnpc.DataError, match="holds no tensor named `x_tset`") as e:
        nnpc.load_tensors(f"{data}:x=x_tset")
    assert "`x_test`, `x_train`" in str(e.value) and e.value.help


def test_depgraph_and_dot_are_the_cli_graph(lstm: nnpc.Graph) -> None:
    ref = json.loads(cli("graph", "samples/lstm.nnp", "--format", "json").stdout)
    g = nnpc.compile("samples/lstm.nnp")
    assert g.depgraph() == ref
    assert g.to_dot() == cli("graph", "samples/lstm.nnp", "--format", "dot").stdout


def test_source_text_compiles_like_the_file(lstm: nnpc.Graph) -> None:
    text = (ROOT / "samples" / "lstm.nnp").read_text()
    g = nnpc.compile(text, name="lstm.nnp")
    assert g.outputs == lstm.outputs == {"h": (4, 256)}
    assert g.inputs == {"x": (4, 128)} and "Wi" in g.weights
    a, b = g.run(batch=2, seed=1), lstm.run(batch=2, seed=1)
    assert same_bits(a["h"], b["h"]) and a["h"].dtype == np.float16


BAD = """input x : [1, 4]
output y : [1, 4]

v_rd netq
v_frob netq
end_chain
"""


def test_bad_firmware_raises_firmware_error() -> None:
    """The message is the rendered diagnostic; .diagnostics lists code, line, column."""
    with pytest.raises(nnpc.FirmwareError) as e:
        nnpc.compile(BAD, name="bad.nnp")
    (d,) = [d for d in e.value.diagnostics if d["severity"] == "error"][:1]
    assert d["code"] == "nnp::unknown-mnemonic" and (d["line"], d["column"]) == (5, 1)
    assert "v_frob" in str(e.value) and "bad.nnp" in str(e.value)
    assert isinstance(e.value, ValueError)
    with pytest.raises(FileNotFoundError):
        nnpc.compile("no/such/firmware.nnp")
    with pytest.raises(ValueError, match="target"):
        nnpc.compile("samples/lstm.nnp", target="no-such-target")


def test_bad_data_is_refused_clearly(lstm: nnpc.Graph) -> None:
    weights = lstm.random_weights()
    x = lstm.random_inputs(2)["x"]
    with pytest.raises(nnpc.DataError, match=r"`x`.*\[4, 128\]"):
        lstm.run(weights, {"x": x[:, :3]})
    with pytest.raises(TypeError, match="int32.*float32"):
        lstm.run(weights, {"x": x.astype(np.int32)})
    missing = dict(weights)
    del missing["Uc"]
    with pytest.raises(nnpc.DataError, match="`Uc`") as e:
        lstm.run(missing, {"x": x})
    # The help names the Python argument, not the command line's flag.
    assert "random_missing=True" in str(e.value) and "--random-missing" not in str(e.value)
    # random_missing fills it, as --random-missing does.
    assert lstm.run(missing, {"x": x}, random_missing=True)["h"].shape == (2, 4, 256)
    with pytest.raises(nnpc.DataError, match="finite"):
        lstm.run(weights, {"x": np.full_like(x, np.inf)})
    with pytest.raises(nnpc.DataError, match="`h`"):
        lstm.diff({"h": np.zeros((2, 4, 255), np.float16)}, weights, {"x": x})
    with pytest.raises(TypeError):
        lstm.run(weights, [x])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="format literal"):
        nnpc.quantize(x, "bfp(mant = 99x)")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        lstm.run(weights, {"x": x, "xx": x})
    assert any("`xx` is not a declaration" in str(m.message) for m in w)


def test_bad_arguments_name_the_parameter_value_and_range(lstm: nnpc.Graph) -> None:
    """A wrong type, a negative or an overflowing batch/seed/first/items/axis/native raises
    nnpc.ArgumentError (a DataError and a TypeError) naming the parameter and the value."""
    x = lstm.random_inputs(1)["x"]
    hw = {"h": np.zeros((1, 4, 256), np.float16)}
    cases = [
        (lambda: lstm.run(batch=-1), "`batch` = -1", "0 to"),
        (lambda: lstm.run(batch=2**64), f"`batch` = {2**64}", "0 to"),
        (lambda: lstm.emulate(batch="3"), "`batch`", "str '3'"),
        (lambda: lstm.run(batch=2.0), "`batch`", "float 2.0"),
        (lambda: lstm.run(batch=True), "`batch`", "bool True"),
        (lambda: lstm.run(seed=-1), "`seed` = -1", f"0 to {2**64 - 1}"),
        (lambda: lstm.emulate(seed=2**64), f"`seed` = {2**64}", f"0 to {2**64 - 1}"),
        (lambda: lstm.run(seed=1.5), "`seed`", "float 1.5"),
        (lambda: lstm.diff(hw, seed=-3), "`seed` = -3", "0 to"),
        (lambda: lstm.diff(hw, first=-1), "`first` = -1", "0 to"),
        (lambda: lstm.diff(hw, batch=-2), "`batch` = -2", "0 to"),
        (lambda: lstm.run(random_missing=1), "`random_missing`", "True or False"),
        (lambda: lstm.random_weights(seed=-5), "`seed` = -5", "0 to"),
        (lambda: lstm.random_inputs(-1), "`items` = -1", "0 to"),
        (lambda: lstm.random_inputs("3"), "`items`", "str '3'"),
        (lambda: lstm.random_inputs(range(-2, 3)), "`items.start` = -2", "0 to"),
        (lambda: lstm.random_inputs(range(0, 4, 2)), "`items` = range(0, 4, 2)", "step 1"),
        (lambda: nnpc.quantize(x, "mx6", axis=3), "`axis` = 3", "-3 to 2"),
        (lambda: nnpc.quantize(x, "mx6", axis=-4), "`axis` = -4", "-3 to 2"),
        (lambda: nnpc.quantize(x, "mx6", axis=1.0), "`axis`", "float 1.0"),
        (lambda: nnpc.quantize(x, "mx6", native=-1), "`native` = -1", "to"),
        (lambda: nnpc.quantize(x, "mx6", native=0), "`native` = 0", "1 to"),
    ]
    for call, names, accepted in cases:
        with pytest.raises(nnpc.ArgumentError) as e:
            call()
        assert names in str(e.value) and accepted in str(e.value), str(e.value)
        assert isinstance(e.value, nnpc.DataError) and isinstance(e.value, TypeError)
    # The ends of the ranges and numpy integers are accepted.
    assert lstm.run(batch=np.int64(1), seed=2**64 - 1)["h"].shape == (1, 4, 256)
    assert lstm.random_inputs(range(2, 2))["x"].shape == (0, 4, 128)
    assert nnpc.quantize(x, "mx6", axis=np.int8(-3)).shape == x.shape


class Dlpack:
    """An array seen only through DLPack, as a torch.Tensor on the CPU is."""

    def __init__(self, a: np.ndarray):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_and_torch_tensors_are_accepted(lstm: nnpc.Graph) -> None:
    x = lstm.random_inputs(2, seed=4)["x"]
    want = lstm.run(inputs={"x": x}, weights=lstm.random_weights(4))["h"]
    got = lstm.run(inputs={"x": Dlpack(x)}, weights=lstm.random_weights(4))["h"]
    assert same_bits(got, want)
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x)
    out = lstm.run(inputs={"x": t}, weights=lstm.random_weights(4))["h"]
    assert same_bits(out, want)
    # The output as a tensor without a copy.
    assert torch.from_numpy(out).data_ptr() == out.ctypes.data


def test_runs_release_the_gil(lstm: nnpc.Graph) -> None:
    """A Python thread keeps running while a long run is in Rust."""
    lstm.run(batch=1)
    ticks = 0
    done = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    start = time.perf_counter()
    lstm.emulate(batch=64)
    elapsed = time.perf_counter() - start
    done.set()
    t.join()
    assert ticks > 0.2 * elapsed / 0.001 * 0.5, (ticks, elapsed)


def test_a_warm_graph_follows_new_weights(lstm: nnpc.Graph) -> None:
    """The warm session is kept only for the weights it prepared: new weights (another
    seed) give a fresh graph's bits."""
    first = lstm.run(batch=2, seed=11)["h"]
    second = lstm.run(batch=2, seed=12)["h"]
    fresh = nnpc.compile("samples/lstm.nnp").run(batch=2, seed=12)["h"]
    assert same_bits(second, fresh) and not same_bits(first, second)


def test_a_warm_graph_reuses_only_the_same_bits() -> None:
    """A warm session runs on the inputs alone when the weights are the ones it prepared
    (compared in place, bit for bit): one element changed in place, the arrays of the seeded
    weights, a -0.0 for a +0.0 or another seed each give a fresh graph's bits, and each
    CLI-equal run before and after stays equal."""
    graph = nnpc.compile("samples/lstm.nnp")
    fresh = lambda *a, **k: nnpc.compile("samples/lstm.nnp").run(*a, **k)["h"]  # noqa: E731
    w = graph.random_weights(3)
    x = graph.random_inputs(4, seed=5)
    first = graph.run(w, x)["h"]
    assert same_bits(graph.run(w, x)["h"], first)
    name = sorted(w)[0]
    w[name].flat[7] += np.float32(0.5)
    changed = graph.run(w, x)["h"]
    assert same_bits(changed, fresh(w, x)) and not same_bits(changed, first)
    w[name].flat[7] -= np.float32(0.5)
    assert same_bits(graph.run(w, x)["h"], first)
    # A zero's sign is a bit of its own: +0.0 prepared, then -0.0 in its place.
    kept = w[name].flat[7]
    w[name].flat[7] = np.float32(0.0)
    graph.run(w, x)
    w[name].flat[7] = np.float32(-0.0)
    assert same_bits(graph.run(w, x)["h"], fresh(w, x))
    w[name].flat[7] = kept
    # Seeded and given weights of the same values alternate on one graph.
    seeded = graph.run(batch=4, seed=3)["h"]
    assert same_bits(seeded, fresh(batch=4, seed=3))
    assert same_bits(graph.run(w, x)["h"], first)
    assert same_bits(graph.run(batch=4, seed=3)["h"], seeded)
    assert same_bits(graph.run(batch=4, seed=4)["h"], fresh(batch=4, seed=4))
    # Strided (not C-contiguous) weights go the copying way, with the same bits.
    strided = {k: np.asfortranarray(v) if v.ndim == 2 else v for k, v in w.items()}
    assert same_bits(graph.run(strided, x)["h"], first)


_FAULTS = """
import json, resource, sys
import nnpc
g = nnpc.compile(sys.argv[1])
w, x = g.random_weights(0), g.random_inputs(1024, seed=0)
outs, windows = [], []
for window in range(6):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        outs += [g.run(w, x), g._record(w, x)[0]]
    windows.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"faults": windows, "outputs": [v.tobytes().hex() for o in outs for v in o.values()]}))
"""


def test_warm_calls_reuse_their_memory_and_the_opt_out_keeps_the_bits() -> None:
    """Importing the package keeps large blocks on the heap as `nnpc` does (nnpc::memory):
    warm runs and recordings of the digits sample at batch 1024 then fault in a few new pages
    a call (Python's own arrays; the least of 5 windows of 5 runs and 5 recordings, the first
    window warming the heaps), where glibc's own settings (`NNPC_MALLOC=system`) map each
    large buffer and fault it in again, hundreds of pages a call. (At batch 256 a recording's
    few kept buffers fall under glibc's adaptive threshold in some windows and not others.)
    The outputs are the same bits either way."""
    import os
    import subprocess
    import sys

    def probe(**extra: str) -> dict:
        env = {k: v for k, v in os.environ.items() if k != "NNPC_MALLOC"} | extra
        cmd = [sys.executable, "-c", _FAULTS, "samples/train/digits_mlp.nnp"]
        run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        return json.loads(run.stdout)

    tuned, system = probe(), probe(NNPC_MALLOC="system")
    assert tuned["outputs"] == system["outputs"]
    least = min(tuned["faults"][1:]), min(system["faults"][1:])
    assert least[0] < 10 * 10, (tuned["faults"], system["faults"])
    assert least[1] > 10 * max(least[0], 100), (tuned["faults"], system["faults"])


def test_a_batch_past_the_limit_raises_data_error(lstm: nnpc.Graph) -> None:
    """A batch whose results would not fit in memory (or whose inputs and outputs pass
    2^62 bytes) is a DataError naming ``batch=`` and the limit, before anything is made:
    never an abort of the interpreter or a panic."""
    x = lstm.random_inputs(1)["x"][0]
    for call in [
        lambda: lstm.run(batch=2**40),
        lambda: lstm.emulate(batch=2**40),
        lambda: lstm.run(batch=2**63),
        lambda: lstm.emulate(batch=2**63),
        lambda: lstm.random_inputs(2**40),
        lambda: lstm.run(lstm.random_weights(), {"x": x}, batch=10**9),
    ]:
        with pytest.raises(nnpc.DataError, match=r"batch= \d+: .*the limit is \d+ input sets"):
            call()


def test_dtype_takes_names_and_dtype_objects_and_device_is_the_cpu(lstm: nnpc.Graph) -> None:
    want = lstm.run(batch=2, seed=1, dtype="float32")["h"]
    for dtype in (np.float32, np.dtype("float32"), "f32"):
        got = lstm.run(batch=2, seed=1, dtype=dtype)["h"]
        assert got.dtype == np.float32 and got.tobytes() == want.tobytes()
    half = lstm.run(batch=2, seed=1, dtype=np.float16)["h"]
    assert half.dtype == np.float16 and np.array_equal(half.astype(np.float32), want)
    with pytest.raises(nnpc.ArgumentError, match="dtype"):
        lstm.run(batch=2, dtype=np.int8)
    assert lstm.run(batch=2, seed=1, dtype="float32", device="cpu")["h"].tobytes() == want.tobytes()
    with pytest.raises(nnpc.ArgumentError, match="--device cuda"):
        lstm.run(batch=2, device="cuda")


def test_score_is_the_cli_score_on_both_engines() -> None:
    """Graph.score on the digits sample's test split: `nnpc score --json`'s loss and accuracy,
    from the bundled weights file or the same weights as arrays, graph and emulator alike."""
    g = nnpc.compile("samples/train/digits_mlp.nnp")
    want = json.loads(cli("score", "samples/train/digits_mlp.nnp", "--json").stdout)
    weights = "samples/train/digits_mlp.weights.safetensors"
    for engine in ("graph", "emulator"):
        for w in (weights, nnpc.load_tensors(weights)):
            got = g.score("samples/train/digits_mlp.data.safetensors", w, engine=engine)
            assert got == {"loss": want["loss"], "accuracy": want["accuracy"], "items": 360}
    with pytest.raises(nnpc.DataError, match="engine"):
        g.score("samples/train/digits_mlp.data.safetensors", weights, engine="board")


def test_held_weights_are_frozen_and_give_the_arrays_bits(tmp_path: Path) -> None:
    """`nnpc.Weights` is a copy, frozen: runs with it give the bits of the same arrays on a
    fresh graph whatever happens to the arrays after; it is known by identity, so held sets
    of other values (one made after another is dropped, where an address could be reused),
    arrays and seeds alternate on one graph with each one's bits; emulate, diff, score and
    gradients take it as the arrays; a file reads as `--weights` reads it."""
    path = "samples/lstm.nnp"
    graph = nnpc.compile(path)
    fresh = lambda *a, **k: nnpc.compile(path).run(*a, **k)["h"]  # noqa: E731
    w, x = graph.random_weights(3), graph.random_inputs(4, seed=5)
    want = fresh(w, x)
    held = nnpc.Weights({k: np.asfortranarray(v, dtype=np.float64) for k, v in w.items()})
    assert sorted(held) == sorted(w) and all(same_bits(held[k], w[k]) for k in w)
    assert held["Uc"].dtype == np.float32 and held["Uc"].flags.c_contiguous
    assert same_bits(graph.run(held, x)["h"], want)
    name = sorted(w)[0]
    w[name].flat[7] += np.float32(0.5)  # the caller's arrays change; the held copy does not
    assert same_bits(graph.run(held, x)["h"], want)
    changed = graph.run(w, x)["h"]
    assert same_bits(changed, fresh(w, x)) and not same_bits(changed, want)
    assert same_bits(graph.run(held, x)["h"], want)
    other = nnpc.Weights(graph.random_weights(4))
    assert same_bits(graph.run(other, x)["h"], fresh(graph.random_weights(4), x))
    del other
    again = nnpc.Weights(graph.random_weights(6))
    assert same_bits(graph.run(again, x)["h"], fresh(graph.random_weights(6), x))
    assert same_bits(graph.run(batch=4, seed=3)["h"], fresh(batch=4, seed=3))
    assert same_bits(graph.run(held, x, dtype="float32")["h"], want.astype(np.float32))
    # The other calls take it as its arrays.
    w[name].flat[7] -= np.float32(0.5)
    assert same_bits(graph.emulate(held, x)["h"], graph.emulate(w, x)["h"])
    hw = graph.emulate(w, x)
    assert graph.diff(hw, held, x).to_dict() == graph.diff(hw, w, x).to_dict()
    grads = graph.gradients(held, x, {"h": np.ones((4, 4, 256))})
    for got, exp in zip(grads, graph.gradients(w, x, {"h": np.ones((4, 4, 256))})):
        assert all(same_bits(got[k], exp[k]) for k in exp)
    # A weights file, as `nnpc run --weights` reads it.
    digits = "samples/train/digits_mlp.nnp"
    file = "samples/train/digits_mlp.weights.safetensors"
    out = tmp_path / "run.safetensors"
    cli("run", digits, "--weights", file, "--random-missing", "--batch", "3", "--seed", "5", "-o", str(out))
    got = nnpc.compile(digits).run(nnpc.Weights(file), batch=3, seed=5, random_missing=True)
    want_file = read_safetensors(out)
    assert sorted(got) == sorted(want_file)
    assert all(same_bits(got[k], want_file[k]) for k in want_file)
    score = nnpc.compile(digits).score("samples/train/digits_mlp.data.safetensors", nnpc.Weights(file))
    assert score == nnpc.compile(digits).score("samples/train/digits_mlp.data.safetensors", file)
    # A held set that lacks a weight (random_missing fills it from the seed) or holds an
    # input (which it overrides, as in weights=) gives each call's own bits.
    part = {k: v for k, v in w.items() if k != name}
    held_part = nnpc.Weights(part)
    for seed in (1, 2, 1):
        got = graph.run(held_part, x, seed=seed, random_missing=True)["h"]
        assert same_bits(got, fresh(part, x, seed=seed, random_missing=True))
    both = nnpc.Weights(dict(w, x=x["x"][:1]))
    for inputs in (x, graph.random_inputs(4, seed=6), x):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = graph.run(both, inputs)["h"]
            assert same_bits(got, fresh(dict(w, x=x["x"][:1]), inputs))
    # It pickles as its arrays (Ray ships it so).
    back = pickle.loads(pickle.dumps(held))
    assert same_bits(graph.run(back, x)["h"], want)


def test_held_weights_are_refused_as_the_arrays_are(lstm: nnpc.Graph) -> None:
    """Bad held weights raise what the same arrays raise, when a run uses them; a held set
    is a read-only mapping."""
    w, x = lstm.random_weights(), lstm.random_inputs(2)
    bad = dict(w, Uc=w["Uc"][:, :3])
    for weights in (bad, dict(w, Uc=np.full_like(w["Uc"], np.nan))):
        with pytest.raises(nnpc.DataError) as arrays:
            lstm.run(weights, x)
        with pytest.raises(nnpc.DataError) as held:
            lstm.run(nnpc.Weights(weights), x)
        assert str(held.value) == str(arrays.value)
    with pytest.raises(TypeError, match="int32.*float32"):
        nnpc.Weights(dict(w, Uc=w["Uc"].astype(np.int32)))
    with pytest.raises(TypeError, match="mapping"):
        nnpc.Weights([w["Uc"]])  # type: ignore[arg-type]
    held = nnpc.Weights(w)
    with pytest.raises(KeyError):
        held["nope"]
    with pytest.raises(TypeError):
        held["Uc"] = w["Uc"]  # type: ignore[index]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lstm.run(nnpc.Weights(dict(w, extra=w["Uc"])), x)
    assert any("`extra` is not a declaration" in str(m.message) for m in caught)
