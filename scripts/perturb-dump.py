#!/usr/bin/env python3
"""Perturb a share of the elements of an f16 safetensors dump (a discordant "board" dump for
`nnpc diff --report` and its benchmark): each chosen element's low mantissa bits are
XOR-ed with a random value of 1 to 2^k - 1, and one in 1000 of them becomes a NaN. Standard
library only; seeded, so the same arguments give the same file.

    scripts/perturb-dump.py hw.safetensors board.safetensors --share 0.01 --seed 1
"""

import argparse
import json
import random
import struct


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dump")
    ap.add_argument("out")
    ap.add_argument("--share", type=float, default=0.01, help="share of elements perturbed")
    ap.add_argument("--bits", type=int, default=6, help="low mantissa bits that may flip")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    with open(a.dump, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    data = bytearray(raw[8 + n :])
    changed = 0
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F16":
            continue
        start, end = t["data_offsets"]
        count = (end - start) // 2
        for i in rng.sample(range(count), int(count * a.share)):
            at = start + 2 * i
            (v,) = struct.unpack_from("<H", data, at)
            if rng.random() < 0.001:
                v = 0x7E00
            else:
                v ^= rng.randrange(1, 1 << a.bits)
            struct.pack_into("<H", data, at, v)
            changed += 1
    with open(a.out, "wb") as f:
        f.write(raw[: 8 + n])
        f.write(data)
    print(f"{changed} elements perturbed")


if __name__ == "__main__":
    main()
