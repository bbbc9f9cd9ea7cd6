"""docs/benchmarks-tools.md, "Discordant Ray campaigns": a campaign whose every element may mismatch
(hardware made with the weights of another seed) against a concordant one and `nnpc diff`
on the same data, in one run. Run from the repository root (after python/ci.sh):

    ~/.cache/nnpc/py-env/bin/python python/bench/campaign.py [--items 20000] [--reps 3]

Prints, per case, the median wall seconds of the campaign (a warm local cluster,
`ray.init(num_cpus=2)`; dataset, actors and merge included) and of `nnpc diff --json` on the
whole dump, then the ratios; and the per-batch part (`Graph._core.diff_part`, as a worker
runs it) against `Graph.diff` on 1,024 items. Checks that each campaign's report is
`nnpc diff`'s (the QSNR to within the rounding of its sums).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import nnpc

ROOT = Path(__file__).resolve().parents[2]
NNPC = str(ROOT / "target" / "release" / "nnpc")
PROGRAM = "samples/lstm.nnp"


def timed(f):
    t0 = time.perf_counter()
    out = f()
    return time.perf_counter() - t0, out


def same_report(a: dict, b: dict) -> bool:
    """Equal field for field, the QSNR to within the rounding of its f64 sums: each of n
    non-negative terms, added in any order, is within (n - 1) u (u = 2^-53) of the exact sum,
    so two orders' QSNRs (10 log10 of a ratio) are within 10 / ln 10 * 4 n u dB."""
    a, b = json.loads(json.dumps(a)), json.loads(json.dumps(b))
    for o, p in zip(a["outputs"], b["outputs"]):
        q, r = o.pop("qsnr_db"), p.pop("qsnr_db")
        bound = 10 / math.log(10) * 4 * o["elements"] * 2.0**-53
        if not (q == r or abs(float(q) - float(r)) <= bound):
            return False
    return a == b


def per_batch(g: nnpc.Graph, x: np.ndarray, hw: np.ndarray, reps: int) -> tuple:
    """Median seconds of Graph.diff and of the campaign's part on 1,024 items."""
    w = g.random_weights(0)
    xs, hs = {"x": x[:1024]}, {"h": hw[:1024]}
    ids = list(range(1024))
    g.diff(hs, w, xs)
    diff = statistics.median(timed(lambda: g.diff(hs, w, xs))[0] for _ in range(reps))
    part = statistics.median(
        timed(lambda: g._core.diff_part(hs, xs, ids, w, 0, 10, 10))[0] for _ in range(reps)
    )
    return diff, part


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=20000)
    ap.add_argument("--shards", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    os.chdir(ROOT)
    import ray
    import nnpc.ray as nr

    g = nnpc.compile(PROGRAM)
    x = g.random_inputs(a.items, seed=0)["x"]
    cases = {
        "concordant": g.run(batch=a.items, seed=0)["h"],
        "discordant": g.run(g.random_weights(1), {"x": x})["h"],
    }
    print(f"machine: {os.cpu_count()} CPUs, {os.uname().machine}; {a.items} items of {PROGRAM}, "
          f"{a.shards} .npy shards, batches of {a.batch_size}, medians of {a.reps}")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        per = a.items // a.shards
        for name, hw in cases.items():
            d = Path(tmp) / name
            for sub in ("x", "h", "dump"):
                (d / sub).mkdir(parents=True)
            np.save(d / "dump" / "h.npy", hw)
            for k in range(a.shards):
                np.save(d / "x" / f"s{k:03}.npy", x[k * per : (k + 1) * per])
                np.save(d / "h" / f"s{k:03}.npy", hw[k * per : (k + 1) * per])
            cli = [NNPC, "diff", PROGRAM, "--hardware", str(d / "dump"), "--json"]
            cli_s, camp_s = [], []
            for _ in range(a.reps):
                t, p = timed(lambda: subprocess.run(cli, capture_output=True, text=True))
                cli_s.append(t)
                ref = json.loads(p.stdout)
                ds = nr.read_shards(d / "x", d / "h", input_name="x", output_name="h")
                t, r = timed(lambda: nr.diff_dataset(PROGRAM, ds, batch_size=a.batch_size))
                camp_s.append(t)
                assert same_report(r.to_dict(), ref), f"{name}: the campaign is not nnpc diff"
            rows[name] = (statistics.median(camp_s), statistics.median(cli_s), camp_s, cli_s)
            print(f"{name}: campaign {camp_s}, nnpc diff {cli_s}")
    ray.shutdown()
    print("| case | campaign (s) | `nnpc diff` (s) | campaign / `nnpc diff` |")
    print("|---|---:|---:|---:|")
    for name, (c, d, _, _) in rows.items():
        print(f"| {name} | {c:.2f} | {d:.2f} | {c / d:.2f} |")
    print(f"discordant / concordant campaign: {rows['discordant'][0] / rows['concordant'][0]:.2f}")
    for name, hw in cases.items():
        diff, part = per_batch(g, x, hw, max(a.reps, 5))
        print(f"per 1,024 items, {name}: Graph.diff {diff:.3f} s, campaign part {part:.3f} s, "
              f"ratio {part / diff:.2f}")


if __name__ == "__main__":
    main()
