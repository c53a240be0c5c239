"""Replicated durability on loopback TCP: a primary answers a tx only once the standby synced its
block; a standby of a newer epoch fences the old primary; a cut link degrades the primary (acks on
its own sync, counted) until the standby caught up from the primary's WAL; a promoted standby
serves the same state, and a fresh standby of the new primary catches up from its log."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from raydex.actors.local import eth_market
from raydex.actors.sequencer.service import SequencerConfig, SequencerService
from raydex.actors.sequencer.standby import StandbyService
from raydex.actors.transport import target_of
from raydex.codecs import (
    REPLICATE_FENCED,
    REPLICATE_OK,
    CreateOrder,
    Deposit,
    RegisterApiKey,
    ResultCode,
    TxOutcome,
    decode_replicate_reply,
    encode_replicate,
    generate_key,
    sign_tx,
)

SEED, PUB = generate_key()
FAR = 4_000_000_000_000


def config(tmp: Path, name: str, **kw: object) -> SequencerConfig:
    base = SequencerConfig(
        wal_dir=str(tmp / name / "wal"), snapshot_dir=str(tmp / name / "snap"), data_plane="tcp"
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def order(account: int, nonce: int, price: int, is_ask: int) -> CreateOrder:
    tx = CreateOrder(
        account, 0, 0, nonce + 1, 100, price, is_ask, 0, 1, 0, 0, -1, FAR, nonce, bytes(80)
    )
    return sign_tx(tx, SEED)


async def funded(svc: SequencerService) -> None:
    setup: list[object] = [eth_market()]
    for a in (1, 2):
        setup += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
    assert {o.code for o in await svc.submit(setup, operator=True)} == {ResultCode.OK}


async def trade(svc: SequencerService, nonce: int) -> list[TxOutcome]:
    outs = await svc.submit([order(1, nonce, 300_000, 1), order(2, nonce, 300_000, 0)])
    assert [o.code for o in outs] == [ResultCode.OK, ResultCode.OK]
    return outs


async def until(check: object, what: str) -> None:
    """Yield to the loop until ``check()`` holds (event-driven work in the background)."""
    for _ in range(200_000):
        if check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"never: {what}")


async def pair(
    tmp: Path, timeout_s: float = 0.0, epoch: int = 1
) -> tuple[SequencerService, StandbyService]:
    standby = StandbyService(config(tmp, "standby"))
    port = await standby.start()
    primary = SequencerService(
        config(
            tmp, "primary", durability="replicated",
            standby_target=target_of("tcp", "127.0.0.1", port), replication_timeout_s=timeout_s,
        ),
        epoch=epoch,
    )  # fmt: skip
    await primary.start()
    return primary, standby


def test_a_block_is_answered_only_once_the_standby_synced_it(tmp_path: Path) -> None:
    async def run() -> None:
        primary, standby = await pair(tmp_path)  # timeout 0: always wait for the standby
        try:
            await funded(primary)
            assert standby.durable == primary.producer.seq == 1  # type: ignore[union-attr]
            await standby._turn.acquire()  # the standby takes no record while held
            submitted = asyncio.ensure_future(trade(primary, 0))
            await until(lambda: primary._local_seq == 2, "block 2 synced on the primary")
            await asyncio.sleep(0.05)  # the standby's turn is held: no ack can come
            assert not submitted.done() and primary.status()["replication"]["lag_blocks"] == 1
            standby._turn.release()
            outs = await submitted
            assert outs[0].seq == 2 and standby.durable == 2
            assert standby.state_hash() == primary.state_hash()
            status = primary.status()["replication"]
            assert (status["acked_seq"], status["lag_blocks"]) == (2, 0)
            assert (status["degraded"], status["in_sync"]) == (False, True)
        finally:
            await primary.stop()
            await standby.stop()

    asyncio.run(run())


def test_a_standby_of_a_newer_epoch_fences_the_old_primary(tmp_path: Path) -> None:
    fatal: list[str] = []

    async def run() -> None:
        standby = StandbyService(config(tmp_path, "standby"), epoch=3)
        port = await standby.start()
        target = target_of("tcp", "127.0.0.1", port)
        primary = SequencerService(
            config(tmp_path, "primary", durability="replicated", standby_target=target),
            on_fatal=fatal.append,
            epoch=2,
        )
        await primary.start()
        try:
            submitted = asyncio.ensure_future(funded(primary))
            await until(lambda: bool(fatal), "the primary fenced")
            assert not submitted.done()  # never acknowledged: the standby holds none of it
            assert primary.status()["replication"]["fenced_by"] == 3
            assert standby.durable == 0 and standby.fenced_requests >= 1
            submitted.cancel()
            # a request of the standby's own epoch is taken
            reply = decode_replicate_reply(await standby.replicate(encode_replicate(3, ())))
            assert reply.kind == REPLICATE_OK
            old = decode_replicate_reply(await standby.replicate(encode_replicate(2, ())))
            assert (old.kind, old.epoch) == (REPLICATE_FENCED, 3)
        finally:
            await primary.stop()
            await standby.stop()

    asyncio.run(run())
    assert "fenced" in fatal[0] and "epoch 3" in fatal[0]


def test_a_cut_link_degrades_the_primary_and_the_standby_catches_up_from_its_wal(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        primary, standby = await pair(tmp_path, timeout_s=0.2)
        port = standby.port
        degraded_at: list[bool] = []

        async def allow() -> bool:
            degraded_at.append(True)
            return True

        primary.on_degrade = allow
        try:
            await funded(primary)
            await trade(primary, 0)
            await until(lambda: primary.standby_in_sync, "the standby in sync")
            await standby.stop()  # the link is cut (the standby's host is gone)
            for nonce in range(1, 6):  # answered on the primary's own sync after the timeout
                await trade(primary, nonce)
            status = primary.status()["replication"]
            assert status["degraded"] and not status["in_sync"] and status["degradations"] == 1
            assert degraded_at == [True] and standby.durable < primary.producer.seq  # type: ignore[union-attr]
            # the standby comes back on the same port with its own log: it gets what it
            # missed from the primary's WAL (the records are no longer kept in memory)
            again = StandbyService(config(tmp_path, "standby", replication_port=port))
            await again.start()
            try:
                await until(lambda: primary.standby_in_sync, "back in sync")
                await trade(primary, 6)
                assert again.durable == primary.producer.seq == 8  # type: ignore[union-attr]
                assert again.state_hash() == primary.state_hash()
                assert not primary.status()["replication"]["degraded"]
            finally:
                await again.stop()
        finally:
            await primary.stop()

    asyncio.run(run())


def test_a_promoted_standby_serves_every_acknowledged_block_and_a_new_standby_catches_up(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        primary, standby = await pair(tmp_path)
        await funded(primary)
        acked = [o for nonce in range(3) for o in await trade(primary, nonce)]
        before = primary.state_hash()
        # the primary's host is lost: it answers nothing more (its loops and ports are gone)
        await primary.stop()
        new = await standby.promote(epoch=2)
        fresh: StandbyService | None = None
        try:
            assert new.state_hash() == before and new.replayed == 0
            assert max(o.seq for o in acked) == new.producer.seq  # type: ignore[union-attr]
            await trade(new, 3)  # the new primary sequences (durability local: no standby yet)
            # the old primary's epoch is refused
            old = decode_replicate_reply(await standby.replicate(encode_replicate(1, ())))
            assert (old.kind, old.epoch) == (REPLICATE_FENCED, 2)
            # a new standby of the new primary catches up from its WAL, from seq 1
            fresh = StandbyService(config(tmp_path, "fresh"))
            port = await fresh.start()
            target = target_of("tcp", "127.0.0.1", port)
            await new.stop()
            cfg = dataclasses.replace(
                new.config, durability="replicated", standby_target=target,
                replication_timeout_s=0.0,
            )  # fmt: skip
            restarted = SequencerService(cfg, epoch=2)
            await restarted.start()
            try:
                await trade(restarted, 4)
                assert fresh.durable == restarted.producer.seq == 6  # type: ignore[union-attr]
                assert fresh.state_hash() == restarted.state_hash()
            finally:
                await restarted.stop()
        finally:
            if fresh is not None:
                await fresh.stop()

    asyncio.run(run())


def test_a_retargeted_source_and_channel_follow_another_publisher_from_where_they_were() -> None:
    from raydex.actors.transport import (
        BlockHub,
        block_source,
        data_plane_server,
        retarget,
        tx_channel,
    )

    async def run() -> tuple[list[int], bytes]:
        hubs = [BlockHub(ring_size=16), BlockHub(ring_size=16)]
        for hub in hubs:  # the same history on both (a standby holds the primary's blocks)
            for seq in (1, 2, 3):
                hub.publish_nowait(seq, b"block %d" % seq)

        async def answer(tag: bytes) -> Any:
            async def handler(frame: bytes) -> bytes:
                return tag + frame

            return handler

        servers = [
            data_plane_server("tcp", hub, await answer(tag), host="127.0.0.1", port=0)
            for hub, tag in zip(hubs, (b"old:", b"new:"), strict=True)
        ]
        ports = [await s.start() for s in servers]
        source = block_source(target_of("tcp", "127.0.0.1", ports[0]), name="t")
        channel = tx_channel(target_of("tcp", "127.0.0.1", ports[0]))
        assert await channel.submit(b"x") == b"old:x"
        seen: list[int] = []

        async def follow() -> None:  # one subscription, across the switch
            async for seq, _ in source.subscribe(1):
                seen.append(seq)
                if seq == 4:
                    return

        following = asyncio.ensure_future(follow())
        await until(lambda: seen == [1, 2, 3], "the old publisher's blocks")
        await servers[0].stop()  # the old publisher is gone
        new = target_of("tcp", "127.0.0.1", ports[1])
        assert await retarget(source, new) and await retarget(channel, new)
        hubs[1].publish_nowait(4, b"block 4")
        await asyncio.wait_for(following, 60)
        reply = await channel.submit(b"y")
        await source.close()
        await channel.close()
        await servers[1].stop()
        return seen, reply

    seen, reply = asyncio.run(run())
    assert seen == [1, 2, 3, 4] and reply == b"new:y"


def test_a_wal_record_carries_its_epoch_and_a_layout_2_record_reads_as_epoch_0() -> None:
    from raydex.codecs import (
        REGISTRY,
        decode_wal_record,
        encode_restored_wal_record,
        encode_tx,
        encode_wal_record,
        peek_wal_record,
        wal_record_crc,
    )

    frames = [encode_tx(Deposit(1, 5)), encode_tx(Deposit(2, 6))]
    old = encode_wal_record(7, 123, frames)  # no arbiter: layout 2, as every log before
    new = encode_wal_record(7, 123, frames, (), 5)
    assert (old[:4], new[:4]) == (b"WXD2", b"WXD3")
    # the construct declarations are the reference of both headers
    h2 = REGISTRY["wal"][1].construct.parse(old)
    h3 = REGISTRY["wal"][3].construct.parse(new)
    assert (h2.seq, h3.seq, h3.epoch) == (7, 7, 5)
    assert len(new) == len(old) + 4
    for record, epoch in ((old, 0), (new, 5)):
        info = peek_wal_record(record)
        assert info is not None and info.epoch == epoch and info.end == len(record)
        assert decode_wal_record(record).epoch == epoch
    # the crc covers the epoch: a changed epoch is damage, not another record
    forged = new[: -len(new) + 36] + (6).to_bytes(4, "little") + new[40:]
    assert peek_wal_record(forged) is None and wal_record_crc(new) != wal_record_crc(old)
    restored = encode_restored_wal_record(8, 124, 0xABCD, b"frame", 5)
    assert wal_record_crc(restored) == 0xABCD and decode_wal_record(restored).epoch == 5


def test_every_block_is_logged_with_the_epoch_that_sequenced_it_on_both_hosts(
    tmp_path: Path,
) -> None:
    from raydex.actors.sequencer import Wal

    async def run() -> dict[str, object]:
        primary, standby = await pair(tmp_path, epoch=3)
        await funded(primary)
        await trade(primary, 0)
        await primary.stop()
        new = await standby.promote(epoch=4)
        try:
            await trade(new, 1)
            return new.state_hash()
        finally:
            await new.stop()

    promoted = asyncio.run(run())
    for host, epochs in (("primary", [3, 3]), ("standby", [3, 3, 4])):
        wal = Wal(tmp_path / host / "wal")
        try:
            assert [b.epoch for b in wal.replay()] == epochs
        finally:
            wal.close()

    async def restart() -> dict[str, object]:  # both layouts' records replay to the same state
        svc = SequencerService(config(tmp_path, "standby"))
        await svc.start()
        try:
            return svc.state_hash()
        finally:
            await svc.stop()

    assert asyncio.run(restart()) == promoted


def test_an_old_primary_rejoining_as_a_standby_is_never_counted_as_holding_the_new_history(
    tmp_path: Path,
) -> None:
    async def run() -> dict[str, object]:
        primary, standby = await pair(tmp_path)
        await funded(primary)
        await trade(primary, 0)
        await standby._turn.acquire()  # block 3 reaches the primary's disk, never the standby
        lost = asyncio.ensure_future(trade(primary, 1))
        await until(lambda: primary._local_seq == 3, "block 3 synced on the primary alone")
        await primary.stop()  # its host is lost: block 3 was never acknowledged
        lost.cancel()
        standby._turn.release()
        new = await standby.promote(epoch=2)
        await trade(new, 1)  # the new history's block 3 (another timestamp: another record)
        port = new.port
        await new.stop()
        # the old primary's host comes back and its log is offered as the new primary's standby
        rejoined = StandbyService(config(tmp_path, "primary"))
        rport = await rejoined.start()
        assert rejoined.durable == 3  # its own block 3, not the new history's
        cfg = dataclasses.replace(
            config(tmp_path, "standby"), durability="replicated", replication_timeout_s=0.2,
            standby_target=target_of("tcp", "127.0.0.1", rport), data_port=port,
        )  # fmt: skip
        again = SequencerService(cfg, epoch=2)
        await again.start()
        try:
            await trade(again, 2)  # answered on its own sync: the standby cannot follow
            await until(lambda: again.replicator.diverged >= 1, "the mismatch seen")  # type: ignore[union-attr]
            status = again.status()["replication"]
            assert status["degraded"] and status["acked_seq"] == 0
            assert "must be rebuilt" in status["error"]
            assert rejoined.durable == 3  # nothing of the new history appended to it
            return status
        finally:
            await again.stop()
            await rejoined.stop()

    asyncio.run(run())


def test_the_standby_keeps_snapshots_of_its_own_and_prunes_its_wal_behind_them(
    tmp_path: Path,
) -> None:
    from raydex.actors.sequencer import Wal
    from raydex.actors.snapshot.store import snapshots

    knobs = {
        "standby_snapshot_blocks": 2, "maintenance_interval_s": 0.02, "wal_keep_blocks": 0,
        "wal_segment_bytes": 256, "wal_preallocate": False,
    }  # fmt: skip

    async def run() -> tuple[dict[str, object], int]:
        standby = StandbyService(config(tmp_path, "standby", **knobs))
        port = await standby.start()
        primary = SequencerService(
            config(tmp_path, "primary", durability="replicated",
                   standby_target=target_of("tcp", "127.0.0.1", port)),
        )  # fmt: skip
        await primary.start()
        try:
            await funded(primary)
            for nonce in range(8):
                await trade(primary, nonce)
            await until(lambda: standby.snapshot_seq >= 8, "a snapshot at seq 8 or later")
            return primary.state_hash(), standby.snapshots_written
        finally:
            await primary.stop()
            await standby.stop()

    expected, written = asyncio.run(run())
    folder = tmp_path / "standby" / "snap"
    assert written >= 1 and 1 <= len(snapshots(folder)) <= 3  # the newest 3 kept
    wal = Wal(tmp_path / "standby" / "wal")
    try:
        assert wal.first_seq > 1 and wal.last_seq == 9  # pruned behind the snapshots
    finally:
        wal.close()

    async def restart() -> tuple[dict[str, object], int]:
        again = StandbyService(config(tmp_path, "standby", standby_snapshot_blocks=0))
        await again.start()
        try:
            return again.state_hash(), again.received
        finally:
            await again.stop()

    assert asyncio.run(restart()) == (expected, 9)
