"""nnpc.torch.FirmwareLayer: the firmware as a trainable torch layer.

Its forward values are `nnpc run`'s bits (the command line is the reference); its gradients are
`Graph.gradients`' bits (nnp_runtime::train, whose finite-difference checks of every op kind
are runtime/exec/tests/train.rs), and the straight-through rule is checked against a hand
calculation. The rest: what torch users expect (optimizers, schedules, DataLoader batches,
nn.Sequential, no_grad/eval, state_dict files, torch.compile) and DataError for bad data.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import nnpc  # noqa: E402
import nnpc.torch  # noqa: E402
from conftest import ROOT, cli, read_safetensors, sample_targets  # noqa: E402

DIGITS = ROOT / "samples" / "train" / "digits_mlp.nnp"


def bits(t) -> np.ndarray:
    a = t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    return np.ascontiguousarray(a).view(np.uint8)


def call(layer, inputs):
    """The layer on `{name: tensor}`: its outputs by name."""
    out = layer(**inputs)
    return out if isinstance(out, dict) else {layer.graph.outputs.__iter__().__next__(): out}


@pytest.mark.parametrize("sample,target", sample_targets(), ids=lambda v: str(v))
def test_forward_is_nnpc_run(sample: str, target, tmp_path: Path) -> None:
    """Every sample (the LSTM's several time steps included), batch 16, seeded data: the
    layer's outputs are the values `nnpc run --seed 3 -o` writes, bit for bit."""
    layer = nnpc.torch.FirmwareLayer(f"samples/{sample}", target, seed=3)
    xs = {n: torch.from_numpy(a) for n, a in layer.graph.random_inputs(16, seed=3).items()}
    got = call(layer, xs)
    out = tmp_path / "sw.safetensors"
    on = ["--target", target] if target else []
    cli("run", f"samples/{sample}", *on, "--batch", "16", "--seed", "3", "-o", str(out))
    want = read_safetensors(out)
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        assert got[name].dtype == torch.float32
        assert np.array_equal(bits(got[name]), bits(w.astype(np.float32))), f"{sample} `{name}`"


@pytest.mark.parametrize("sample", ["lstm.nnp", "gru.nnp", "mlp2_relu.nnp", "softmax_classifier.nnp"])
def test_gradients_are_graph_gradients_bit_for_bit(sample: str) -> None:
    """loss = sum(c * y): every parameter's and input's gradient is Graph.gradients' (the
    Rust twin's), in the parameter's float32 and the input's dtype."""
    layer = nnpc.torch.FirmwareLayer(f"samples/{sample}", seed=1)
    g = layer.graph
    xs = {n: torch.from_numpy(a.astype(np.float64)).requires_grad_() for n, a in g.random_inputs(4, seed=2).items()}
    outs = call(layer, xs)
    coeff = {n: torch.linspace(-1.5, 2.0, y.numel()).reshape(y.shape) for n, y in outs.items()}
    sum(((outs[n] * c).sum() for n, c in coeff.items()), torch.zeros(())).backward()
    weights = {n: p.detach().numpy() for n, p in layer.named_parameters()}
    dw, dx = g.gradients(weights, {n: x.detach() for n, x in xs.items()}, {n: c.numpy() for n, c in coeff.items()})
    assert sorted(dw) == sorted(weights) and sorted(dx) == sorted(xs)
    for n, p in layer.named_parameters():
        assert p.grad.dtype == torch.float32
        assert np.array_equal(bits(p.grad), bits(dw[n].astype(np.float32))), f"d/d{n}"
    for n, x in xs.items():
        assert x.grad.dtype == torch.float64
        assert np.array_equal(bits(x.grad), bits(dx[n])), f"d/d{n}"
    assert any(np.any(v != 0) for v in dw.values())


# y = W x on a tiny dense layer, the vector quantized to fixed(2, 2) (a grid of 0.25 in
# [-2, 1.75], saturating), the matrix exact.
DENSE = """matrix W : [2, 2] at mrf[0]
input x : [2]
output y : [2]
quant mvm.vector = fixed(int = 2, frac = 2)
quant mvm.matrix = fp32
v_rd netq
v_wr ivrf[0]
end_chain
v_rd ivrf[0]
mv_mul mrf[W]
v_wr netq
end_chain
"""


def test_the_straight_through_rule_by_hand() -> None:
    """x = (0.6, 3.0) quantizes to (0.5, 1.75): 3.0 saturates. With W = [[1, 2], [0.5, -1]]
    and dL/dy = (1, 2), by hand:
    - y = W q(x) = (1*0.5 + 2*1.75, 0.5*0.5 - 1*1.75) = (4.0, -1.5);
    - dL/dW[i][j] = g_i * q(x)_j, the quantized vector: [[0.5, 1.75], [1.0, 3.5]];
    - dL/dx_0 = 1*1 + 2*0.5 = 2.0 (straight through); dL/dx_1 = 0 (saturated)."""
    W = torch.tensor([[1.0, 2.0], [0.5, -1.0]])
    layer = nnpc.torch.FirmwareLayer(DENSE, weights={"W": W})
    x = torch.tensor([[0.6, 3.0]], requires_grad=True)
    y = layer(x)
    assert y.tolist() == [[4.0, -1.5]]
    (y * torch.tensor([[1.0, 2.0]])).sum().backward()
    assert layer.W.grad.tolist() == [[0.5, 1.75], [1.0, 3.5]]
    assert x.grad.tolist() == [[2.0, 0.0]]


def test_trains_in_a_plain_torch_loop() -> None:
    """A float layer in front, AdamW, a cosine schedule, DataLoader batches of uneven size:
    the loss falls and both layers' weights move."""
    torch.manual_seed(0)
    from torch.utils.data import DataLoader, TensorDataset

    data = nnpc.load_tensors(ROOT / "samples" / "train" / "digits_mlp.data.safetensors")
    x, y = torch.from_numpy(data["x_train"][:100]), torch.from_numpy(data["y_train"][:100]).long()
    front = torch.nn.Linear(64, 64)
    layer = nnpc.torch.FirmwareLayer(DIGITS, weights=DIGITS.with_name("digits_mlp.weights.safetensors"))
    model = torch.nn.Sequential(front, torch.nn.Tanh(), layer)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = DataLoader(TensorDataset(x, y), batch_size=33, shuffle=True)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4 * len(loader))
    losses = []
    for _ in range(4):
        total = 0.0
        for xb, yb in loader:  # 33, 33, 33, 1
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(xb)
        losses.append(total / len(x))
    assert losses[-1] < 0.8 * losses[0], losses
    for n, p in model.named_parameters():
        assert not torch.equal(p.detach(), start[n]), f"{n} did not move"


