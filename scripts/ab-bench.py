#!/usr/bin/env python3
"""Two `nnpc` binaries side by side on one firmware file: rounds of `nnpc bench --skip-emulator
--reps 3 --json` of each (with `--train`, of `nnpc train FILE --bench 300 --json`), the order
swapped every round, so both see the same machine load.

    scripts/ab-bench.py OLD NEW FILE [--batches 1,64] [--rounds 5] [--train]

Prints, per batch, a Markdown row: NEW's per-item time (median [min, max]), OLD's median, the
median [min, max] of the per-round ratio NEW / OLD, NEW's per-item time back to back (the runs
right after each round's first, where its `nnpc bench` reports them), the medians over NEW's rounds
of its graph and products-alone fractions of the int8 peak (each round's against the peak it
measured), the session's bytes a weight, the products a warm run stacked, and the peak's range.

With `--train`, per batch: NEW's training step, fresh forward and warm forward (medians over
rounds of each round's medians), NEW's step / warm forward (median [min, max] over rounds), and
the per-round ratio of NEW's step to OLD's (median [min, max]).
"""

import argparse
import json
import statistics
import subprocess


def report(binary: str, args: list) -> dict:
    out = subprocess.run([binary, *args, "--json"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def bench(binary: str, program: str, batch: int) -> dict:
    return report(binary, ["bench", program, "--batch", str(batch), "--skip-emulator", "--reps", "3"])


def train_rows(a: argparse.Namespace) -> None:
    print("| batch | step, new | forward, fresh | forward, warm | step / warm | step, new / old |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for b in (int(x) for x in a.batches.split(",")):
        new, ratios = [], []
        for r in range(a.rounds):
            got = {}
            for binary in (a.old, a.new) if r % 2 == 0 else (a.new, a.old):
                got[binary] = report(binary, ["train", a.program, "--bench", "300", "--batch", str(b)])
            new.append(got[a.new])
            ratios.append(got[a.new]["step_seconds"] / got[a.old]["step_seconds"])
        ms = lambda key: statistics.median(d[key] for d in new) * 1e3  # noqa: E731
        over = [d["step_over_forward_warm"] for d in new]
        print(
            f"| {b} | {ms('step_seconds'):.3f} ms | {ms('forward_seconds'):.3f} ms "
            f"| {ms('forward_warm_seconds'):.3f} ms "
            f"| {statistics.median(over):.2f} [{min(over):.2f}, {max(over):.2f}] "
            f"| {statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}] |",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("program")
    ap.add_argument("--batches", default="1,64", help="comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--train", action="store_true", help="training steps (`nnpc train --bench`)")
    a = ap.parse_args()
    if a.train:
        train_rows(a)
        return
    print("| batch | per item, new | old | new / old | back to back, new | graph / peak | products alone / peak | bytes a weight | stacked | int8 peak |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for b in (int(x) for x in a.batches.split(",")):
        times = {a.old: [], a.new: []}
        ratios, again, last = [], [], None
        graph_frac, alone_frac, peaks = [], [], []
        for r in range(a.rounds):
            got = {}
            for binary in (a.old, a.new) if r % 2 == 0 else (a.new, a.old):
                report = bench(binary, a.program, b)
                got[binary] = report["software_graph"]["seconds"] / b
                times[binary].append(got[binary])
                if binary == a.new:
                    last = report
                    graph_frac.append(report["software_graph"]["peak_fraction"])
                    alone_frac.append((report.get("products_alone") or {}).get("peak_fraction", 0))
                    peaks.append(report["peak"]["int8_macs_per_second"])
                    if "back_to_back_seconds" in report["software_graph"]:
                        again.append(report["software_graph"]["back_to_back_seconds"] / b)
            ratios.append(got[a.new] / got[a.old])
        sw = last["software_graph"]
        ms = lambda v: statistics.median(v) * 1e3  # noqa: E731
        new = times[a.new]
        back = f"{ms(again):.3f} ms [{min(again) * 1e3:.3f}, {max(again) * 1e3:.3f}]" if again else ""
        print(
            f"| {b} | {ms(new):.3f} ms [{min(new) * 1e3:.3f}, {max(new) * 1e3:.3f}] | {ms(times[a.old]):.3f} ms "
            f"| {statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}] | {back} "
            f"| {statistics.median(graph_frac) * 100:.1f}% | {statistics.median(alone_frac) * 100:.1f}% "
            f"| {last['bytes_per_weight']['session_alone']:.2f} | {sw.get('stacked_products', 0)} "
            f"| {min(peaks) / 1e9:.0f} to {max(peaks) / 1e9:.0f} G/s |",
            flush=True,
        )


if __name__ == "__main__":
    main()
