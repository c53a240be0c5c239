"""The snapshot holder replays the sequencer's tx log to the same state, writes snapshots the
sequencer can recover from, and serves recent delta blocks long-poll style."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa

from raydex.actors.local import eth_market
from raydex.actors.sequencer.service import SequencerConfig, SequencerService
from raydex.actors.snapshot import newest_snapshot, read_snapshot_meta
from raydex.actors.snapshot.holder import SnapshotConfig, SnapshotService
from raydex.codecs import (
    CreateOrder,
    Deposit,
    RegisterApiKey,
    ResultCode,
    decode_block,
    generate_key,
    sign_tx,
)

SEED, PUB = generate_key()
FAR = 4_000_000_000_000
ETH = eth_market()  # ETH-PERP: 2 price / 4 size decimals, mark 3000.00


def order(account: int, nonce: int, price: int, is_ask: int) -> CreateOrder:
    tx = CreateOrder(
        account, 0, 0, nonce + 1, 100, price, is_ask, 0, 1, 0, 0, -1, FAR, nonce, bytes(64)
    )
    return sign_tx(tx, SEED)


async def until(cond: object, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if cond():  # type: ignore[operator]
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached in time")


def test_the_holder_converges_to_the_sequencer_state_and_serves_deltas(tmp_path: Path) -> None:
    published: list[tuple[int, dict[str, pa.Table]]] = []

    async def run() -> tuple[dict[str, object], dict[str, object]]:
        seq_svc = SequencerService(
            SequencerConfig(wal_dir=str(tmp_path / "wal"), snapshot_dir=str(tmp_path / "snap"))
        )
        await seq_svc.start()
        holder = SnapshotService(
            SnapshotConfig(dir=str(tmp_path / "snap"), every_blocks=3, every_seconds=60),
            on_tables=lambda seq, _h, tables: published.append((seq, tables)),
        )
        await holder.start(f"127.0.0.1:{seq_svc.port}", f"127.0.0.1:{seq_svc.txlog_port}")
        try:
            setup: list[object] = [ETH]
            for a in (1, 2):
                setup += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
            assert {o.code for o in await seq_svc.submit(setup, operator=True)} == {ResultCode.OK}
            for i in range(6):
                outs = await seq_svc.submit([order(1, i, 300_000, 1), order(2, i, 300_000, 0)])
                assert [o.code for o in outs] == [ResultCode.OK, ResultCode.OK]
            final = seq_svc.status()
            await until(lambda: holder.seq == final["seq"] and holder.delta_seq == final["seq"])

            last, blocks = await holder.blocks_since(2)
            assert last == final["seq"] and [s for s, _ in blocks] == list(range(3, last + 1))
            assert all(decode_block(f).seq == s for s, f in blocks)
            waited_last, none = await holder.blocks_since(last, timeout_s=0.05)
            assert (waited_last, none) == (last, [])
            return final, holder.status()
        finally:
            await holder.stop()
            await seq_svc.stop()

    final, status = asyncio.run(run())
    assert status["state_hash"] == final["state_hash"]
    assert published[0][0] == 0 and published[-1][0] >= 6
    snap = newest_snapshot(tmp_path / "snap")
    assert snap is not None
    assert read_snapshot_meta(snap)["seq"] == published[-1][0]

    async def restart() -> dict[str, object]:
        svc = SequencerService(
            SequencerConfig(wal_dir=str(tmp_path / "wal"), snapshot_dir=str(tmp_path / "snap"))
        )
        await svc.start()
        try:
            return svc.status()
        finally:
            await svc.stop()

    again = asyncio.run(restart())
    assert again["state_hash"] == final["state_hash"]
    assert again["replayed_blocks"] == final["seq"] - published[-1][0]


def test_followers_behind_a_sequencer_restart_catch_up_from_the_rebuilt_blocks(
    tmp_path: Path,
) -> None:
    import socket

    with socket.socket() as s1, socket.socket() as s2:
        s1.bind(("127.0.0.1", 0))
        s2.bind(("127.0.0.1", 0))
        grpc_port, txlog_port = s1.getsockname()[1], s2.getsockname()[1]
    cfg = SequencerConfig(
        wal_dir=str(tmp_path / "wal"), snapshot_dir=str(tmp_path / "snap"),
        grpc_port=grpc_port, txlog_port=txlog_port,
    )  # fmt: skip
    targets = (f"127.0.0.1:{grpc_port}", f"127.0.0.1:{txlog_port}")

    async def run() -> tuple[dict[str, object], dict[str, object]]:
        seq_svc = SequencerService(cfg)
        await seq_svc.start()
        holder = SnapshotService(SnapshotConfig(dir=str(tmp_path / "snap"), every_blocks=1000))
        await holder.start(*targets)
        setup: list[object] = [ETH]
        for a in (1, 2):
            setup += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
        await seq_svc.submit(setup, operator=True)
        await until(lambda: holder.seq == 1)
        await holder.stop()  # the holder falls behind: it keeps only its snapshot at seq 0..1
        for i in range(5):
            await seq_svc.submit([order(1, i, 300_000, 1), order(2, i, 300_000, 0)])
        await seq_svc.stop()  # the sequencer "crashes" with blocks 2..6 only in its WAL

        again = SequencerService(cfg)
        await again.start()
        late = SnapshotService(SnapshotConfig(dir=str(tmp_path / "snap"), every_blocks=1000))
        await late.start(*targets)
        try:
            final = again.status()
            await until(lambda: late.seq == final["seq"] == 6)
            return final, late.status()
        finally:
            await late.stop()
            await again.stop()

    final, status = asyncio.run(run())
    assert status["state_hash"] == final["state_hash"]