def test_no_grad_and_eval_run_forward_only() -> None:
    layer = nnpc.torch.FirmwareLayer(DIGITS, seed=0)
    x = torch.from_numpy(layer.graph.random_inputs(5, seed=1)["x"])
    trained = layer(x)
    assert trained.requires_grad
    with torch.no_grad():
        plain = layer(x)
    assert not plain.requires_grad and torch.equal(plain, trained.detach())
    layer.eval()
    evaluated = layer(x)
    assert not evaluated.requires_grad and torch.equal(evaluated, plain)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_inputs_of_any_float_dtype_and_strides(dtype: str) -> None:
    """A strided view of any float dtype gives the bits of its float32 values, C order."""
    layer = nnpc.torch.FirmwareLayer(DIGITS, seed=0)
    wide = torch.from_numpy(layer.graph.random_inputs(6, seed=4)["x"]).repeat(1, 2)
    x = wide.to(getattr(torch, dtype))[:, ::2]
    assert not x.is_contiguous()
    want = layer(x.float().contiguous())
    assert torch.equal(layer(x).view(torch.int32), want.view(torch.int32))


def test_the_state_dict_is_a_weights_file_for_the_cli(tmp_path: Path) -> None:
    safetensors = pytest.importorskip("safetensors.torch")
    layer = nnpc.torch.FirmwareLayer(DIGITS, seed=2)
    with torch.no_grad():
        for p in layer.parameters():
            p.mul_(1.25)
    safetensors.save_file(layer.state_dict(), str(tmp_path / "w.safetensors"))
    x = layer.graph.random_inputs(3, seed=9)["x"]
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "y.safetensors"
    cli("run", str(DIGITS), "--weights", str(tmp_path / "w.safetensors"), "--inputs", str(tmp_path / "x.npy"), "-o", str(out))
    want = read_safetensors(out)["y"].astype(np.float32)
    assert np.array_equal(bits(layer(torch.from_numpy(x))), bits(want))


def test_torch_compile_treats_the_layer_as_one_op() -> None:
    """Under torch.compile (AOTAutograd; inductor behaves the same, docs/python.md) the
    forward bits and the gradients are eager mode's."""
    torch.manual_seed(0)
    layer = nnpc.torch.FirmwareLayer(DIGITS, seed=0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), layer)
    x = torch.randn(8, 64)
    compiled = torch.compile(model, backend="aot_eager")
    y = compiled(x)
    assert torch.equal(y, model(x))
    y.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for g, p in zip(grads, model.parameters()):
        assert torch.equal(g, p.grad)


def test_bad_data_raises_data_error() -> None:
    layer = nnpc.torch.FirmwareLayer(DIGITS, seed=0)
    with pytest.raises(nnpc.DataError, match=r"input `x` has shape \[3, 63\]"):
        layer(torch.zeros(3, 63))
    with pytest.raises(nnpc.DataError, match="batch first"):
        layer(torch.zeros(64))
    with pytest.raises(nnpc.DataError, match="`z` is not an input"):
        layer(z=torch.zeros(1, 64))
    nan = torch.zeros(2, 64)
    nan[1, 5] = float("nan")
    with pytest.raises(nnpc.DataError, match="x"):
        layer(nan)
    with pytest.raises(nnpc.DataError, match="`V` is not a weight"):
        nnpc.torch.FirmwareLayer(DIGITS, weights={"V": np.zeros(3)})
    with pytest.raises(nnpc.DataError, match="W1"):
        nnpc.torch.FirmwareLayer(DIGITS, weights={"W1": np.zeros((3, 3))})


def test_parameters_and_torch_dtypes_go_into_a_graph_as_they_are() -> None:
    """A Graph takes a layer's parameters (tensors that require grad) and torch dtypes."""
    layer = nnpc.torch.FirmwareLayer(DIGITS, seed=0)
    g = layer.graph
    x = g.random_inputs(2, seed=1)
    params = dict(layer.named_parameters())
    assert all(p.requires_grad for p in params.values())
    got = g.run(params, x, dtype=torch.float32)["y"]
    want = g.run({n: p.detach().numpy() for n, p in params.items()}, x, dtype="float32")["y"]
    assert got.dtype == np.float32 and got.tobytes() == want.tobytes()
    assert g.run(params, x, device=torch.device("cpu"), dtype=torch.float32)["y"].tobytes() == want.tobytes()
