"""The write-ahead log keeps every appended block and survives a torn tail."""

from __future__ import annotations

from pathlib import Path

import pytest

from raydex.actors.sequencer import Wal, WalError
from raydex.codecs import CancelOrder, CreateOrder, Deposit

SIG = bytes(64)


def order(nonce: int) -> CreateOrder:
    return CreateOrder(7, 0, 1, 100 + nonce, 50, 30_000, 0, 0, 1, 0, 0, -1, 10**13, nonce, SIG)


def blocks(n: int) -> list[tuple[int, int, list[object]]]:
    return [
        (
            seq,
            1_000 * seq,
            [order(seq), CancelOrder(7, 0, 1, 100 + seq, 10**13, seq, SIG), Deposit(3, 5)],
        )
        for seq in range(1, n + 1)
    ]


def test_appended_blocks_are_replayed_in_order_after_reopen(tmp_path: Path) -> None:
    wal = Wal(tmp_path, fsync="block")
    for seq, ts, txs in blocks(5):
        wal.append(seq, ts, txs)
    wal.close()
    again = Wal(tmp_path)
    got = [(b.seq, b.timestamp_ns, b.txs) for b in again.replay()]
    assert got == blocks(5)
    assert [b.seq for b in again.replay(after_seq=3)] == [4, 5]
    assert again.last_seq == 5


def test_a_torn_tail_is_cut_and_appending_continues(tmp_path: Path) -> None:
    wal = Wal(tmp_path)
    for seq, ts, txs in blocks(3):
        wal.append(seq, ts, txs)
    wal.close()
    seg = wal.segments()[-1]
    data = seg.read_bytes()
    seg.write_bytes(data[:-7])  # the last record lost its last bytes mid-write
    again = Wal(tmp_path)
    assert [b.seq for b in again.replay()] == [1, 2]
    again.append(3, 3_000, [Deposit(1, 1)])
    again.close()
    assert [b.seq for b in Wal(tmp_path).replay()] == [1, 2, 3]


def test_corruption_before_the_tail_segment_is_refused(tmp_path: Path) -> None:
    wal = Wal(tmp_path, segment_bytes=1)  # every block starts a new segment
    for seq, ts, txs in blocks(3):
        wal.append(seq, ts, txs)
    wal.close()
    first = wal.segments()[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF
    first.write_bytes(bytes(data))
    with pytest.raises(WalError, match="corrupt"):
        Wal(tmp_path)


def test_appending_an_old_seq_is_an_error(tmp_path: Path) -> None:
    wal = Wal(tmp_path, fsync="none")
    wal.append(1, 0, [])
    with pytest.raises(WalError):
        wal.append(1, 0, [])


def test_prune_drops_only_segments_covered_by_the_snapshot(tmp_path: Path) -> None:
    wal = Wal(tmp_path, segment_bytes=1)
    for seq, ts, txs in blocks(4):
        wal.append(seq, ts, txs)
    removed = wal.prune(snapshot_seq=2)
    assert [p.name for p in removed] == [
        "wal-00000000000000000001.log",
        "wal-00000000000000000002.log",
    ]
    wal.close()
    assert [b.seq for b in Wal(tmp_path).replay()] == [3, 4]
