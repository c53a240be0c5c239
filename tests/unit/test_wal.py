"""The write-ahead log keeps every appended block, cuts a torn tail with a warning, refuses to
start on damage followed by valid records, and serves, skips and prunes by seq; in both layouts
of a segment: an ordinary file that grows with its records, and a preallocated one (zeros,
written over)."""

from __future__ import annotations

import errno
import logging
import os
import struct
from pathlib import Path

import pytest
from kit.faults import records_end

from raydex.actors.sequencer import Wal, WalError
from raydex.actors.sequencer.wal import SPARE_NAME
from raydex.codecs import (
    CancelOrder,
    CreateOrder,
    Deposit,
    TxExecuted,
    decode_wal_record,
    encode_tx,
    encode_wal_record,
    peek_wal_record,
)
from raydex.observability.bench.wal import thread_write_bytes

SIG = bytes(80)


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


#: a small preallocated segment (the sequencer's are 64 MiB)
PREALLOCATED = {"preallocate": True, "segment_bytes": 64 << 10}


@pytest.fixture(params=["appended", "preallocated"])
def layout(request: pytest.FixtureRequest) -> dict[str, int]:
    return dict(PREALLOCATED) if request.param == "preallocated" else {}


def written(tmp: Path, n: int, **kw: int) -> Wal:
    wal = Wal(tmp, fsync="block", **kw)  # type: ignore[arg-type]
    for seq, ts, txs in blocks(n):
        wal.append(seq, ts, txs)
    wal.close()
    return wal


def record_offsets(data: bytes) -> list[int]:
    """Start of each record in an undamaged segment."""
    out, off = [], 0
    while (info := peek_wal_record(data, off)) is not None:
        out.append(off)
        off = info.end
    return out


def test_appended_blocks_are_replayed_in_order_after_reopen(tmp_path: Path) -> None:
    written(tmp_path, 5)
    again = Wal(tmp_path)
    got = [(b.seq, b.timestamp_ns, b.txs) for b in again.replay()]
    assert got == blocks(5)
    assert [b.seq for b in again.replay(after_seq=3)] == [4, 5]
    assert again.last_seq == 5 and again.first_seq == 1 and again.torn_bytes == 0


def test_a_torn_tail_is_cut_with_a_warning_and_appending_continues(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, layout: dict[str, int]
) -> None:
    wal = written(tmp_path, 3, **layout)
    seg = wal.segments()[-1]
    data = seg.read_bytes()
    end = records_end(data)
    last = record_offsets(data)[2]
    torn = data[last : (last + end) // 2]  # the last record: half of it reached the disk
    seg.write_bytes(data[:last] + torn + bytes(len(data) - last - len(torn) if layout else 0))
    with caplog.at_level(logging.WARNING):
        again = Wal(tmp_path)
    # the torn bytes: their non-zero extent (zeros after the records are room), zeroed where
    # zeros follow them (a preallocated segment keeps its size), else truncated
    cut = len(torn.rstrip(b"\0"))
    assert [b.seq for b in again.replay()] == [1, 2] and again.torn_bytes == cut
    assert f"torn tail of {cut} bytes" in caplog.text and "ends at seq 2" in caplog.text
    assert str(seg) in caplog.text
    got = seg.read_bytes()
    assert got[:last] == data[:last] and not any(got[last:])
    again.append(3, 3_000, [Deposit(1, 1)])
    again.close()
    assert [b.seq for b in Wal(tmp_path).replay()] == [1, 2, 3]
    assert seg.stat().st_size == len(data) if layout else seg.stat().st_size < len(data)


def test_a_flipped_byte_in_the_last_record_is_a_torn_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, layout: dict[str, int]
) -> None:
    wal = written(tmp_path, 4, **layout)
    seg = wal.segments()[-1]
    data = bytearray(seg.read_bytes())
    data[records_end(bytes(data)) - 3] ^= 0x01
    seg.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        again = Wal(tmp_path)
    assert again.last_seq == 3 and "torn tail" in caplog.text


