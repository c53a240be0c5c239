"""Strangers at the doors while members and clients trade: nothing they hold outlives its bound,
and every acknowledged tx is in the log.

- The sequencer's data plane (TCP and gRPC), with the deployment's secret: silent connections from
  many addresses, HELLOs announcing 8 MiB, trickling HELLOs, wrong secrets; on gRPC unauthenticated
  calls carrying 6 MiB and connections that never speak HTTP/2. A member keeps its txs
  acknowledged throughout; every stranger's connection is closed by its bound; nothing waits.
- A replica's HTTP port: slowloris heads (a byte at a time) from one address beyond its per-IP
  cap and within it; meanwhile a client from another address pipelines three sendTx and
  half-closes: all three are answered (after their blocks were applied) and are in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import grpc
import grpc.aio
import pyarrow as pa
import pytest
from kit.faults import (
    TALLY,
    Load,
    holder_config,
    sequencer_config,
    setup_ops,
    traders,
    until,
    verify,
)

from raydex.actors.replica import ApiConfig
from raydex.actors.replica.service import ReplicaConfig, ReplicaService
from raydex.actors.sequencer import SequencerService
from raydex.actors.snapshot import SnapshotService
from raydex.actors.transport import BLOCKS_METHOD, new_secret, target_of
from raydex.codecs import TxOutcome, tx_to_json_str, tx_type_of

SECRET = new_secret()
HELLO = 8  # the TCP plane's HELLO kind


async def _open(port: int, peer: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(peer, 0))


async def _closed(reader: asyncio.StreamReader, within: float = 10.0) -> bool:
    """True once the server closed the connection (EOF or a reset; what it said before is read
    and dropped); TimeoutError (the test fails) if it is still open after ``within`` s."""
    with contextlib.suppress(ConnectionError):
        while await asyncio.wait_for(reader.read(65536), within):
            pass
    return True


async def _tcp_strangers(port: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """HELLOs announcing 8 MiB, wrong secrets, a trickling HELLO; then silent connections from
    24 addresses, two each (a peer's share is 4, the total 16)."""
    conns = []
    for i in range(4):
        r, w = await _open(port, f"127.0.6.{i + 1}")
        w.write((8 << 20).to_bytes(4, "little") + bytes([HELLO]) + bytes(65536))
        conns.append((r, w))
    for i in range(4):
        r, w = await _open(port, f"127.0.8.{i + 1}")
        wrong = new_secret().encode()
        w.write((1 + len(wrong)).to_bytes(4, "little") + bytes([HELLO]) + wrong)
        conns.append((r, w))
    r, w = await _open(port, "127.0.7.1")
    w.write((65).to_bytes(4, "little") + bytes([HELLO]) + b"ab")  # and then nothing more
    conns.append((r, w))
    await asyncio.sleep(0.05)  # those are read before the flood fills the caps
    for i in range(24):
        for _ in range(2):
            conns.append(await _open(port, f"127.0.5.{i + 1}"))
    return conns


@pytest.mark.parametrize("plane", ["tcp", "grpc"])
def test_strangers_on_the_data_plane_are_turned_away_while_a_member_trades(
    plane: str, tmp_path: Path
) -> None:
    cfg = sequencer_config(
        tmp_path, data_plane=plane, data_plane_secret=SECRET, unix_sockets=False,
        hello_timeout_s=0.5, max_unauthenticated=16, max_unauthenticated_per_peer=4,
    )  # fmt: skip
    blocks = target_of(plane, "127.0.0.1", cfg.data_port)
    txlog = target_of(plane, "127.0.0.1", cfg.txlog_port)

    async def run() -> None:
        svc = SequencerService(cfg)
        await svc.start()
        await svc.submit(setup_ops(range(1, 7)), operator=True)
        holder = SnapshotService(holder_config(tmp_path, data_plane_secret=SECRET))
        await holder.start(blocks, txlog)
        load = Load(blocks, traders(), secret=SECRET)
        try:
            await load.run_until_acked(3)
            trading = asyncio.create_task(load.run_until_acked(20))
            if plane == "tcp":
                strangers = await _tcp_strangers(cfg.data_port)
                TALLY["faults injected"] += 4  # silent, oversized, trickling, wrong secret
                closed = await asyncio.gather(*(_closed(r) for r, _ in strangers))
                for _, w in strangers:
                    w.close()
                assert all(closed)
                refused = {
                    k: sum(p.refused[k] for p in svc.preauth) for k in svc.preauth[0].refused
                }
                assert refused["hello_too_large"] == 4 and refused["bad_secret"] == 4
                assert refused["per_peer"] + refused["total"] > 0
                assert refused["hello_timeout"] >= 1
            else:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{cfg.data_port}") as ch:
                    calls = [ch.unary_stream(BLOCKS_METHOD)(b"\0" * (6 << 20)) for _ in range(4)]
                    for call in calls:
                        with pytest.raises(grpc.aio.AioRpcError) as err:
                            await anext(aiter(call))
                        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
                silent = [await _open(cfg.data_port, f"127.0.5.{i + 1}") for i in range(8)]
                TALLY["faults injected"] += 2  # unauthenticated calls, silent connections
                assert all(await asyncio.gather(*(_closed(r) for r, _ in silent)))
                for _, w in silent:
                    w.close()
                assert svc.server is not None and svc.server.refused == 4
            await trading  # the member's txs were acknowledged throughout
            await asyncio.sleep(0.1)
            assert sum(p.open for p in svc.preauth) == 0
            TALLY["faults survived"] += 4 if plane == "tcp" else 2
            await verify(tmp_path, cfg, holder, load, svc.state_hash)
        finally:
            await load.close()
            await holder.stop()
            await svc.stop()

    asyncio.run(run())


async def _send_pipelined(port: int, txs: list[Any]) -> list[dict[str, Any]]:
    """Three sendTx on one connection at once, then the client's FIN; every answer read."""
    r, w = await _open(port, "127.0.0.2")
    out = b""
    for tx in txs:
        body = urlencode(
            {"tx_type": str(tx_type_of(type(tx))), "tx_info": tx_to_json_str(tx)}
        ).encode()
        out += (
            f"POST /api/v1/sendTx HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n\r\n"
        ).encode() + body
    w.write(out)
    w.write_eof()
    answers = []
    for _ in txs:
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 10)
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )  # fmt: skip
        answers.append(json.loads(await asyncio.wait_for(r.readexactly(length), 10)))
    assert await asyncio.wait_for(r.read(), 10) == b""  # then the server closes
    w.close()
    return answers


