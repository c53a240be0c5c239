"""``raydex bench dataplane``: how much a flood of bad tx batches stalls everyone's book updates.

::

    this process                                         child process
    ┌───────────────────────────────┐   Txs (gRPC)      ┌─────────────────────────────┐
    │ honest trader: 1 order / 5 ms ├──────────────────►│ SequencerService            │
    │ flood: 8 streams x 1 batch of │──────────────────►│  (real WAL, real gRPC)      │
    │   4,096 badly signed orders   │                   │                             │
    │ block follower ◄──────────────┼───Blocks (gRPC)───┤                             │
    └───────────────────────────────┘                   └─────────────────────────────┘

The sequencer runs in its own process, as deployed; the latency of a *book update* is the time
from sending a valid resting order (one every ``INTERVAL_S``) to receiving the block that holds it
(what every replica waits for before it pushes ``order_book``). After a quiet ``BASELINE_S`` the
flood starts: 8 streams, each one batch of 4,096 orders signed with a key the account does not
have (each needs a full signature check). Reported: book-update p50/p99/max in the quiet and the
flood window, how long the flood took to be answered, and its codes. The data-plane secret is
generated here and given to the child. Bounded: tens of seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import multiprocessing as mp
import statistics
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from raydex.actors.local import Trader, eth_market
from raydex.actors.sequencer import SequencerConfig, SequencerService
from raydex.actors.transport import GrpcBlockSource, GrpcTxChannel
from raydex.codecs import decode_outcomes, encode_batch, generate_key, sign_tx

INTERVAL_S = 0.005
BASELINE_S = 2.0
TAIL_S = 0.5
FLOOD_STREAMS = 8
FLOOD_TXS = 4096
TIMEOUT_S = 120.0


def _child(cfg: SequencerConfig, setup: list[Any], ready: Any) -> None:
    async def main() -> None:
        svc = SequencerService(cfg)
        port = await svc.start()
        await svc.submit(setup, operator=True)
        ready.put(port)
        await asyncio.Event().wait()

    asyncio.run(main())


def _pcts(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {"n": 0}
    s = sorted(xs)
    return {
        "n": len(s),
        "p50_ms": round(statistics.median(s) * 1e3, 2),
        "p99_ms": round(s[min(len(s) - 1, int(len(s) * 0.99))] * 1e3, 2),
        "max_ms": round(s[-1] * 1e3, 2),
    }


def _flood_batch(victim: Trader, n: int) -> bytes:
    wrong_seed, _ = generate_key()
    txs = []
    for i in range(n):
        tx = victim.order(290_000 - i % 500, 1, 0)
        txs.append(sign_tx(tx, wrong_seed))
    frame: bytes = encode_batch(txs)
    return frame


async def _measure(target: str, honest: Trader, flood: bytes, auth: dict[str, Any]) -> Any:
    loop = asyncio.get_running_loop()
    arrived: dict[int, float] = {}
    source = GrpcBlockSource(target, name="bench-dataplane", **auth)
    channel = GrpcTxChannel(target, **auth)

    async def follow() -> None:
        async for seq, _ in source.subscribe(1):
            arrived[seq] = loop.time()

    sent: list[tuple[float, asyncio.Task[bytes]]] = []

    async def trade(until: asyncio.Event) -> None:
        i = 0
        while not until.is_set():
            tx = honest.order(280_000 + i % 1000, 1, 0)
            i += 1
            sent.append((loop.time(), loop.create_task(channel.submit(encode_batch([tx])))))
            await asyncio.sleep(INTERVAL_S)

    follower = loop.create_task(follow())
    stop = asyncio.Event()
    trader = loop.create_task(trade(stop))
    await asyncio.sleep(BASELINE_S)
    flood_start = loop.time()
    flooders = [GrpcTxChannel(target, **auth) for _ in range(FLOOD_STREAMS)]
    replies = await asyncio.gather(*(c.submit(flood) for c in flooders))
    flood_done = loop.time()
    await asyncio.sleep(TAIL_S)
    stop.set()
    await trader
    await asyncio.gather(*(t for _, t in sent))
    await asyncio.sleep(0.2)
    follower.cancel()
    for c in (*flooders, channel):
        await c.close()
    await source.close()
    quiet: list[float] = []
    flooded: list[float] = []
    for t0, task in sent:
        seq = decode_outcomes(task.result())[0].seq
        lat = arrived.get(seq, float("inf")) - t0
        (flooded if t0 >= flood_start else quiet).append(lat)
    codes = Counter(o.code for r in replies for o in decode_outcomes(r))
    return {
        "quiet": _pcts(quiet),
        "flood": _pcts(flooded),
        "flood_answered_s": round(flood_done - flood_start, 3),
        "flood_codes": {str(k): v for k, v in codes.items()},
    }


def run(
    json_out: bool = False, flood_txs: int = FLOOD_TXS, slice_ms: float | None = None
) -> dict[str, Any]:
    honest, victim = Trader(1), Trader(2)
    setup = [eth_market(), *honest.setup(10**12), *victim.setup(10**12)]
    flood = _flood_batch(victim, flood_txs)
    secret_kw: dict[str, Any] = {}
    fields = {f.name for f in dataclasses.fields(SequencerConfig)}
    if "data_plane_secret" in fields:
        import secrets

        secret = secrets.token_hex(32)
        secret_kw = {"data_plane_secret": secret}
    if slice_ms is not None:
        secret_kw["verify_slice_ms"] = slice_ms
    with tempfile.TemporaryDirectory(prefix="raydex-bench-dp-") as tmp:
        cfg = SequencerConfig(
            wal_dir=str(Path(tmp) / "wal"), snapshot_dir=str(Path(tmp) / "snap"), **secret_kw
        )
        ctx = mp.get_context("spawn")
        ready = ctx.Queue()
        child = ctx.Process(target=_child, args=(cfg, setup, ready), daemon=True)
        child.start()
        try:
            port = ready.get(timeout=TIMEOUT_S)
            auth = {"secret": secret_kw["data_plane_secret"]} if secret_kw else {}
            secret_kw.pop("verify_slice_ms", None)
            report: dict[str, Any] = asyncio.run(
                asyncio.wait_for(_measure(f"127.0.0.1:{port}", honest, flood, auth), TIMEOUT_S)
            )
        finally:
            child.kill()
            child.join(5)
    report["flood_streams"] = FLOOD_STREAMS
    report["flood_txs_per_batch"] = flood_txs
    report["verify_slice_ms"] = slice_ms
    if json_out:
        print(json.dumps(report))
    else:
        for k, v in report.items():
            print(f"{k}: {v}")
    return report


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="raydex bench dataplane", description=__doc__.split("\n")[0] if __doc__ else None
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--flood-txs", type=int, default=FLOOD_TXS, help="txs per flood batch")
    p.add_argument("--slice-ms", type=float, default=None, help="the sequencer's verify_slice_ms")
    args = p.parse_args(argv)
    run(json_out=args.json, flood_txs=args.flood_txs, slice_ms=args.slice_ms)


if __name__ == "__main__":
    main()
