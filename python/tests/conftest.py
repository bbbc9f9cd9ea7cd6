"""Shared helpers: the command line `nnpc` (the reference) and raw reads of its files."""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
NNPC = Path(os.environ.get("NNPC_BIN", ROOT / "target" / "release" / "nnpc"))
SAMPLES = sorted((ROOT / "samples").glob("*.nnp"))

_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64}


def read_safetensors(path: Path) -> Dict[str, np.ndarray]:
    """The tensors of a safetensors file, read from its raw bytes (not through nnpc)."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        start, end = t["data_offsets"]
        raw = data[8 + n + start : 8 + n + end]
        out[name] = np.frombuffer(raw, dtype=_DTYPES[t["dtype"]]).reshape(t["shape"])
    return out


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run `nnpc ARGS` from the repository root."""
    if not NNPC.exists():
        pytest.fail(f"{NNPC} is missing: build it with `cargo build --release --bin nnpc`")
    p = subprocess.run([str(NNPC), *args], cwd=ROOT, capture_output=True, text=True)
    if check and p.returncode not in (0, 1):
        raise AssertionError(f"nnpc {' '.join(args)} exited {p.returncode}: {p.stderr}")
    return p


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal dtype, shape and bytes."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def target_arg(name: str) -> str:
    """A target named in a sample's `// nnpc: targets =` line, as `--target` takes it."""
    toml = ROOT / "samples" / "targets" / f"{name}.toml"
    return f"samples/targets/{name}.toml" if toml.exists() else name


def sample_targets() -> List[tuple]:
    """(sample, target) pairs: every sample on the first target it names, and two samples on
    a float32-storage and an MX target (float32 outputs, other numerics)."""
    pairs = []
    for p in SAMPLES:
        line = next((l for l in p.read_text().splitlines() if "nnpc: targets =" in l), "")
        names = [n.strip() for n in line.split("=", 1)[-1].split(",") if n.strip()]
        pairs.append((p.name, target_arg(names[0]) if names else None))
    pairs += [("lstm.nnp", target_arg("fp32")), ("mlp2_relu.nnp", target_arg("mx-fp8"))]
    return pairs


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests name files as the command line does, from the repository root."""
    monkeypatch.chdir(ROOT)
