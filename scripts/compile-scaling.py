#!/usr/bin/env python3
"""Time `nnpc compile` on the README's LSTM at 10^3 to 10^6 executed instructions.

BENCHMARKS.md, "Compiling large programs". The LSTM (`samples/lstm.nnp`) runs 46 instructions
a step: T = 22, 217, 2174 and 21739 steps give 1,012 to 999,994 instructions (`nnpc graph FILE
--format json` counts them: one node per instruction and iteration). For each binary given,
each round runs `nnpc check FILE` then `nnpc compile FILE -o OUT` at every size, the binaries
alternated (their order swapped every round). It prints, per binary and size, the medians and
ranges over the rounds of: compile's wall time, its CPU time (user and system), compile over
check of the same file in the same round, time per instruction over that at 10^3, the file's
bytes per instruction and compile's peak resident set.

    scripts/compile-scaling.py target/release/nnpc /tmp/nnpc-base --rounds 5
"""

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

STEPS = [22, 217, 2174, 21739]
PER_STEP = 46


def timed(cmd):
    """Wall seconds, user and system seconds and peak RSS (MiB) of one command."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if status != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({status}): {err}")
    return wall, usage.ru_utime, usage.ru_stime, usage.ru_maxrss / 1024


def spread(values, fmt):
    """`median (min to max)`."""
    med = statistics.median(values)
    return f"{fmt.format(med)} ({fmt.format(min(values))} to {fmt.format(max(values))})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binaries", nargs="+", help="nnpc binaries to compare")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    root = Path(__file__).resolve().parent.parent
    lstm = (root / "samples/lstm.nnp").read_text()
    work = Path(tempfile.mkdtemp(prefix="nnpc-compile-scaling-"))
    files = {}
    for t in STEPS:
        path = work / f"lstm-{t}.nnp"
        path.write_text(lstm.replace("let T = 4\n", f"let T = {t}\n", 1))
        files[t] = path
    # results[binary][steps] = list of (wall, user, sys, rss, check_wall, bytes)
    results = {b: {t: [] for t in STEPS} for b in args.binaries}
    for r in range(args.rounds):
        order = args.binaries if r % 2 == 0 else list(reversed(args.binaries))
        for t in STEPS:
            for b in order:
                out = work / f"out-{t}.swg.json"
                check = timed([b, "-q", "check", str(files[t])])[0]
                wall, user, sys_, rss = timed([b, "-q", "compile", str(files[t]), "-o", str(out)])
                results[b][t].append((wall, user, sys_, rss, check, out.stat().st_size))
                out.unlink()
    print(f"{args.rounds} rounds, medians (ranges)\n")
    print("| binary | instructions | compile | user + system | compile / check "
          "| time per instruction / at 10^3 | bytes per instruction | peak RSS |")
    print("|---|---|---|---|---|---|---|---|")
    for b in args.binaries:
        base = statistics.median(x[0] for x in results[b][STEPS[0]]) / (STEPS[0] * PER_STEP)
        for t in STEPS:
            rows = results[b][t]
            n = t * PER_STEP
            print(
                f"| `{b}` | {n:,} | {spread([x[0] for x in rows], '{:.3f} s')} "
                f"| {spread([x[1] + x[2] for x in rows], '{:.2f} s')} "
                f"| {spread([x[0] / x[4] for x in rows], '{:.2f}')} "
                f"| {spread([x[0] / n / base for x in rows], '{:.2f}')} "
                f"| {statistics.median(x[5] for x in rows) / n:.1f} "
                f"| {spread([x[3] for x in rows], '{:.0f} MiB')} |"
            )
    for p in work.iterdir():
        p.unlink()
    work.rmdir()


if __name__ == "__main__":
    main()
