#!/usr/bin/env python3
"""Two `nnpc` binaries side by side on one firmware file and batch, by their best times:
ROUNDS rounds of `nnpc bench FILE --batch B --skip-emulator --reps 3 --json` of each, the order
swapped every round; per round the better of the warm and back-to-back time per item. Prints
each binary's minimum, lower quartile and median, its products-alone times, and the ratios
NEW / OLD of the three (the minimum is the least disturbed on a shared machine).

    scripts/ab-best.py OLD NEW FILE BATCH ROUNDS
"""

import json, subprocess, sys, statistics
if len(sys.argv) != 6:
    sys.exit(__doc__)
old, new, prog, batch, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
res = {old: [], new: []}
alone = {old: [], new: []}
for r in range(rounds):
    for b in ([old, new] if r % 2 == 0 else [new, old]):
        d = json.loads(subprocess.run([b, "bench", prog, "--batch", str(batch), "--skip-emulator", "--reps", "3", "--json"], capture_output=True, text=True, check=True).stdout)
        sw = d["software_graph"]
        res[b].append(min(sw["seconds"], sw.get("back_to_back_seconds", 9e9)) / batch)
        pa = d.get("products_alone") or {}
        if "seconds" in pa: alone[b].append(pa["seconds"])
for b in (old, new):
    v = sorted(res[b]); a = sorted(alone[b])
    print(b, "min %.4f ms  q25 %.4f  median %.4f   products alone min %.2f ms median %.2f" % (v[0]*1e3, v[len(v)//4]*1e3, statistics.median(v)*1e3, a[0]*1e3 if a else 0, statistics.median(a)*1e3 if a else 0))
print("ratio of mins %.3f, of q25 %.3f, of medians %.3f" % (min(res[new])/min(res[old]), sorted(res[new])[rounds//4]/sorted(res[old])[rounds//4], statistics.median(res[new])/statistics.median(res[old])))