def test_zeros_after_the_last_record_are_room_and_the_next_record_goes_over_them(
    tmp_path: Path,
) -> None:
    wal = written(tmp_path, 2)
    seg = wal.segments()[-1]
    size = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(bytes(4096))  # the file grew, its data never came (or it was preallocated)
    again = Wal(tmp_path)
    assert again.last_seq == 2 and again.torn_bytes == 0 and seg.stat().st_size == size + 4096
    again.append(3, 3_000, [Deposit(1, 1)])
    again.close()
    assert [b.seq for b in Wal(tmp_path).replay()] == [1, 2, 3]
    assert records_end(seg.read_bytes()) > size and seg.stat().st_size == size + 4096


def test_damage_followed_by_valid_records_refuses_to_start_naming_file_offset_and_seqs(
    tmp_path: Path, layout: dict[str, int]
) -> None:
    wal = written(tmp_path, 5, **layout)
    seg = wal.segments()[-1]
    data = bytearray(seg.read_bytes())
    at = record_offsets(bytes(data))[2]  # block 3
    data[at + 50] ^= 0xFF
    seg.write_bytes(bytes(data))
    with pytest.raises(WalError) as err:
        Wal(tmp_path)
    msg = str(err.value)
    assert str(seg) in msg and f"at byte {at}" in msg
    assert "after seq 2" in msg and "valid record seq 4" in msg and "refusing to start" in msg
    assert seg.read_bytes() == bytes(data)  # nothing was truncated


def test_corruption_before_the_tail_segment_is_refused(
    tmp_path: Path, layout: dict[str, int]
) -> None:
    size = 1 if not layout else 400  # every block starts a new segment
    wal = written(tmp_path, 3, **{**layout, "segment_bytes": size})
    first = wal.segments()[0]
    data = bytearray(first.read_bytes())
    assert len(data) == size if layout else len(data) > size
    data[records_end(bytes(data)) - 1] ^= 0xFF
    first.write_bytes(bytes(data))
    with pytest.raises(WalError, match=r"damaged WAL at byte 0 .* newer segment"):
        Wal(tmp_path)


def test_a_log_of_the_first_layout_is_refused_by_name_not_cut(tmp_path: Path) -> None:
    wal = written(tmp_path, 2)
    seg = wal.segments()[-1]
    data = bytearray(seg.read_bytes())
    data[0:4] = struct.pack("<I", 0x52445857)
    seg.write_bytes(bytes(data))
    with pytest.raises(WalError, match="first WAL layout"):
        Wal(tmp_path)


def test_appending_an_old_seq_is_an_error(tmp_path: Path) -> None:
    wal = Wal(tmp_path, fsync="none")
    wal.append(1, 0, [])
    with pytest.raises(WalError):
        wal.append(1, 0, [])


def test_short_writes_are_completed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: dict[str, int]
) -> None:
    real = os.pwrite

    def dribble(fd: int, data: bytes | memoryview, offset: int) -> int:
        return real(fd, bytes(data[:7]), offset)  # the kernel may write less than asked

    monkeypatch.setattr(os, "pwrite", dribble)
    written(tmp_path, 3, **layout)
    monkeypatch.undo()
    assert [b.seq for b in Wal(tmp_path).replay()] == [1, 2, 3]


def test_a_failed_write_poisons_the_log_and_reopening_cuts_the_partial_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal = written(tmp_path, 2)
    wal = Wal(tmp_path)
    real = os.pwrite
    calls = {"n": 0}

    def disk_full(fd: int, data: bytes | memoryview, offset: int) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return real(fd, bytes(data[:10]), offset)  # part of the record reached the file
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", disk_full)
    with pytest.raises(OSError, match="No space"):
        wal.append(3, 3_000, [Deposit(1, 1)])
    monkeypatch.undo()
    with pytest.raises(WalError, match="failed earlier"):
        wal.append(4, 4_000, [Deposit(1, 1)])  # never after a partial record
    with pytest.raises(WalError, match="failed earlier"):
        wal.sync()
    wal.close()
    again = Wal(tmp_path)
    assert again.last_seq == 2 and again.torn_bytes == 10


