"""Commitments chain every block and root the account state, whatever history led to it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from kit.faults import flip_in_last_record, newest_segment

from raydex.actors.committer import Committer, CommitterFollower, GapError
from raydex.actors.local import eth_market
from raydex.actors.sequencer import BlockProducer, SequencerConfig, SequencerService
from raydex.actors.snapshot import ONE_ATTEMPT, SnapshotConfig, SnapshotService, block_digest
from raydex.actors.transport import GrpcBlockSource
from raydex.codecs import (
    CreateOrder,
    Deposit,
    RegisterApiKey,
    Verifier,
    generate_key,
    sign_tx,
    tables_to_records,
)
from raydex.engine import Engine

SEED, PUB = generate_key()
FAR = 4_000_000_000_000
ETH = eth_market()  # ETH-PERP: 2 price / 4 size decimals, mark 3000.00


def order(account: int, nonce: int, price: int, is_ask: int) -> CreateOrder:
    tx = CreateOrder(account, 0, 0, nonce + 1, 100, price, is_ask, 0, 1, 0, 0, -1, FAR, nonce, SIG)
    return sign_tx(tx, SEED)


SIG = bytes(80)


def frames(tmp: Path, blocks: int) -> tuple[list[bytes], list[list[object]]]:
    p = BlockProducer(Engine(), None, Verifier())
    setup: list[object] = [ETH]
    for a in range(1, 5):
        setup += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
    p.submit(setup, 1, operator=True)
    out = [p.close_block()]
    records = [list(p.engine.records())]
    for i in range(blocks):
        txs = [
            sign_tx(
                CreateOrder(
                    a, 0, 0, i + 1, 10 + a, 300_000, a % 2, 0, 1, 0, 0, -1, FAR, i, bytes(80)
                ),
                SEED,
            )
            for a in range(1, 5)
        ]
        p.submit(txs, 10 + i)
        out.append(p.close_block())
        records.append(list(p.engine.records()))
    return [b.frame for b in out if b is not None], records


def test_two_committers_fed_the_same_blocks_agree_and_duplicates_are_ignored(
    tmp_path: Path,
) -> None:
    fs, _ = frames(tmp_path, 5)
    a, b = Committer(), Committer()
    for f in fs:
        assert a.apply(f) is not None
        b.apply(f)
        assert b.apply(f) is None
    assert a.chain == b.chain and a.seq == len(fs)
    assert len({c.chain for c in a.commitments.values()}) == len(fs)


def test_a_gap_is_refused() -> None:
    fs, _ = frames(Path("."), 3)
    c = Committer()
    c.apply(fs[0])
    with pytest.raises(GapError):
        c.apply(fs[2])


def test_a_committer_booted_from_a_snapshot_has_the_same_account_root(tmp_path: Path) -> None:
    fs, records = frames(tmp_path, 6)
    full = Committer()
    for f in fs:
        full.apply(f)
    late = Committer.from_records(records[3], seq=4)
    for f in fs[4:]:
        late.apply(f)
    assert late.seq == full.seq
    assert late.tree.root == full.tree.root


def test_a_committer_that_saw_a_block_the_sequencer_lost_rebuilds_instead_of_chaining_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Real sequencer, holder and committer follower on loopback; the sequencer's newest WAL
    record (published, committed) is damaged and cut as a torn tail, and the restarted sequencer
    publishes a different block 6. The committer notices on its resume and rebuilds."""
    import socket

    with socket.socket() as s1, socket.socket() as s2:
        s1.bind(("127.0.0.1", 0))
        s2.bind(("127.0.0.1", 0))
        ports = s1.getsockname()[1], s2.getsockname()[1]
    cfg = SequencerConfig(
        wal_dir=str(tmp_path / "wal"), snapshot_dir=str(tmp_path / "snap"),
        data_port=ports[0], txlog_port=ports[1],
    )  # fmt: skip
    targets = f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"
    latest: dict[str, object] = {}

    async def run() -> tuple[Committer, Committer, CommitterFollower]:
        seq_svc = SequencerService(cfg)
        await seq_svc.start()
        holder = SnapshotService(
            SnapshotConfig(dir=str(tmp_path / "snap"), every_blocks=4, every_seconds=600),
            on_tables=lambda s, _h, t: latest.update(seq=s, tables=t),
        )
        await holder.start(*targets)

        async def fetch() -> tuple[int, list[object], bytes | None]:
            seq = int(latest["seq"])  # type: ignore[call-overload]
            ring = {s: f for s, f in holder.ring}
            anchor = block_digest(ring[seq]) if seq in ring else None
            return seq, list(tables_to_records(latest["tables"])), anchor  # type: ignore[arg-type]

        source = GrpcBlockSource(targets[0], name="committer", backoff=ONE_ATTEMPT)
        follower = CommitterFollower(source, fetch, retry_s=0.05)
        follower.start()
        setup: list[object] = [ETH]
        for a in range(1, 5):
            setup += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
        await seq_svc.submit(setup, operator=True)
        for i in range(5):
            await seq_svc.submit([order(1, i, 300_000, 1), order(2, i, 299_000, 0)])
        await until(lambda: follower.committer.seq == 6 and holder.seq == 6)
        await seq_svc.stop()
        flip_in_last_record(newest_segment(tmp_path / "wal"), 2, 0x10)
        again = SequencerService(cfg)
        await again.start()
        try:
            await again.submit([order(1, 5, 300_100, 1)])
            await again.submit([order(3, 0, 299_100, 0)])
            await until(lambda: follower.committer.seq == 7 and follower.divergences >= 1)
            await until(lambda: holder.seq == 7)
            # the account root depends on the state only: the sequencer's state now, for reference
            assert again.producer is not None
            reference = Committer.from_records(again.producer.engine.records(), 7)
            return follower.committer, reference, follower
        finally:
            await follower.stop()
            await source.close()
            await holder.stop()
            await again.stop()

    with caplog.at_level(logging.ERROR):
        got, reference, follower = asyncio.run(run())
    assert got.tree.root == reference.tree.root and got.seq == reference.seq
    assert follower.resyncs >= 1 and "committer: the sequencer's block 6 differs" in caplog.text


