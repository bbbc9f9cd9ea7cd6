"""Measurements of docs/python.md: Graph.run against `nnpc run` (warm), and a Ray campaign's
throughput on 1 and 2 workers. Run from the repository root:

    ~/.cache/nnpc/py-env/bin/python python/bench/measure.py [--items 100000] [--skip-ray] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
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


def median_time(f, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def overhead(program: str, batches, reps: int, rounds: int) -> None:
    g = nnpc.compile(program)
    print(f"## {program}: Graph.run against `nnpc run` ({rounds} rounds alternating the two, medians of {reps} calls each)")
    # Graph.run's calls come one after the other, so they are set against the command line's
    # warm runs back to back (its runs right after each round's first).
    print("| batch | `nnpc bench`: warm run, back to back (ms) | Graph.run warm, seed (ms) | Graph.run warm, arrays (ms) | Graph.run warm, nnpc.Weights (ms) | seed / warm | arrays / warm | nnpc.Weights / warm | `nnpc run`: its run (ms) | `nnpc run`: process (ms) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    spread = lambda v: f"{statistics.median(v):.3f} [{min(v):.3f}, {max(v):.3f}]"  # noqa: E731
    for b in batches:
        w, x = g.random_weights(0), g.random_inputs(b, seed=0)
        held = nnpc.Weights(w)
        g.run(batch=b)  # warm
        warm, seeded, arrays, helds, seed_ratio, array_ratio, held_ratio = [], [], [], [], [], [], []
        for r in range(rounds):
            # The CLI's warm run and the two calls in turn, the order swapped every round.
            def rust():
                bench = subprocess.run(
                    [NNPC, "bench", program, "--batch", str(b), "--reps", str(reps), "--skip-emulator", "--json"],
                    cwd=ROOT, capture_output=True, text=True, check=True,
                )
                return json.loads(bench.stdout)["software_graph"]["back_to_back_seconds"]

            def python():
                g.run(batch=b)
                s = median_time(lambda: g.run(batch=b), reps)
                g.run(w, x)
                a = median_time(lambda: g.run(w, x), reps)
                g.run(held, x)
                return s, a, median_time(lambda: g.run(held, x), reps)

            if r % 2 == 0:
                t, (s, a, h) = rust(), python()
            else:
                (s, a, h), t = python(), rust()
            for values, v in (
                (warm, t), (seeded, s), (arrays, a), (helds, h),
                (seed_ratio, s / t), (array_ratio, a / t), (held_ratio, h / t),
            ):
                values.append(v)
        cli_run, cli_wall = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            out = subprocess.run(
                [NNPC, "run", program, "--batch", str(b), "--json"],
                cwd=ROOT, capture_output=True, text=True, check=True,
            )
            cli_wall.append(time.perf_counter() - t0)
            cli_run.append(json.loads(out.stdout)["seconds"])
        ms = lambda v: statistics.median(v) * 1e3  # noqa: E731
        print(
            f"| {b} | {ms(warm):.2f} | {ms(seeded):.2f} | {ms(arrays):.2f} | {ms(helds):.2f} "
            f"| {spread(seed_ratio)} | {spread(array_ratio)} | {spread(held_ratio)} "
            f"| {ms(cli_run):.2f} | {ms(cli_wall):.1f} |"
        )


def campaign(items: int, batch_size: int) -> None:
    import ray
    import nnpc.ray as nr

    g = nnpc.compile("samples/lstm.nnp")
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        # The hardware's outputs: the software graph's own (a concordant campaign; what is
        # measured is the campaign's throughput, not the dump's making).
        h = g.run(batch=items, seed=0)["h"]
        x = g.random_inputs(items, seed=0)["x"]
        shards = 20
        per = items // shards
        (d / "x").mkdir()
        (d / "h").mkdir()
        for k in range(shards):
            np.save(d / "x" / f"s{k:03}.npy", x[k * per : (k + 1) * per])
            np.save(d / "h" / f"s{k:03}.npy", h[k * per : (k + 1) * per])
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        print(f"## Ray campaign: samples/lstm.nnp, {per * shards} input sets in {shards} .npy shards, batches of {batch_size}")
        print("| workers | seconds | input sets/s |")
        print("|---:|---:|---:|")
        for workers in (1, 2, 1, 2):
            ds = nr.read_shards(d / "x", d / "h", input_name="x", output_name="h")
            t0 = time.perf_counter()
            r = nr.diff_dataset("samples/lstm.nnp", ds, batch_size=batch_size, concurrency=workers)
            dt = time.perf_counter() - t0
            assert r.concordant and r.items == per * shards
            print(f"| {workers} | {dt:.2f} | {r.items / dt:,.0f} |")
        ray.shutdown()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=100000)
    ap.add_argument("--batch-size", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=5, help="rounds alternating the CLI's run and Graph.run")
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--program", default="samples/lstm.nnp")
    ap.add_argument("--batches", default="1,64,1024", help="comma-separated")
    a = ap.parse_args()
    os.chdir(ROOT)
    print(f"machine: {os.cpu_count()} CPUs; {os.uname().machine}")
    overhead(a.program, [int(b) for b in a.batches.split(",")], a.reps, a.rounds)
    if not a.skip_ray:
        campaign(a.items, a.batch_size)
