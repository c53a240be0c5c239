"""``raydex bench wal``: the sequencer's per-block WAL write and sync, appended vs preallocated.

Timed per block, as the journal thread runs them: ``Wal.write_record`` then ``Wal.sync``
(``actors/sequencer/wal.py``: one record, one ``fdatasync``), ``--blocks`` blocks of
``--block-txs`` signed-order-sized txs into a fresh log in ``--dir`` (point it at the WAL's disk).
Both segment layouts, alternated for ``--rounds`` rounds so background load hits both alike:
``appended`` (a growing file: each sync also commits the file's size, a journal commit on ext4)
and ``preallocated`` (segments born full of zeros, written over: a sync flushes data pages only).

Reported per layout (the median round): the sync's wall p50/p99/p99.9, its CPU (``thread_time``)
p50, the write's p50, the bytes the thread sent to the disk per block (``/proc/thread-self/io``),
and the ratios preallocated / appended. A block's sync is on the acknowledgment path of every tx
in it and, with ``block_close: durable``, sets how often blocks close; its CPU is in the
sequencer's row of the loadtest's ledger.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from raydex.actors.sequencer import Wal
from raydex.cluster.control.head import state_dir
from raydex.codecs import CreateOrder, encode_tx, encode_wal_record
from raydex.observability.hist import Histogram

LAYOUTS = ("appended", "preallocated")


def _frames(n: int) -> list[bytes]:
    """``n`` tx frames the size of a signed limit order."""
    sig = bytes(80)
    return [
        encode_tx(CreateOrder(7, 0, 1, 100 + i, 50, 30_000 + i, 0, 0, 1, 0, 0, -1, 10**13, i, sig))
        for i in range(n)
    ]


def thread_write_bytes() -> int:
    """What this thread sent to the storage layer so far (``/proc/thread-self/io``
    ``write_bytes``, counted when pages are dirtied; 0 where the kernel does not say)."""
    try:
        with open("/proc/thread-self/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_layout(folder: Path, layout: str, blocks: int, frames: list[bytes]) -> dict[str, Any]:
    """One fresh log in ``folder``: ``blocks`` records written and synced one by one."""
    shutil.rmtree(folder, ignore_errors=True)
    wal = Wal(folder, fsync="block", preallocate=layout == "preallocated")
    sync_wall, sync_cpu, write_wall = Histogram(), Histogram(), Histogram()
    disk0 = thread_write_bytes()  # this thread's: not the preparer's zeros
    try:
        for seq in range(1, blocks + 1):
            record = encode_wal_record(seq, seq * 1_000_000, frames)
            t0 = time.perf_counter_ns()
            wal.write_record(seq, record)
            t1 = time.perf_counter_ns()
            c1 = time.thread_time_ns()
            wal.sync()
            sync_cpu.record(time.thread_time_ns() - c1)
            sync_wall.record(time.perf_counter_ns() - t1)
            write_wall.record(t1 - t0)
        disk = thread_write_bytes() - disk0
        segments = (wal.preallocated_segments, wal.plain_segments)
    finally:
        wal.close()
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "sync_us": sync_wall.summary_us(),
        "sync_cpu_us_p50": round(sync_cpu.percentile(0.5) / 1000, 1),
        "write_us_p50": round(write_wall.percentile(0.5) / 1000, 1),
        "disk_bytes_per_block": round(disk / blocks),
        "segments_preallocated": segments[0],
        "segments_appended": segments[1],
    }


def run(
    blocks: int = 2000,
    block_txs: int = 10,
    rounds: int = 5,
    folder: str | None = None,
    json_out: bool = False,
) -> dict[str, Any]:
    base = Path(folder) if folder else state_dir()
    base.mkdir(parents=True, exist_ok=True)
    frames = _frames(block_txs)
    record_bytes = len(encode_wal_record(1, 1, frames))
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in LAYOUTS}
    scratch = Path(tempfile.mkdtemp(prefix="bench-wal-", dir=base))
    try:
        for _ in range(max(1, rounds)):
            for layout in LAYOUTS:
                runs[layout].append(run_layout(scratch / layout, layout, blocks, frames))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    median: dict[str, dict[str, Any]] = {}
    for layout, rs in runs.items():
        rs.sort(key=lambda r: r["sync_us"]["p50"])
        median[layout] = rs[len(rs) // 2]
    a, p = median["appended"], median["preallocated"]
    result: dict[str, Any] = {
        "layouts": median,
        "rounds_sync_p50_us": {k: [r["sync_us"]["p50"] for r in rs] for k, rs in runs.items()},
        "preallocated_over_appended": {
            "sync_p50": round(p["sync_us"]["p50"] / a["sync_us"]["p50"], 2),
            "sync_p99": round(p["sync_us"]["p99"] / a["sync_us"]["p99"], 2),
            "sync_cpu_p50": round(p["sync_cpu_us_p50"] / max(a["sync_cpu_us_p50"], 0.1), 2),
        },
        "blocks": blocks,
        "block_txs": block_txs,
        "record_bytes": record_bytes,
        "rounds": rounds,
        "dir": str(base),
    }
    if json_out:
        print(json.dumps(result))
    else:
        _print(result)
    return result


def _print(r: dict[str, Any]) -> None:
    print(f"{r['blocks']:,} blocks of {r['block_txs']} txs ({r['record_bytes']} bytes each), "
          f"{r['rounds']} rounds alternated, in {r['dir']}")  # fmt: skip
    for layout, m in r["layouts"].items():
        s = m["sync_us"]
        print(f"  {layout:<13} sync p50 {s['p50']:>7.1f} us  p99 {s['p99']:>7.1f} us  "
              f"p99.9 {s['p999']:>7.1f} us  CPU p50 {m['sync_cpu_us_p50']:>6.1f} us  "
              f"write p50 {m['write_us_p50']:>5.1f} us  disk {m['disk_bytes_per_block']:,} "
              "bytes/block")  # fmt: skip
    ratio = r["preallocated_over_appended"]
    print(f"preallocated / appended: sync p50 {ratio['sync_p50']}x, p99 {ratio['sync_p99']}x, "
          f"CPU p50 {ratio['sync_cpu_p50']}x")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="raydex bench wal",
        description="The WAL's per-block write and sync, appended vs preallocated segments.",
    )
    p.add_argument("--blocks", type=int, default=2000, help="records per run (2000)")
    p.add_argument("--block-txs", type=int, default=10, help="tx frames per record (10)")
    p.add_argument("--rounds", type=int, default=5, help="rounds, layouts alternated (5)")
    p.add_argument("--dir", default=None, help="where the logs go (default: the state dir)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    a = p.parse_args(argv)
    if a.blocks < 1 or a.block_txs < 0 or a.rounds < 1:
        p.error("--blocks and --rounds must be >= 1, --block-txs >= 0")
    run(a.blocks, a.block_txs, a.rounds, a.dir, a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
