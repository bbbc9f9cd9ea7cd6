#!/usr/bin/env python3
"""Golden conversion results from ml_dtypes (PyPI), the independent reference for nnp-numerics.

Rerun:  pip install ml_dtypes numpy && python3 numerics/golden/gen.py
Writes next to this script (little-endian, no header; the Rust tests in
numerics/tests/golden.rs know the layouts):

fp16_all.bin   65,536 records, one per fp16 bit pattern i (in order), 7 bytes each:
               bf16 bits (u16), then float8_e4m3fn, float8_e5m2, float6_e3m2fn, float6_e2m3fn,
               float4_e2m1fn bits (u8 each) of the fp16 value i converted by ml_dtypes.
f32_sample.bin N records of 13 bytes: the f32 input bits (u32), fp16 bits (u16, numpy),
               bf16 bits (u16), then e4m3fn, e5m2, e3m2fn, e2m3fn, e2m1fn bits (u8 each).
               Inputs: a fixed-seed mix of random bit patterns, random values in the fp8/fp16
               ranges, and exact rounding midpoints of fp16 / bf16 / fp8 grids +- 1 f32 ulp.

ml_dtypes semantics (what the tests compare against): round to nearest, ties to even;
float8_e4m3fn overflows to NaN (it has no infinity; OCP MX instead saturates, tested
separately), float8_e5m2 overflows to infinity, the fp6/fp4 types saturate to their max.
"""
import os

import ml_dtypes as md
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SMALL = [md.float8_e4m3fn, md.float8_e5m2, md.float6_e3m2fn, md.float6_e2m3fn, md.float4_e2m1fn]


def bits8(x, t):
    return x.astype(t).view(np.uint8)


def fp16_all():
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    f = h.astype(np.float32)  # exact
    rec = np.zeros((65536, 7), dtype=np.uint8)
    rec[:, 0:2] = f.astype(md.bfloat16).view(np.uint16).astype("<u2").view(np.uint8).reshape(-1, 2)
    for k, t in enumerate(SMALL):
        rec[:, 2 + k] = bits8(f, t)
    return rec.tobytes()


def midpoints(values):
    """Exact midpoints between consecutive finite f32 values of a sorted grid, +- 1 ulp."""
    v = np.unique(values[np.isfinite(values)].astype(np.float64))
    mid = ((v[:-1] + v[1:]) / 2).astype(np.float32)  # exact for the grids used here
    up = np.nextafter(mid, np.float32(np.inf))
    down = np.nextafter(mid, np.float32(-np.inf))
    return np.concatenate([mid, up, down, -mid])


def f32_sample():
    rng = np.random.default_rng(20240607)
    parts = [
        rng.integers(0, 2**32, size=40_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
    ]
    sign = rng.choice([-1.0, 1.0], size=60_000)
    exp = rng.integers(-30, 19, size=60_000)
    mant = rng.random(60_000) + 1.0
    parts.append((sign * mant * 2.0 ** exp).astype(np.float32))
    grid16 = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    m16 = midpoints(grid16)
    parts.append(rng.choice(m16, size=30_000, replace=False))
    gridbf = (np.arange(65536, dtype=np.uint32) << 16).astype(np.uint32).view(np.float32)
    parts.append(rng.choice(midpoints(gridbf), size=10_000, replace=False))
    for t in SMALL:
        g = np.arange(256, dtype=np.uint32).astype(np.uint8).view(t).astype(np.float32)
        parts.append(midpoints(g))
    x = np.concatenate(parts).astype(np.float32)
    n = len(x)
    rec = np.zeros((n, 13), dtype=np.uint8)
    rec[:, 0:4] = x.view(np.uint32).astype("<u4").view(np.uint8).reshape(-1, 4)
    with np.errstate(over="ignore", invalid="ignore"):
        rec[:, 4:6] = x.astype(np.float16).view(np.uint16).astype("<u2").view(np.uint8).reshape(-1, 2)
        rec[:, 6:8] = x.astype(md.bfloat16).view(np.uint16).astype("<u2").view(np.uint8).reshape(-1, 2)
        for k, t in enumerate(SMALL):
            rec[:, 8 + k] = bits8(x, t)
    return rec.tobytes(), n


def main():
    with np.errstate(over="ignore", invalid="ignore"):
        a = fp16_all()
    with open(os.path.join(HERE, "fp16_all.bin"), "wb") as f:
        f.write(a)
    b, n = f32_sample()
    with open(os.path.join(HERE, "f32_sample.bin"), "wb") as f:
        f.write(b)
    print(f"fp16_all.bin: {len(a)} bytes; f32_sample.bin: {n} records, {len(b)} bytes "
          f"(ml_dtypes {md.__version__}, numpy {np.__version__})")


if __name__ == "__main__":
    main()
