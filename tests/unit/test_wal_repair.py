"""A block the log lost, taken back from the followers: the restored record round-trips (codec,
log file, replay, the holder's catch-up, the audit), folding its frame gives the state executing
it gave, and the repair's choices: the committer's hash decides, followers on another history are
left out, a block nobody holds (or held in two versions with nothing to choose by) refuses the
start, and a rebuilt block whose hash is not the committed one refuses it too."""

from __future__ import annotations

import hashlib
import zlib
from pathlib import Path

import pytest

from raydex.actors.audit import SignatureAudit
from raydex.actors.local import eth_market
from raydex.actors.runtime import HeldBlocks, RecentBlocks, held_blocks
from raydex.actors.sequencer import BlockProducer, Wal
from raydex.actors.sequencer.repair import StartRefused, check_rebuilt, tail_to_restore
from raydex.actors.snapshot import fold_frame, replay_block
from raydex.codecs import (
    CreateOrder,
    Deposit,
    RegisterApiKey,
    TxExecuted,
    Verifier,
    decode_block,
    decode_wal_record,
    encode_restored_wal_record,
    find_wal_record,
    generate_key,
    peek_wal_record,
    sign_tx,
    wal_record_crc,
)
from raydex.engine import Engine, state_digest

NS = 1_700_000_000_000_000_000
FAR = 2_000_000_000_000
SEED, PUB = generate_key()


def order(account: int, nonce: int, price: int, is_ask: int) -> CreateOrder:
    tx = CreateOrder(
        account, 0, 0, nonce + 1, 100, price, is_ask, 0, 1, 0, 0, -1, FAR, nonce, bytes(80)
    )
    return sign_tx(tx, SEED)


def blocks(n: int) -> tuple[BlockProducer, list[tuple[bytes, bytes]]]:
    """A producer that executed ``n`` blocks (setup, then crossing orders); each block's (frame,
    WAL record)."""
    p = BlockProducer(Engine(), None, Verifier())
    ops: list[object] = [eth_market()]
    for a in (1, 2):
        ops += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
    p.submit(ops, NS, operator=True)
    out = []
    closed = p.close_block()
    assert closed is not None
    out.append((closed.frame, closed.wal_record))
    for i in range(n - 1):
        p.submit([order(1, i, 300_100 - i, 1), order(2, i, 300_100 - i, 0)], NS + (i + 1) * 10**6)
        closed = p.close_block()
        assert closed is not None
        out.append((closed.frame, closed.wal_record))
    return p, out


def digest(p: BlockProducer) -> str:
    return state_digest(p.engine.records()).hex()


def test_a_restored_record_round_trips_and_names_the_record_it_stands_for() -> None:
    _, made = blocks(3)
    frame = made[2][0]
    record = encode_restored_wal_record(3, 123, 0xDEADBEEF, frame)
    info = peek_wal_record(record)
    assert info is not None and (info.seq, info.end) == (3, len(record))
    block = decode_wal_record(record)
    assert (block.seq, block.timestamp_ns, block.txs, block.restored) == (3, 123, [], frame)
    assert wal_record_crc(record) == block.origin_crc == 0xDEADBEEF
    # found after damage like any record (a torn tail is told from damage by what follows it)
    assert find_wal_record(b"junk" + record, 1) == info._replace(offset=4, end=4 + len(record))
    damaged = bytearray(record)
    damaged[-1] ^= 1
    assert peek_wal_record(bytes(damaged)) is None


def test_restoring_a_frame_gives_the_state_executing_it_gave_and_replays_to_the_same_bytes(
    tmp_path: Path,
) -> None:
    full, made = blocks(5)
    # a log that lost its last record: blocks 1..4 written, 5 restored from its frame
    wal = Wal(tmp_path / "wal")
    for seq, (_, record) in enumerate(made[:4], 1):
        wal.append_record(seq, record)
    p, replayed = BlockProducer.recover(tmp_path / "snap", wal, Verifier())
    assert (p.seq, replayed) == (4, 4)
    closed = p.restore(made[4][0], 77)
    assert closed.frame == made[4][0] and closed.seq == 5 and closed.tx_count == 2
    executed = [e for e in decode_block(made[4][0]).events if isinstance(e, TxExecuted)]
    assert [(o.tx_hash, o.code) for o in closed.outcomes] == [(e.tx_hash, 200) for e in executed]
    assert digest(p) == digest(full) and p.height == full.height
    wal.append_record(5, closed.wal_record)
    wal.close()
    # the log replays it: the same state, the same bytes as first published, its identity kept
    again, n = BlockProducer.recover(tmp_path / "snap", Wal(tmp_path / "wal"), Verifier(), 10)
    assert n == 5 and digest(again) == digest(full)
    rebuilt = again.recovered_blocks[-1]
    assert rebuilt.frame == made[4][0] and wal_record_crc(rebuilt.wal_record) == 77
    # the holder's catch-up path (replay_block) folds it the same way
    engine = Engine()
    for _, record in made[:4]:
        engine = replay_block(engine, decode_wal_record(record))
    engine = replay_block(engine, decode_wal_record(closed.wal_record))
    assert state_digest(engine.records()).hex() == digest(full)
    assert state_digest(fold_frame(Engine(), made[0][0]).records()).hex() != digest(full)