def test_replay_after_a_seq_does_not_decode_what_comes_before(tmp_path: Path) -> None:
    wal = Wal(tmp_path)
    wal.append_record(1, encode_wal_record(1, 1, [b"\xff\x00"]))  # valid crc, undecodable tx
    wal.append(2, 2, [Deposit(1, 1)])
    wal.close()
    again = Wal(tmp_path)  # opening checks crcs only
    assert [b.seq for b in again.replay(after_seq=1)] == [2]
    with pytest.raises(WalError, match="does not decode"):
        list(again.replay())


def test_refusals_are_logged_at_their_positions(tmp_path: Path) -> None:
    refused = [(1, TxExecuted(b"h" * 40, 14, 7, 0, 3, 21120))]
    frames = [encode_tx(Deposit(1, 1)), encode_tx(Deposit(2, 2))]
    record = encode_wal_record(1, 5, frames, refused)
    block = decode_wal_record(record)
    assert block.txs == [Deposit(1, 1), Deposit(2, 2)] and list(block.refused) == refused
    wal = Wal(tmp_path)
    wal.append_record(1, record)
    wal.close()
    assert next(Wal(tmp_path).replay()).refused == refused


def test_read_records_serves_ranges_bounded_by_count_bytes_and_the_durable_seq(
    tmp_path: Path, layout: dict[str, int]
) -> None:
    wal = written(tmp_path, 9, **{**layout, "segment_bytes": 1200})  # a few records per segment
    assert len(wal.segments()) > 2
    again = Wal(tmp_path)
    got = again.read_records(2, 9, 100, 1 << 20)
    assert [s for s, _ in got] == list(range(2, 10))
    assert all(decode_wal_record(r).seq == s for s, r in got)
    assert [s for s, _ in again.read_records(2, 6, 100, 1 << 20)] == [2, 3, 4, 5, 6]
    assert [s for s, _ in again.read_records(3, 9, 2, 1 << 20)] == [3, 4]
    assert [s for s, _ in again.read_records(3, 9, 100, 1)] == [3]  # at least one
    assert again.read_records(10, 12, 100, 1 << 20) == []


def test_prune_drops_only_segments_covered_by_the_snapshot(tmp_path: Path) -> None:
    wal = Wal(tmp_path, segment_bytes=1)
    for seq, ts, txs in blocks(4):
        wal.append(seq, ts, txs)
    removed = wal.prune(2)
    assert [p.name for p in removed] == [
        "wal-00000000000000000001.log",
        "wal-00000000000000000002.log",
    ]
    assert wal.first_seq == 3 and [s for s, _ in wal.read_records(1, 4, 10, 1 << 20)] == [3, 4]
    assert wal.prune(10) == [tmp_path / "wal-00000000000000000003.log"]  # never the newest
    wal.close()
    assert [b.seq for b in Wal(tmp_path).replay()] == [4]


def test_an_empty_segment_named_for_a_seq_that_never_came_is_replaced(tmp_path: Path) -> None:
    written(tmp_path, 2, segment_bytes=1)
    (tmp_path / "wal-00000000000000000003.log").touch()  # created, then the process died
    wal = Wal(tmp_path)
    wal.append(7, 7, [Deposit(1, 1)])  # recovery jumped ahead (a newer snapshot)
    wal.close()
    assert [b.seq for b in Wal(tmp_path).replay()] == [1, 2, 7]


# --- preallocated segments ------------------------------------------------------------------------


def settle(wal: Wal) -> None:
    """Wait for the background preparer, if it runs (so the next rollover finds its spare)."""
    if wal._preparer is not None:
        wal._preparer.join()


