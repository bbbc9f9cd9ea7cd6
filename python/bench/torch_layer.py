"""A training step of nnpc.torch.FirmwareLayer, side by side with `nnpc train --bench` and
with the same network as a PyTorch model with microxcaling-style BFP fake quantization and as
a plain float PyTorch model (torch's own cost of a step of this network).

    ~/.cache/nnpc/py-env/bin/python python/bench/torch_layer.py [--runs 5] [--steps 30]

Each run measures the four in turn (the order alternates between runs) on the digits sample
(`samples/train/digits_mlp.nnp`), at batch 32 and 256: medians of `--steps` steps, then the
median and range over runs of each ratio.
"""

import argparse
import json
import re
import subprocess
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

import nnpc
import nnpc.torch

ROOT = Path(__file__).resolve().parents[2]
FIRMWARE = ROOT / "samples" / "train" / "digits_mlp.nnp"
WEIGHTS = ROOT / "samples" / "train" / "digits_mlp.weights.safetensors"
NNPC = ROOT / "target" / "release" / "nnpc"


def bfp_fake_quantize(x: torch.Tensor, mant: int, block: int = 128) -> torch.Tensor:
    """Block floating point along the last axis (microxcaling's `_quantize_mx` pattern): one
    shared exponent per block of `block` lanes (the largest element's), `mant` bits of
    mantissa with the sign, round half to even; straight-through gradient."""
    lanes = x.shape[-1]
    pad = (-lanes) % block
    xb = nn.functional.pad(x, (0, pad)).reshape(*x.shape[:-1], -1, block)
    top = xb.abs().amax(-1, keepdim=True).clamp_min(2.0**-126)
    scale = torch.exp2(torch.floor(torch.log2(top)) - (mant - 2))
    limit = 2.0 ** (mant - 1) - 1
    q = (torch.round(xb / scale).clamp(-limit, limit) * scale).reshape(*x.shape[:-1], -1)[..., :lanes]
    return x + (q - x).detach()


class FakeQuantMlp(nn.Module):
    """The digits network in torch, both operands of each product fake-quantized as the
    firmware's targets say (vector bfp mant 4, matrix rows bfp mant 2); with ``quantize=False``
    the plain float network (what a torch step costs with no firmware in it)."""

    def __init__(self, w, quantize: bool = True):
        super().__init__()
        self.w = nn.ParameterDict({k: nn.Parameter(torch.from_numpy(v)) for k, v in w.items()})
        self.quantize = quantize

    def linear(self, x, w, b):
        if not self.quantize:
            return nn.functional.linear(x, w, b)
        return nn.functional.linear(bfp_fake_quantize(x, 4), bfp_fake_quantize(w, 2), b)

    def forward(self, x):
        h = torch.relu(self.linear(x, self.w["W1"], self.w["b1"]))
        return self.linear(h, self.w["W2"], self.w["b2"])


def step_time(model: nn.Module, x, y, steps: int) -> float:
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    times = []
    for _ in range(steps + 3):
        t0 = time.perf_counter()
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return float(np.median(times[3:]))


def cli_step(batch: int, steps: int) -> float:
    out = subprocess.run(
        [str(NNPC), "train", str(FIRMWARE), "--bench", str(steps), "--batch", str(batch)],
        capture_output=True, text=True, check=True,
    ).stdout
    ms = re.search(r"training step\s+([0-9.]+) ms", out)
    return float(ms.group(1)) / 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    data = nnpc.load_tensors(ROOT / "samples" / "train" / "digits_mlp.data.safetensors")
    weights = nnpc.load_tensors(WEIGHTS)
    result = {}
    for batch in (32, 256):
        x = torch.from_numpy(data["x_train"][:batch])
        y = torch.from_numpy(data["y_train"][:batch]).long()
        ratios = {"layer/cli": [], "layer/fake_quant": [], "float/cli": []}
        rows = []
        for run in range(args.runs):
            measures = {
                "layer": lambda: step_time(nnpc.torch.FirmwareLayer(FIRMWARE, weights=WEIGHTS), x, y, args.steps),
                "cli": lambda: cli_step(batch, args.steps),
                "fake_quant": lambda: step_time(FakeQuantMlp(weights), x, y, args.steps),
                "float": lambda: step_time(FakeQuantMlp(weights, quantize=False), x, y, args.steps),
            }
            order = list(measures) if run % 2 == 0 else list(reversed(measures))
            t = {k: measures[k]() for k in order}
            rows.append(t)
            ratios["layer/cli"].append(t["layer"] / t["cli"])
            ratios["layer/fake_quant"].append(t["layer"] / t["fake_quant"])
            ratios["float/cli"].append(t["float"] / t["cli"])
        result[batch] = {
            "ms": {k: 1e3 * float(np.median([r[k] for r in rows])) for k in rows[0]},
            "ratios": {k: [float(np.median(v)), float(min(v)), float(max(v))] for k, v in ratios.items()},
        }
        print(f"batch {batch}: step ms (medians) {result[batch]['ms']}; ratios [median, min, max] {result[batch]['ratios']}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