def test_the_audit_passes_a_restored_block_as_skipped_not_failed() -> None:
    _, made = blocks(2)
    audit = SignatureAudit()
    audit.reset(1, [])
    audit.note_block(2, decode_block(made[1][0]).events)
    restored = encode_restored_wal_record(2, NS, zlib.crc32(made[1][0]), made[1][0])
    assert audit.audit(2, restored) == []
    assert (audit.seq, audit.skipped_blocks, audit.failed_txs) == (2, 1, 0)


def held(
    name: str, role: str, seq: int, frames: dict[int, bytes], crc: int | None = None
) -> HeldBlocks:
    return held_blocks(name, role, seq, sorted(frames.items()), 1, 0, record_crc=crc)


def sha(frame: bytes) -> bytes:
    return hashlib.sha256(frame).digest()


def test_the_tail_is_chosen_by_the_committers_hash_and_other_histories_are_left_out() -> None:
    _, made = blocks(5)
    f = {s: made[s - 1][0] for s in range(1, 6)}
    other = dict(f)
    other[4] = f[3]  # a follower whose block 4 is not ours
    committer = held("committer", "committer", 5, {4: f[4], 5: f[5]})
    replica = held("r0", "replica", 5, {3: f[3], 4: f[4], 5: f[5]})
    stray = held("r1", "replica", 6, {4: other[4], 5: b"x" * 40, 6: b"y" * 40})
    holder = held("snapshot", "snapshot", 5, {5: f[5]}, crc=0xABC)
    top, tail = tail_to_restore(3, sha(f[3]), [committer, replica, stray, holder])
    assert top == 5 and [(s, fr) for s, fr, _ in tail] == [(4, f[4]), (5, f[5])]
    assert [crc for *_, crc in tail] == [zlib.crc32(f[4]), 0xABC]  # the holder's identity of 5
    # nothing after the log: nothing to restore
    assert tail_to_restore(5, sha(f[5]), [committer, replica]) == (5, [])


def test_a_tail_that_cannot_be_chosen_refuses_the_start() -> None:
    _, made = blocks(5)
    f = {s: made[s - 1][0] for s in range(1, 6)}
    # applied up to 5, but nobody holds block 4 any more
    with pytest.raises(StartRefused, match="none still holds block 4"):
        tail_to_restore(3, None, [held("r0", "replica", 5, {5: f[5]})])
    # two versions of block 4 and no committed hash to choose by
    a = held("r0", "replica", 4, {4: f[4]})
    b = held("r1", "replica", 4, {4: f[5]})
    with pytest.raises(StartRefused, match="different blocks 4"):
        tail_to_restore(3, None, [a, b])
    # the committer committed a block 4 nobody holds
    c = held_blocks("committer", "committer", 4, [], 1, 3, {4: sha(f[2])})
    with pytest.raises(StartRefused, match="hash the committer committed"):
        tail_to_restore(3, None, [a, c])


def test_a_rebuilt_block_the_committer_committed_otherwise_refuses_the_start() -> None:
    _, made = blocks(4)
    rebuilt = {s: sha(made[s - 1][0]) for s in range(1, 5)}
    committer = held_blocks("committer", "committer", 4, [], 1, 4, dict(rebuilt))
    holder = held("snapshot", "snapshot", 4, {3: made[2][0], 4: made[3][0]})
    assert check_rebuilt(rebuilt, [committer, holder]) == 4
    altered = {**rebuilt, 3: sha(b"another block 3")}
    with pytest.raises(StartRefused, match="committer committed"):
        check_rebuilt(altered, [committer, holder])
    # past the committer's memory the holder decides; a replica alone decides nothing
    with pytest.raises(StartRefused, match="snapshot holder applied"):
        check_rebuilt(altered, [holder])
    assert check_rebuilt(altered, [held("r0", "replica", 4, {3: made[2][0]})]) == 0


def test_recent_blocks_keep_the_newest_contiguous_frames() -> None:
    ring = RecentBlocks(keep=3)
    for seq in (1, 2, 3, 4, 4, 2):
        ring.add(seq, bytes([seq]))
    assert [s for s, _ in ring] == [2, 3, 4]
    ring.add(9, b"\x09")  # a gap (a resync): the ring starts again
    assert [s for s, _ in ring] == [9] and len(ring) == 1