def test_preallocated_segments_are_prepared_ahead_and_renamed_into_place(tmp_path: Path) -> None:
    size = 8 << 10
    wal = Wal(tmp_path, preallocate=True, segment_bytes=size)
    assert (tmp_path / SPARE_NAME).read_bytes() == bytes(size)  # the first one, at open
    for seq, ts, txs in blocks(3):
        wal.append(seq, ts, txs)
    (seg,) = wal.segments()  # the spare renamed into place; never taken for a segment itself
    assert seg.stat().st_size == size and wal.preallocated_segments == 1
    assert not (tmp_path / SPARE_NAME).exists()  # the next one waits until this is half full
    for seq, ts, txs in blocks(14)[3:]:
        wal.append(seq, ts, txs)
    settle(wal)
    assert (tmp_path / SPARE_NAME).read_bytes() == bytes(size)
    assert wal.segments() == [seg] and wal.plain_segments == 0
    wal.close()
    again = Wal(tmp_path, preallocate=True, segment_bytes=size)
    assert again.last_seq == 14 and again.torn_bytes == 0
    again.append(15, 15_000, [Deposit(1, 1)])  # over the zeros of the same segment
    again.close()
    assert wal.segments() == [seg] and seg.stat().st_size == size
    assert [b.seq for b in Wal(tmp_path).replay()] == list(range(1, 16))


def test_a_record_that_does_not_fit_starts_the_next_preallocated_segment(tmp_path: Path) -> None:
    wal = Wal(tmp_path, preallocate=True, segment_bytes=1500)
    for seq, ts, txs in blocks(12):
        wal.append(seq, ts, txs)
        settle(wal)
    wal.close()
    segs = wal.segments()
    assert len(segs) > 2 and all(p.stat().st_size == 1500 for p in segs)
    assert wal.preallocated_segments == len(segs) and wal.plain_segments == 0
    assert [b.seq for b in Wal(tmp_path).replay()] == list(range(1, 13))


def test_a_stale_spare_is_remade_and_an_ordinary_newest_segment_gives_way_to_a_prepared_one(
    tmp_path: Path,
) -> None:
    written(tmp_path, 2)  # an ordinary file (a log from before preallocation)
    (tmp_path / SPARE_NAME).write_bytes(b"half made")  # the process died while preparing it
    wal = Wal(tmp_path, **PREALLOCATED)  # type: ignore[arg-type]
    assert (tmp_path / SPARE_NAME).read_bytes() == bytes(PREALLOCATED["segment_bytes"])
    wal.append(3, 3_000, [Deposit(1, 1)])
    wal.close()
    old, new = wal.segments()
    assert old.name == "wal-00000000000000000001.log"
    assert new.name == "wal-00000000000000000003.log"
    assert new.stat().st_size == PREALLOCATED["segment_bytes"] and wal.preallocated_segments == 1
    assert [b.seq for b in Wal(tmp_path).replay()] == [1, 2, 3]


def test_a_sync_over_preallocated_zeros_writes_what_an_append_writes_not_a_whole_folio(
    tmp_path: Path,
) -> None:
    """The page cache keeps the folio size a write made and a sync writes whole dirty folios:
    zeros written in large pieces made every block's sync write ~1 MiB. Counted by the kernel
    for this thread (``/proc/thread-self/io``; the preparer's zeros are another thread's)."""
    per_sync = {}
    for layout, kw in (("appended", {}), ("preallocated", {"preallocate": True})):
        wal = Wal(tmp_path / layout, segment_bytes=1 << 20, **kw)  # type: ignore[arg-type]
        before = thread_write_bytes()
        for seq, ts, txs in blocks(50):
            wal.append(seq, ts, txs)
        per_sync[layout] = (thread_write_bytes() - before) / 50
        assert wal.preallocated_segments == (layout == "preallocated")
        wal.close()
    assert per_sync["preallocated"] <= 2 * max(per_sync["appended"], 4096), per_sync


def test_a_prepared_segment_removed_behind_the_logs_back_gives_an_ordinary_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    wal = Wal(tmp_path, **PREALLOCATED)  # type: ignore[arg-type]
    (tmp_path / SPARE_NAME).unlink()  # e.g. an operator cleaning the folder
    with caplog.at_level(logging.WARNING):
        wal.append(1, 1_000, [Deposit(1, 1)])
    assert "the prepared segment" in caplog.text and "is gone" in caplog.text
    assert (wal.preallocated_segments, wal.plain_segments) == (0, 1)
    wal.close()
    assert [b.seq for b in Wal(tmp_path).replay()] == [1]
