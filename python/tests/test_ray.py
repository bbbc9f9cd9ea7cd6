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


def _pairs(tmp: Path, lstm_data, per: int, shards: int, hw: np.ndarray = None) -> Path:
    """`shards` shards of `per` input sets (items 0.. of the module's data) in tmp/x and the
    hardware's in tmp/h (the emulator's, or `hw`)."""
    d = lstm_data["dir"]
    x = np.load(d / "x" / "shard-000.npy")
    h = read_safetensors(d / "hw.safetensors")["h"] if hw is None else hw
    (tmp / "x").mkdir()
    (tmp / "h").mkdir()
    for k in range(shards):
        np.save(tmp / "x" / f"s{k}.npy", x[k * per : (k + 1) * per])
        np.save(tmp / "h" / f"s{k}.npy", h[k * per : (k + 1) * per])
    return tmp


def test_a_batch_that_kills_its_worker_is_named(cluster, lstm_data, tmp_path: Path) -> None:
    """A batch whose run kills its worker process (os._exit, as a crash does) every time
    is retried `max_retries` times, then the call raises BatchFailed naming its items and
    shard, in bounded time (without the bound it is retried for ever)."""
    import os
    import threading

    _pairs(tmp_path, lstm_data, 200, 3)

    class Dying(nnpc_ray.Runner):  # defined here: shipped to the workers by value
        def process(self, batch):
            if 250 in batch["item"]:
                os._exit(3)
            return super().process(batch)

    ds = nnpc_ray.read_shards(tmp_path / "x", tmp_path / "h", input_name="x", output_name="h")
    raised = []

    def campaign() -> None:
        try:
            nnpc_ray.diff_dataset(
                "samples/lstm.nnp", ds, batch_size=200, concurrency=1, max_retries=1, runner=Dying
            )
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            raised.append(e)

    t = threading.Thread(target=campaign, daemon=True)
    t.start()
    t.join(timeout=240)
    assert not t.is_alive(), "diff_dataset neither returned nor raised in 240 s"
    (e,) = raised
    assert isinstance(e, nnpc_ray.BatchFailed) and isinstance(e, nnpc.ExecutionError), repr(e)
    assert e.items == "200-399" and e.deaths == 2
    assert e.shards == [str(tmp_path / "x" / "s1.npy")]
    assert "items 200-399" in str(e) and "s1.npy" in str(e) and "max_retries=1" in str(e)


def test_hardware_shards_pair_by_name(cluster, lstm_data, tmp_path: Path) -> None:
    """Hardware shards whose names are not the input shards' are an error naming them
    (never paired by position), as is a missing one."""
    _pairs(tmp_path, lstm_data, 100, 2)
    (tmp_path / "h" / "s1.npy").rename(tmp_path / "h" / "t1.npy")
    with pytest.raises(nnpc.DataError, match=r"without a hardware shard: s1.*without an input shard: t1"):
        nnpc_ray.read_shards(tmp_path / "x", tmp_path / "h", input_name="x", output_name="h")
    (tmp_path / "h" / "t1.npy").unlink()
    with pytest.raises(nnpc.DataError, match=r"input shard\(s\) without a hardware shard: s1"):
        nnpc_ray.read_shards(tmp_path / "x", tmp_path / "h", input_name="x", output_name="h")


def test_wrongly_shaped_hardware_shard_is_named(cluster, lstm_data, tmp_path: Path) -> None:
    """A hardware shard of the right size in another shape ([100, 256, 4] for [4, 256]):
    diff_dataset names the shard, the tensor and the shape expected, before any worker
    runs (not a reshape into the declaration); one of another size likewise."""
    _pairs(tmp_path, lstm_data, 100, 2)
    h1 = np.load(tmp_path / "h" / "s1.npy")
    np.save(tmp_path / "h" / "s1.npy", np.ascontiguousarray(h1.reshape(100, 256, 4)))
    ds = nnpc_ray.read_shards(tmp_path / "x", tmp_path / "h", input_name="x", output_name="h")
    with pytest.raises(nnpc.DataError) as e:
        nnpc_ray.diff_dataset("samples/lstm.nnp", ds, batch_size=100, concurrency=1)
    msg = str(e.value)
    assert f"shard `{tmp_path / 'h' / 's1.npy'}`" in msg and "tensor `h`" in msg, msg
    assert "[100, 256, 4]" in msg and "[100, 4, 256]" in msg, msg
    np.save(tmp_path / "h" / "s1.npy", h1[:, :, :128].copy())
    ds = nnpc_ray.read_shards(tmp_path / "x", tmp_path / "h", input_name="x", output_name="h")
    with pytest.raises(nnpc.DataError, match=r"s1.npy`: tensor `h` has shape \[100, 4, 128\]"):
        nnpc_ray.diff_dataset("samples/lstm.nnp", ds, batch_size=100, concurrency=1)


