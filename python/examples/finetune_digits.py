"""Fine-tune firmware in a plain PyTorch loop, with the hardware's exact numerics.

The digits sample (``samples/train/digits_mlp.nnp``: a 64-64-10 perceptron whose products run in
low-precision BFP) starts from its bundled float-trained weights. A small float torch layer in
front of it (a 64 x 64 linear map, starting as the identity) trains jointly with the firmware
layer, whose forward pass is the concordant graph and whose backward pass is nnpc's
straight-through gradient. The same loop with the firmware replaced by plain torch
``Linear``+``ReLU`` layers (the float model) runs beside it for comparison.

    python python/examples/finetune_digits.py [--epochs 10] [--out tuned.safetensors]

The last line is JSON: the test accuracy of the float model and of the hardware numerics,
before and after, and whether the tuned firmware layer's outputs are the emulator's bits
(``Graph.emulate``, and ``Graph.diff``'s verdict, as ``nnpc emulate`` and ``nnpc diff``).
"""

import argparse
import json
import os
import time

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import nnpc
import nnpc.torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "samples", "train")
FIRMWARE = os.path.join(ROOT, "digits_mlp.nnp")
WEIGHTS = os.path.join(ROOT, "digits_mlp.weights.safetensors")
DATA = os.path.join(ROOT, "digits_mlp.data.safetensors")


def front_layer() -> nn.Linear:
    """A float 64 x 64 layer in front of the firmware, starting as the identity."""
    front = nn.Linear(64, 64)
    with torch.no_grad():
        front.weight.copy_(torch.eye(64))
        front.bias.zero_()
    return front


class FloatMlp(nn.Module):
    """The firmware's network in float: y = W2 relu(W1 x + b1) + b2."""

    def __init__(self, w):
        super().__init__()
        self.hidden, self.out = nn.Linear(64, 64), nn.Linear(64, 10)
        with torch.no_grad():
            self.hidden.weight.copy_(w["W1"]), self.hidden.bias.copy_(w["b1"])
            self.out.weight.copy_(w["W2"]), self.out.bias.copy_(w["b2"])

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x)))


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        hits = (model(x).argmax(-1) == y).float().mean().item()
    model.train()
    return hits


def train(model: nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, batch: int, lr: float):
    """A plain loop: shuffled DataLoader batches, AdamW, a cosine schedule."""
    loader = DataLoader(
        TensorDataset(x, y), batch_size=batch, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * len(loader))
    for _ in range(epochs):
        for xb, yb in loader:
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--out", default=None, help="write the tuned firmware weights here")
    args = ap.parse_args()
    torch.manual_seed(0)

    data = {k: torch.from_numpy(v) for k, v in nnpc.load_tensors(DATA).items()}
    x_train, y_train = data["x_train"], data["y_train"].long()
    x_test, y_test = data["x_test"], data["y_test"].long()
    bundled = {k: torch.from_numpy(v) for k, v in nnpc.load_tensors(WEIGHTS).items()}

    hardware = nn.Sequential(front_layer(), nnpc.torch.FirmwareLayer(FIRMWARE, weights=WEIGHTS))
    float_model = nn.Sequential(front_layer(), FloatMlp(bundled))
    report = {
        "accuracy_float_before": accuracy(float_model, x_test, y_test),
        "accuracy_hardware_before": accuracy(hardware, x_test, y_test),
    }
    t0 = time.perf_counter()
    train(hardware, x_train, y_train, args.epochs, args.batch, args.lr)
    report["seconds_hardware"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    train(float_model, x_train, y_train, args.epochs, args.batch, args.lr)
    report["seconds_float"] = time.perf_counter() - t0
    report["accuracy_float_after"] = accuracy(float_model, x_test, y_test)
    report["accuracy_hardware_after"] = accuracy(hardware, x_test, y_test)

    # The tuned firmware layer against the emulator, on what the tuned front layer feeds it.
    front, firmware = hardware[0], hardware[1]
    with torch.no_grad():
        fed = front(x_test)
        ours = firmware.eval()(fed).numpy()
    weights = {k: v.detach() for k, v in firmware.state_dict().items()}
    if args.out:
        save_file(weights, args.out)  # `nnpc run --weights` reads it
    graph = firmware.graph
    emulated = graph.emulate(weights, {"x": fed}, dtype="float32")["y"]
    report["emulator_bits_equal"] = bool(np.array_equal(ours.view(np.uint32), emulated.view(np.uint32)))
    report["diff_concordant"] = graph.diff({"y": emulated}, weights, {"x": fed}).concordant
    print(
        f"test accuracy: float {report['accuracy_float_before']:.4f} -> "
        f"{report['accuracy_float_after']:.4f}, hardware numerics "
        f"{report['accuracy_hardware_before']:.4f} -> {report['accuracy_hardware_after']:.4f}"
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
