"""Campaigns on a local Ray cluster: the merged report of a dataset in blocks is `nnpc diff`'s
report of the same data."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict

import numpy as np
import pytest

import nnpc
from conftest import cli, read_safetensors, same_bits

ray = pytest.importorskip("ray")
nnpc_ray = pytest.importorskip("nnpc.ray")

ITEMS = 10_000
SHARDS = 5


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def lstm_data(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """10,000 input sets of samples/lstm.nnp (seed 0), the emulator's outputs for them with
    faults put in at items of different blocks, both in 5 shards of .npy files, and the
    dumps whole."""
    d = tmp_path_factory.mktemp("lstm")
    whole = d / "hw.safetensors"
    cli("emulate", "samples/lstm.nnp", "--batch", str(ITEMS), "--seed", "0", "-o", str(whole))
    h = read_safetensors(whole)["h"].copy()
    assert h.dtype == np.float16 and h.shape == (ITEMS, 4, 256)
    bits = h.view(np.uint16)
    for item, t, lane in ((17, 0, 5), (2500, 3, 255), (2501, 1, 0), (7777, 2, 100), (9999, 3, 3)):
        bits[item, t, lane] ^= 1 << (item % 7)  # 1 to 64 ULPs
    h[5000, 0, 0] = np.nan
    h[6000, 1, 9] = -h[6000, 1, 9] if h[6000, 1, 9] != 0 else np.float16(1)
    (d / "dump").mkdir()
    np.save(d / "dump" / "h.npy", h)
    x = nnpc.compile("samples/lstm.nnp").random_inputs(ITEMS, seed=0)["x"]
    (d / "x").mkdir()
    (d / "h").mkdir()
    per = ITEMS // SHARDS
    for k in range(SHARDS):
        np.save(d / "x" / f"shard-{k:03}.npy", x[k * per : (k + 1) * per])
        np.save(d / "h" / f"shard-{k:03}.npy", h[k * per : (k + 1) * per])
    return {"dir": d}


def test_diff_dataset_is_the_cli_report(cluster, lstm_data) -> None:
    """10,000 input sets in 5 shards, diffed in blocks of 1,000 on 2 workers: every count,
    the histogram, maxima and the first mismatches (by item id) are `nnpc diff`'s."""
    d = lstm_data["dir"]
    p = cli("diff", "samples/lstm.nnp", "--hardware", str(d / "dump"), "--seed", "0", "--json")
    assert p.returncode == 1, p.stderr
    ref = json.loads(p.stdout)
    ds = nnpc_ray.read_shards(d / "x", d / "h", input_name="x", output_name="h")
    report = nnpc_ray.diff_dataset("samples/lstm.nnp", ds, batch_size=1000, concurrency=2)
    got = report.to_dict()
    assert report.items == ITEMS and not report.concordant
    assert got["elements"] == ITEMS * 4 * 256 and got["bit_exact"] == ITEMS * 4 * 256 - 7
    assert got == ref
    # The NaN makes the QSNR undefined (in both).
    assert got["outputs"][0]["qsnr_db"] == "nan"
    worst = report.worst
    assert worst is not None and worst[0]["index"][0] == 5000 and worst[0]["ulps"] is None


def test_concordant_parquet_campaign_is_the_cli_report(cluster, lstm_data, tmp_path: Path) -> None:
    """The first 2,000 input sets from Parquet (list columns written by pyarrow), unfaulted:
    the whole report is `nnpc diff`'s, QSNR (+inf) included; Runner in run mode gives the
    software graph's bits (`nnpc run`'s, equal to the emulator's here)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = lstm_data["dir"]
    n = 2000
    hw = read_safetensors(d / "hw.safetensors")["h"][:n]
    (tmp_path / "dump").mkdir()
    np.save(tmp_path / "dump" / "h.npy", hw)
    ref = json.loads(
        cli("diff", "samples/lstm.nnp", "--hardware", str(tmp_path / "dump"), "--json").stdout
    )
    x = np.load(d / "x" / "shard-000.npy")
    flat = lambda a: pa.FixedSizeListArray.from_arrays(pa.array(a.reshape(-1)), a[0].size)
    (tmp_path / "pq").mkdir()
    for k, rows in enumerate((slice(0, 1200), slice(1200, n))):
        table = pa.table(
            {"item": np.arange(n)[rows], "x": flat(x[rows]), "hw.h": flat(hw[rows])}
        )
        pq.write_table(table, tmp_path / "pq" / f"part-{k}.parquet")
    ds = nnpc_ray.read_parquet(tmp_path / "pq")
    report = nnpc_ray.diff_dataset("samples/lstm.nnp", ds, batch_size=700, concurrency=1)
    assert report.concordant and report.to_dict() == ref
    assert math.isinf(report.qsnr_db["h"]) and report.items == n
    # Runner in run mode over the same rows.
    out = ds.map_batches(
        nnpc_ray.Runner,
        fn_constructor_kwargs=dict(program=nnpc_ray.Program("samples/lstm.nnp"), mode="run"),
        batch_size=500,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=1),
    )
    rows = out.take_batch(n, batch_format="numpy")
    order = np.argsort(rows["item"])
    got = np.stack(list(rows["out.h"]))[order]
    assert same_bits(got, hw)