async def until(cond: object, seconds: float = 20.0) -> None:
    for _ in range(int(seconds / 0.02)):
        if cond():  # type: ignore[operator]
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached in time")


def test_the_committer_resumes_at_its_seq_and_checks_the_block_there(tmp_path: Path) -> None:
    fs, _ = frames(tmp_path, 4)
    c = Committer()
    for f in fs[:3]:
        c.apply(f)
    assert c.last_hash == block_digest(fs[2])
    assert Committer.from_records([], 3, anchor=b"x" * 32).last_hash == b"x" * 32
    assert Committer().last_hash is None


def test_a_committers_first_snapshot_is_where_its_audit_starts_a_later_jump_goes_unaudited(
    tmp_path: Path,
) -> None:
    """A committer that starts (a redeploy, a restart) from the holder's snapshot at seq 4 audits
    from there: the blocks before were its predecessor's to audit, not passed by it (``raydex
    status`` would otherwise stay degraded after every redeploy). A later rebuild that jumps from
    its audited seq 4 to a snapshot at 8 passes 4 blocks unaudited, counted."""
    from raydex.actors.audit import SignatureAudit
    from raydex.actors.transport import TcpBlockSource, TcpTxChannel

    _, records = frames(tmp_path, 8)
    snapshots = iter([(4, records[3], None), (8, records[7], None)])

    async def fetch() -> tuple[int, list[object], bytes | None]:
        return next(snapshots)

    async def scenario() -> list[tuple[int, int, int]]:
        nowhere = "127.0.0.1:9"  # never connected: the follower's loops are not started
        audit = SignatureAudit()
        follower = CommitterFollower(TcpBlockSource(nowhere), fetch, txlog=TcpTxChannel(nowhere),
                                     audit=audit)  # fmt: skip
        seen = []
        for _ in range(2):
            await follower.rebuild()
            seen.append((audit.from_seq, audit.seq, audit.skipped_blocks))
        return seen

    assert asyncio.run(scenario()) == [(4, 4, 0), (4, 8, 4)]