def test_truncated_and_short_shards_are_named(cluster, lstm_data, tmp_path: Path) -> None:
    """A truncated input shard (its file shorter than its header says) is an error naming
    it and the bytes it needs; an input shard of fewer input sets than its hardware shard
    names both tensors and their counts."""
    _pairs(tmp_path, lstm_data, 100, 2)
    x1 = tmp_path / "x" / "s1.npy"
    full = x1.read_bytes()
    x1.write_bytes(full[: len(full) - 1000])
    with pytest.raises(nnpc.DataError) as e:
        nnpc_ray.read_shards(tmp_path / "x", tmp_path / "h", input_name="x", output_name="h")
    msg = str(e.value)
    assert f"shard `{x1}` is truncated" in msg and f"needs {len(full)} bytes" in msg, msg
    np.save(x1, np.load(tmp_path / "x" / "s0.npy")[:99])
    with pytest.raises(nnpc.DataError) as e:
        nnpc_ray.read_shards(tmp_path / "x", tmp_path / "h", input_name="x", output_name="h")
    msg = str(e.value)
    assert f"`{x1}` tensor `x`: 99" in msg and "tensor `h`: 100" in msg, msg


def test_npy_shards_need_their_names(cluster, lstm_data, tmp_path: Path) -> None:
    """.npy shards hold one unnamed array: without input_name (or output_name) read_shards
    says which flag, on the driver."""
    _pairs(tmp_path, lstm_data, 100, 1)
    with pytest.raises(nnpc.DataError, match="pass input_name="):
        nnpc_ray.read_shards(tmp_path / "x", tmp_path / "h", output_name="h")
    with pytest.raises(nnpc.DataError, match="pass output_name="):
        nnpc_ray.read_shards(tmp_path / "x", tmp_path / "h", input_name="x")


def test_discordant_campaign_is_the_cli_report(cluster, lstm_data, tmp_path: Path) -> None:
    """Hardware made with the weights of another seed (every element may differ: the
    misconfigured board): 1,500 input sets in 3 shards, batches of 400, merged into
    `nnpc diff`'s report, field for field; the QSNR, whose f64 sums the campaign adds per
    batch, equal to within the rounding of those sums (docs/python.md): each sum of n
    non-negative terms, in any order, is within (n - 1) u (u = 2^-53) of the exact one, so
    two orders' QSNRs are within 10 / ln 10 * 4 n u dB. The worst are the largest distances,
    in order."""
    n = 1500
    g = nnpc.compile("samples/lstm.nnp")
    x = np.load(lstm_data["dir"] / "x" / "shard-000.npy")[:n]
    hw = g.run(g.random_weights(1), {"x": x})["h"]
    _pairs(tmp_path, lstm_data, 500, 3, hw=hw)
    (tmp_path / "dump").mkdir()
    np.save(tmp_path / "dump" / "h.npy", hw)
    p = cli("diff", "samples/lstm.nnp", "--hardware", str(tmp_path / "dump"), "--json")
    assert p.returncode == 1, p.stderr
    ref = json.loads(p.stdout)
    ds = nnpc_ray.read_shards(tmp_path / "x", tmp_path / "h", input_name="x", output_name="h")
    report = nnpc_ray.diff_dataset("samples/lstm.nnp", ds, batch_size=400, concurrency=2)
    got = report.to_dict()
    assert got["bit_exact"] < got["elements"] // 2, "most elements differ"
    q, q_ref = got["outputs"][0].pop("qsnr_db"), ref["outputs"][0].pop("qsnr_db")
    assert abs(q - q_ref) <= 10 / math.log(10) * 4 * got["elements"] * 2.0**-53, (q, q_ref)
    assert got == ref
    worst = report.worst
    assert worst is not None and len(worst) == 10
    assert worst[0]["ulps"] == got["max_ulps"]
    assert all(a["ulps"] >= b["ulps"] for a, b in zip(worst, worst[1:]))
