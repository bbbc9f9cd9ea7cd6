#!/usr/bin/env python3
"""Data and float-trained starting weights for samples/train/digits_mlp.nnp.

Makes two files next to the sample (or in --out-dir):

  digits_mlp.data.safetensors     x_train [1437, 64], y_train [1437], x_test [360, 64], y_test [360]
  digits_mlp.weights.safetensors  W1 [64, 64], b1 [64], W2 [10, 64], b2 [10]

all float32. The data is scikit-learn's bundled 8x8 handwritten digits (load_digits(): 1,797
images, no download): x = pixels / 16 in [0, 1], labels as float class indices 0.0 .. 9.0. The
split is fixed: numpy.random.default_rng(0).permutation(1797), the first 360 items for test, the
rest for training.

The weights are the float MLP of the sample, h = relu(W1 x + b1), y = W2 h + b2 (W rows are
output units, columns inputs), trained here in numpy: seed 0, He-uniform init, zero biases,
softmax cross-entropy, Adam, minibatches of 64, a fixed number of epochs. It prints the float
test accuracy. `nnpc train` then fine-tunes these weights against the sample's low-precision
numerics (docs/training.md).

Everything is deterministic: running it twice gives byte-identical files. The safetensors files
are written by hand (8-byte little-endian header length, JSON header with keys sorted, padded
with spaces to a multiple of 8 bytes, then raw little-endian data), so writing needs only numpy.

Needs numpy and scikit-learn (PyPI), e.g.
  python3 -m venv /tmp/digits-venv && /tmp/digits-venv/bin/pip install numpy scikit-learn
Run from anywhere:
  /tmp/digits-venv/bin/python scripts/digits_data.py [--out-dir DIR] [--epochs N]
"""

import argparse
import json
import os
import struct

import numpy as np

N_TEST = 360
HIDDEN = 64
CLASSES = 10


def write_safetensors(path, tensors):
    """Write {name: float32 array} as a safetensors file (keys sorted, header space-padded)."""
    names = sorted(tensors)
    header = {}
    blobs = []
    offset = 0
    for name in names:
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        raw = a.tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(a.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def read_safetensors(path):
    """Read an F32/F16 safetensors file into {name: float32 array} (for checks; numpy only)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F32": "<f4", "F16": "<f2"}[info["dtype"]]
        lo, hi = info["data_offsets"]
        out[name] = (
            np.frombuffer(data[base + lo : base + hi], dtype=dtype)
            .reshape(info["shape"])
            .astype(np.float32)
        )
    return out


def load_split():
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.float32)
    perm = np.random.default_rng(0).permutation(len(x))
    test, train = perm[:N_TEST], perm[N_TEST:]
    return x[train], y[train], x[test], y[test]


def forward(p, x):
    """Batched forward pass: x [n, 64] -> (hidden pre-activation, hidden, logits)."""
    z = x @ p["W1"].T + p["b1"]
    h = np.maximum(z, 0.0)
    return z, h, h @ p["W2"].T + p["b2"]


def accuracy(p, x, y):
    return float(np.mean(np.argmax(forward(p, x)[2], axis=1) == y.astype(np.int64)))


def train(x, y, epochs, lr, batch=64, seed=0):
    rng = np.random.default_rng(seed)
    n_in = x.shape[1]

    def he_uniform(rows, cols):
        limit = np.sqrt(6.0 / cols)
        return rng.uniform(-limit, limit, size=(rows, cols)).astype(np.float32)

    p = {
        "W1": he_uniform(HIDDEN, n_in),
        "b1": np.zeros(HIDDEN, np.float32),
        "W2": he_uniform(CLASSES, HIDDEN),
        "b2": np.zeros(CLASSES, np.float32),
    }
    m = {k: np.zeros_like(a) for k, a in p.items()}
    v = {k: np.zeros_like(a) for k, a in p.items()}
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    labels = y.astype(np.int64)
    step = 0
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for i in range(0, len(x), batch):
            idx = order[i : i + batch]
            xb, yb = x[idx], labels[idx]
            z, h, logits = forward(p, xb)
            logits = logits - logits.max(axis=1, keepdims=True)
            prob = np.exp(logits)
            prob /= prob.sum(axis=1, keepdims=True)
            prob[np.arange(len(idx)), yb] -= 1.0
            dy = prob / len(idx)  # d(mean cross-entropy)/d(logits)
            dh = (dy @ p["W2"]) * (z > 0)
            grads = {
                "W2": dy.T @ h,
                "b2": dy.sum(axis=0),
                "W1": dh.T @ xb,
                "b1": dh.sum(axis=0),
            }
            step += 1
            for k, g in grads.items():
                m[k] = beta1 * m[k] + (1 - beta1) * g
                v[k] = beta2 * v[k] + (1 - beta2) * g * g
                mh = m[k] / (1 - beta1**step)
                vh = v[k] / (1 - beta2**step)
                p[k] = (p[k] - lr * mh / (np.sqrt(vh) + eps)).astype(np.float32)
    return p


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--out-dir",
        default=os.path.join(here, "..", "samples", "train"),
        help="where to write the two files (default: samples/train)",
    )
    ap.add_argument("--epochs", type=int, default=60, help="training epochs (default: 60)")
    ap.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default: 1e-3)")
    args = ap.parse_args()

    x_train, y_train, x_test, y_test = load_split()
    os.makedirs(args.out_dir, exist_ok=True)
    data_path = os.path.join(args.out_dir, "digits_mlp.data.safetensors")
    write_safetensors(
        data_path,
        {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test},
    )

    p = train(x_train, y_train, args.epochs, args.lr)
    weights_path = os.path.join(args.out_dir, "digits_mlp.weights.safetensors")
    write_safetensors(weights_path, p)

    print(f"wrote {os.path.normpath(data_path)} ({len(x_train)} train, {len(x_test)} test)")
    print(f"wrote {os.path.normpath(weights_path)} (64-64-10, {args.epochs} epochs)")
    print(f"float train accuracy: {accuracy(p, x_train, y_train):.4f}")
    print(f"float test accuracy:  {accuracy(p, x_test, y_test):.4f}")


if __name__ == "__main__":
    main()
