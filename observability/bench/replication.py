"""``raydex bench replication``: what replicated durability costs per block, against local.

A real ``SequencerService`` (TCP data plane, preallocated WAL in ``--dir``) answers ``--blocks``
one-tx blocks in a closed loop (each order submitted when the previous one was answered, so every
block is one sync, or one sync and one standby ack); ``durability: local`` and ``replicated``
alternate for ``--rounds`` rounds so background load hits both alike. The standby
(``StandbyService``) runs in a child process on loopback with its own WAL in the same folder's
disk: on one machine its sync competes with the primary's for the same disk, which a standby on
another host does not (there the round trip is added instead of the disk's contention).

Reported per mode (the median round): the submit-to-answer time p50/p99 per block, and
replicated / local. The primary releases a block at max(local sync, round trip + remote sync).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from raydex.actors.local import eth_market
from raydex.actors.sequencer import SequencerConfig, SequencerService, StandbyService
from raydex.actors.transport import target_of
from raydex.cluster.control.head import state_dir
from raydex.codecs import CreateOrder, Deposit, RegisterApiKey, generate_key, sign_tx
from raydex.observability.hist import Histogram

MODES = ("local", "replicated")


def _standby(folder: str, ready: Any, stop: Any) -> None:
    """The child process: a standby on loopback until ``stop`` is set."""

    async def run() -> None:
        cfg = SequencerConfig(
            wal_dir=f"{folder}/standby-wal", snapshot_dir=f"{folder}/standby-snap", data_plane="tcp"
        )
        svc = StandbyService(cfg)
        ready.put(await svc.start())
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await svc.stop()

    asyncio.run(run())


async def _round(folder: Path, mode: str, blocks: int, target: str) -> Histogram:
    cfg = SequencerConfig(
        wal_dir=str(folder / f"{mode}-wal"),
        snapshot_dir=str(folder / f"{mode}-snap"),
        data_plane="tcp",
        durability="replicated" if mode == "replicated" else "local",
        standby_target=target if mode == "replicated" else "",
        replication_timeout_s=0.0,
    )
    svc = SequencerService(cfg)
    await svc.start()
    seed, pub = generate_key()
    await svc.submit([eth_market(), RegisterApiKey(1, 0, pub), Deposit(1, 10**12)], operator=True)
    hist = Histogram()
    try:
        for i in range(blocks):
            tx = CreateOrder(1, 0, 0, i + 1, 100, 290_000 + i % 100, 0, 0, 1, 0, 0, -1,
                             4 * 10**12, i, bytes(80))  # fmt: skip
            order = sign_tx(tx, seed)
            t0 = time.perf_counter_ns()
            await svc.submit([order])
            hist.record(time.perf_counter_ns() - t0)
    finally:
        await svc.stop()
    return hist


def run(blocks: int, rounds: int, folder: str | None, json_out: bool) -> dict[str, Any]:
    base = Path(folder) if folder else state_dir()
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-replication-", dir=base))
    ctx = multiprocessing.get_context("spawn")
    results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    try:
        for r in range(rounds):
            for mode in MODES if r % 2 == 0 else MODES[::-1]:
                ready, stop = ctx.Queue(), ctx.Event()
                child = ctx.Process(target=_standby, args=(str(work / f"r{r}"), ready, stop))
                child.start()
                try:
                    port = ready.get(timeout=60)
                    target = target_of("tcp", "127.0.0.1", port)
                    hist = asyncio.run(_round(work / f"r{r}", mode, blocks, target))
                finally:
                    stop.set()
                    child.join(30)
                s = hist.summary_us()
                results[mode].append({"p50_us": s["p50"], "p99_us": s["p99"]})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report: dict[str, Any] = {"blocks": blocks, "rounds": rounds}
    for mode in MODES:
        rows = sorted(results[mode], key=lambda x: x["p50_us"])
        report[mode] = rows[len(rows) // 2]
    report["replicated_over_local_p50"] = round(
        report["replicated"]["p50_us"] / max(report["local"]["p50_us"], 1e-9), 2
    )
    if json_out:
        print(json.dumps(report))
    else:
        for mode in MODES:
            row = report[mode]
            print(f"{mode:>10}: block p50 {row['p50_us']:8.0f} µs   p99 {row['p99_us']:8.0f} µs")
        print(f"replicated / local (p50): {report['replicated_over_local_p50']}")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="raydex bench replication",
        description="Per-block answer time with durability local vs replicated (a standby).",
    )
    p.add_argument("--blocks", type=int, default=500, help="one-tx blocks per round (500)")
    p.add_argument("--rounds", type=int, default=3, help="rounds, modes alternated (3)")
    p.add_argument("--dir", default=None, help="where the logs go (default: the state dir)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    a = p.parse_args(argv)
    if a.blocks < 1 or a.rounds < 1:
        p.error("--blocks and --rounds must be >= 1")
    run(a.blocks, a.rounds, a.dir, a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
