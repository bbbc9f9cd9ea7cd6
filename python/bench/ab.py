"""`Graph.run` of two builds of the package side by side (docs/python.md, "Measurements"):
each round times warm `Graph.run` calls (seeded data, then numpy arrays) in a fresh process
of each build, the order swapped every round, and the command line's warm run back to back
(`nnpc bench`) as the reference. Run from the repository root:

    ~/.cache/nnpc/py-env/bin/python python/bench/ab.py --old OLD_DIR [--batches 64,1] [--rounds 6]

OLD_DIR holds the other build's `nnpc` package (its `python/nnpc` with the extension built
from it copied in as `_nnpc.abi3.so`); the installed package is the new one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NNPC = str(ROOT / "target" / "release" / "nnpc")


def child(program: str, batches: list[int], reps: int) -> None:
    """One build's warm calls: the medians of `reps` seeded and `reps` array calls a batch."""
    import nnpc
    from measure import median_time  # this folder's: the same timing as measure.py's

    g = nnpc.compile(program)
    out = {"package": nnpc.__file__}
    for b in batches:
        w, x = g.random_weights(0), g.random_inputs(b, seed=0)
        g.run(batch=b)
        seeded = median_time(lambda: g.run(batch=b), reps)
        g.run(w, x)
        out[str(b)] = (seeded, median_time(lambda: g.run(w, x), reps))
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True, help="the directory holding the other build's nnpc package")
    ap.add_argument("--program", default="samples/bench/lstm_1024.nnp")
    ap.add_argument("--batches", default="64,1")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args.child:
        return child(args.program, batches, args.reps)

    def build(which: str) -> dict:
        env = dict(os.environ)
        if which == "old":
            env["PYTHONPATH"] = args.old
        cmd = [sys.executable, __file__, "--child", "--old", args.old, "--program", args.program,
               "--batches", args.batches, "--reps", str(args.reps)]
        got = json.loads(subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=True).stdout)
        if (which == "old") != got["package"].startswith(str(Path(args.old).resolve())):
            raise SystemExit(f"the {which} build imported {got['package']}")
        return got

    def cli(b: int) -> float:
        cmd = [NNPC, "bench", args.program, "--batch", str(b), "--reps", "5", "--skip-emulator", "--json"]
        run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
        return json.loads(run.stdout)["software_graph"]["back_to_back_seconds"]

    keys = ("seed new/old", "arrays new/old", "seed/warm", "arrays/warm", "old seed/warm", "old arrays/warm")
    rows = {b: {k: [] for k in keys + ("warm",)} for b in batches}
    for r in range(args.rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        got = {which: build(which) for which in order}
        for b in batches:
            t = cli(b)
            (ns, na), (os_, oa) = got["new"][str(b)], got["old"][str(b)]
            for k, v in zip(keys + ("warm",), (ns / os_, na / oa, ns / t, na / t, os_ / t, oa / t, t)):
                rows[b][k].append(v)
    spread = lambda v: f"{statistics.median(v):.3f} [{min(v):.3f}, {max(v):.3f}]"  # noqa: E731
    print(f"## {args.program}: Graph.run, new against old ({args.rounds} rounds, medians [min, max] of the rounds' ratios)")
    print("| batch | warm run, back to back (ms) | " + " | ".join(keys) + " |")
    print("|---:|---:|" + "---:|" * len(keys))
    for b, d in rows.items():
        print(f"| {b} | {statistics.median(d['warm']) * 1e3:.2f} | " + " | ".join(spread(d[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
