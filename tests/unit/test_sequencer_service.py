"""The sequencer service answers tx batches over a real gRPC stream only after the block is
logged, publishes every block in order, and a restarted sequencer has the same state."""

from __future__ import annotations

import asyncio
from pathlib import Path

from raydex.actors.local import eth_market
from raydex.actors.sequencer.service import SequencerConfig, SequencerService
from raydex.actors.transport import GrpcBlockSource, GrpcTxChannel
from raydex.codecs import (
    CreateOrder,
    Deposit,
    RegisterApiKey,
    ResultCode,
    decode_block,
    decode_outcomes,
    encode_batch,
    generate_key,
    sign_tx,
)

SEED, PUB = generate_key()
FAR = 4_000_000_000_000
ETH = eth_market()  # ETH-PERP: 2 price / 4 size decimals, mark 3000.00


def config(tmp: Path) -> SequencerConfig:
    return SequencerConfig(wal_dir=str(tmp / "wal"), snapshot_dir=str(tmp / "snap"))


def order(account: int, nonce: int, price: int, is_ask: int) -> CreateOrder:
    tx = CreateOrder(
        account, 0, 0, nonce + 1, 100, price, is_ask, 0, 1, 0, 0, -1, FAR, nonce, bytes(64)
    )
    return sign_tx(tx, SEED)


async def scenario(tmp: Path) -> tuple[dict[str, object], list[int]]:
    svc = SequencerService(config(tmp))
    port = await svc.start()
    setup: list[object] = [ETH]
    for a in (1, 2):
        setup += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
    outs = await svc.submit(setup, operator=True)
    assert {o.code for o in outs} == {ResultCode.OK}

    channel = GrpcTxChannel(f"127.0.0.1:{port}")
    source = GrpcBlockSource(f"127.0.0.1:{port}", name="test")
    seen: list[int] = []

    async def follow() -> None:
        async for seq, frame in source.subscribe(1):
            assert decode_block(frame).seq == seq
            seen.append(seq)
            if len(seen) == 4:
                return

    follower = asyncio.create_task(follow())
    for i in range(3):
        batch = [order(1, i, 300_000 + i, 1), order(2, i, 300_000 + i, 0)]
        result = decode_outcomes(await channel.submit(encode_batch(batch)))
        assert [r.code for r in result] == [ResultCode.OK, ResultCode.OK]
        assert result[0].seq == result[1].seq
    await asyncio.wait_for(follower, 10)
    await channel.close()
    await source.close()
    status = svc.status()
    await svc.stop()
    return status, seen


def test_batches_are_sequenced_published_in_order_and_survive_a_restart(tmp_path: Path) -> None:
    status, seen = asyncio.run(scenario(tmp_path))
    assert seen == [1, 2, 3, 4]
    assert status["seq"] == 4

    async def restart() -> dict[str, object]:
        svc = SequencerService(config(tmp_path))
        await svc.start()
        try:
            return svc.status()
        finally:
            await svc.stop()

    again = asyncio.run(restart())
    assert again["state_hash"] == status["state_hash"]
    assert (again["seq"], again["height"]) == (status["seq"], status["height"])
    assert again["replayed_blocks"] == 4


def test_an_undecodable_batch_is_refused_whole(tmp_path: Path) -> None:
    async def run() -> list[int]:
        svc = SequencerService(config(tmp_path))
        await svc.start()
        try:
            before = svc.status()["state_hash"]
            reply = decode_outcomes(await svc.handle_batch(b"\x01\x00"))
            assert svc.status()["state_hash"] == before
            return [r.code for r in reply]
        finally:
            await svc.stop()

    assert asyncio.run(run()) == [ResultCode.INVALID_TX_INFO]


def test_the_oracle_moves_marks_toward_the_book_mid_in_capped_steps(tmp_path: Path) -> None:
    async def run() -> list[int]:
        cfg = SequencerConfig(
            wal_dir=str(tmp_path / "wal"), snapshot_dir=str(tmp_path / "snap"),
            oracle_interval_ms=0, oracle_max_step_bps=10,
        )  # fmt: skip
        svc = SequencerService(cfg)
        await svc.start()
        try:
            setup: list[object] = [ETH]
            for a in (1, 2):
                setup += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
            await svc.submit(setup, operator=True)
            await svc.submit([order(1, 0, 301_000, 1), order(2, 0, 300_800, 0)])
            marks = []
            for _ in range(3):
                cmds = svc.oracle_commands()
                marks += [c.mark_price for c in cmds]
                await svc.submit(cmds, operator=True)
            assert svc.oracle_commands() == []
            return marks
        finally:
            await svc.stop()

    # mid 300_900, mark 300_000, at most 10 bps (300 ticks) a step
    assert asyncio.run(run()) == [300_300, 300_600, 300_900]