def test_slowloris_heads_are_cut_and_pipelined_txs_after_a_half_close_are_all_answered(
    tmp_path: Path,
) -> None:
    cfg = sequencer_config(tmp_path)
    api = ApiConfig(http_head_timeout_s=0.5, http_max_connections_per_ip=8, rate_limit_exempt=())

    async def run() -> None:
        svc = SequencerService(cfg)
        await svc.start()
        await svc.submit(setup_ops(range(1, 7)), operator=True)
        tables: dict[str, tuple[int, int, dict[str, pa.Table]]] = {}
        holder = SnapshotService(
            holder_config(tmp_path),
            on_tables=lambda s, h, t: tables.__setitem__("latest", (s, h, t)),
        )
        blocks = f"127.0.0.1:{cfg.data_port}"
        await holder.start(blocks, f"127.0.0.1:{cfg.txlog_port}")
        await until(lambda: holder.seq == svc.state_hash()["seq"], "the holder at the setup")
        holder.snapshot()

        async def fetch() -> tuple[int, int, dict[str, pa.Table]]:
            return tables["latest"]

        replica = ReplicaService(
            ReplicaConfig(name="r0", sequencer_target=blocks, api=api),
            fetch,
            lambda s: holder.blocks_since(s, timeout_s=0.01),
        )
        await replica.start()
        port = replica.direct_port
        load = Load(blocks, traders())
        slow: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        stop = asyncio.Event()

        async def trickle() -> None:
            while not stop.is_set():
                for _, w in slow:
                    if not w.is_closing():
                        with contextlib.suppress(ConnectionError, RuntimeError):
                            w.write(b"x")
                await asyncio.sleep(0.05)

        try:
            for _ in range(12):  # one address: 8 held to the head deadline, 4 refused at once
                r, w = await _open(port, "127.0.0.1")
                w.write(b"GET /api/v1/info HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                slow.append((r, w))
            dripping = asyncio.create_task(trickle())
            TALLY["faults injected"] += 2  # slowloris beyond and within the cap, a half-close
            for _ in range(4):
                ts = load.traders[:3]
                txs = [t.next_tx() for t in ts]
                answers = await _send_pipelined(port, txs)
                assert [a["code"] for a in answers] == [200, 200, 200], answers
                for t, tx, a in zip(ts, txs, answers, strict=True):
                    h = bytes.fromhex(a["tx_hash"])
                    rec = replica.state.txs[h]  # applied here before the answer
                    load.sent[h] = tx
                    load.acked.append(TxOutcome(h, rec.code, 0, rec.block_height))
                    t.settle(rec.code)
            assert all(await asyncio.gather(*(_closed(r) for r, _ in slow)))
            stop.set()
            await dripping
            gate = replica.gate
            assert gate.refused["per_ip"] == 4 and gate.refused["head_timeout"] == 8
            assert replica.lane is not None and replica.lane.served == 12
            await asyncio.sleep(0.1)
            assert gate.open == 0
            TALLY["faults survived"] += 2
            await verify(tmp_path, cfg, holder, load, svc.state_hash)
        finally:
            stop.set()
            for _, w in slow:
                w.close()
            await replica.stop()
            await holder.stop()
            await svc.stop()

    asyncio.run(run())
