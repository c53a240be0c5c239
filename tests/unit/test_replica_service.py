"""The whole data path in one process, over real sockets: sequencer (gRPC), snapshot holder,
replicas (HTTP + WebSocket). An order sent to one replica shows up on another replica's
order_book with continuous nonces, and a replica started late serves the same state."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pyarrow as pa

from raydex.actors.local import Trader, eth_market
from raydex.actors.replica.service import ReplicaConfig, ReplicaService
from raydex.actors.sequencer.service import SequencerConfig, SequencerService
from raydex.actors.snapshot.holder import SnapshotConfig, SnapshotService
from raydex.codecs import ResultCode, tx_to_json_str

WAIT = 15.0


@dataclass
class Stack:
    seq: SequencerService
    holder: SnapshotService
    tables: dict[str, Any]

    async def replica(self, name: str, port: int = 0) -> ReplicaService:
        async def fetch_snapshot() -> tuple[int, int, dict[str, pa.Table]]:
            return self.tables["latest"]

        svc = ReplicaService(
            ReplicaConfig(name=name, sequencer_target=f"127.0.0.1:{self.seq.port}", http_port=port),
            fetch_snapshot,
            lambda s: self.holder.blocks_since(s, timeout_s=0.01),
        )
        await svc.start()
        return svc


@asynccontextmanager
async def stack(tmp: Path, traders: list[Trader]) -> AsyncIterator[Stack]:
    seq = SequencerService(SequencerConfig(wal_dir=str(tmp / "wal"), snapshot_dir=str(tmp / "s")))
    await seq.start()
    tables: dict[str, Any] = {}
    holder = SnapshotService(
        SnapshotConfig(dir=str(tmp / "s"), every_blocks=2, every_seconds=60),
        on_tables=lambda s, h, t: tables.__setitem__("latest", (s, h, t)),
    )
    await holder.start(f"127.0.0.1:{seq.port}", f"127.0.0.1:{seq.txlog_port}")
    ops: list[Any] = [eth_market()]
    for t in traders:
        ops += t.setup(10**12)
    assert {o.code for o in await seq.submit(ops, operator=True)} == {ResultCode.OK}
    try:
        yield Stack(seq, holder, tables)
    finally:
        await holder.stop()
        await seq.stop()


async def until(cond: Any, what: str) -> None:
    for _ in range(int(WAIT / 0.02)):
        if cond():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def send(session: aiohttp.ClientSession, port: int, tx: Any) -> dict[str, Any]:
    form = {"tx_type": "14", "tx_info": tx_to_json_str(tx)}
    async with session.post(f"http://127.0.0.1:{port}/api/v1/sendTx", data=form) as r:
        body: dict[str, Any] = await r.json()
        return body


def test_an_order_sent_to_one_replica_reaches_another_replicas_websocket(tmp_path: Path) -> None:
    alice, bob = Trader(1), Trader(2)

    async def run() -> None:
        async with stack(tmp_path, [alice, bob]) as s:
            r1 = await s.replica("r1")
            r2 = await s.replica("r2")
            try:
                async with aiohttp.ClientSession() as http:
                    ws = await http.ws_connect(f"http://127.0.0.1:{r2.port}/stream")
                    assert (await ws.receive_json(timeout=WAIT))["type"] == "connected"
                    await ws.send_json({"type": "subscribe", "channel": "order_book/0"})
                    first = await ws.receive_json(timeout=WAIT)
                    assert first["type"] == "subscribed/order_book"
                    nonce = first["order_book"]["nonce"]

                    body = await send(http, r1.port, alice.order(300_000, 100, is_ask=1))
                    assert body["code"] == 200, body
                    body = await send(http, r1.port, bob.order(299_000, 50, is_ask=0))
                    assert body["code"] == 200, body

                    seen: list[dict[str, Any]] = []
                    while len(seen) < 2:
                        msg = await ws.receive_json(timeout=WAIT)
                        if msg["type"] == "update/order_book":
                            seen.append(msg["order_book"])
                    assert seen[0]["begin_nonce"] == nonce
                    assert seen[1]["begin_nonce"] == seen[0]["nonce"]
                    assert seen[0]["asks"] == [{"price": "3000.00", "size": "0.0100"}]
                    assert seen[1]["bids"] == [{"price": "2990.00", "size": "0.0050"}]
                    await ws.close()

                    # a bad nonce is answered by the replica's dry-run and never sequenced
                    before = s.seq.status()["seq"]
                    alice.nonce = 0  # already used: signed correctly, but stale
                    stale = alice.order(300_500, 1, is_ask=1)
                    body = await send(http, r1.port, stale)
                    assert body["code"] == ResultCode.INVALID_NONCE
                    assert s.seq.status()["seq"] == before
            finally:
                await r1.stop()
                await r2.stop()

    asyncio.run(asyncio.wait_for(run(), 90))


def test_a_late_replica_boots_from_the_snapshot_and_serves_the_same_state(tmp_path: Path) -> None:
    alice, bob = Trader(1), Trader(2)

    async def run() -> None:
        async with stack(tmp_path, [alice, bob]) as s:
            early = await s.replica("early")
            try:
                for i in range(6):
                    outs = await early.execute_txs(
                        [alice.order(300_000 + i, 10, 1), bob.order(299_000 - i, 10, 0)]
                    )
                    assert [o.code for o in outs] == [200, 200]
                await until(lambda: s.holder.snapshot_seq >= 6, "a snapshot past the orders")
                late = await s.replica("late")
                try:
                    assert late.boots == 1 and s.tables["latest"][0] > 1
                    last = s.seq.status()["seq"]
                    await until(lambda: late.state.seq == early.state.seq == last, "same seq")
                    assert late.state.state_hash() == early.state.state_hash()
                    late.state.validate()
                    async with aiohttp.ClientSession() as http:
                        url = "/api/v1/orderBookOrders?market_id=0&limit=50"
                        books = []
                        for port in (early.port, late.port):
                            async with http.get(f"http://127.0.0.1:{port}{url}") as r:
                                books.append(await r.json())
                    assert books[0] == books[1]
                    assert books[0]["total_asks"] == 6
                finally:
                    await late.stop()
            finally:
                await early.stop()

    asyncio.run(asyncio.wait_for(run(), 90))


def test_two_replicas_share_one_port() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    alice = Trader(1)

    async def run() -> None:
        async with stack(Path(json.dumps(port).join(["/tmp/raydex-share-", ""])), [alice]) as s:
            a = await s.replica("a", port)
            b = await s.replica("b", port)
            try:
                assert a.port == b.port == port
                async with aiohttp.ClientSession() as http:
                    for _ in range(4):
                        async with http.get(f"http://127.0.0.1:{port}/api/v1/currentHeight") as r:
                            assert (await r.json())["code"] == 200
            finally:
                await a.stop()
                await b.stop()

    asyncio.run(asyncio.wait_for(run(), 60))
