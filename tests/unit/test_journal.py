"""The journal writes blocks in order on its own thread, syncs many with one fsync, tells the
loop what is durable, and reports a failed write instead of acknowledging past it."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import pytest

from raydex.actors.sequencer import Wal
from raydex.actors.sequencer.journal import Journal
from raydex.codecs import Deposit, encode_tx, encode_wal_record


def record(seq: int) -> bytes:
    return encode_wal_record(seq, seq * 1000, [encode_tx(Deposit(seq, 1))])


def test_blocks_become_durable_in_order_with_fewer_syncs_than_blocks(tmp_path: Path) -> None:
    durable: list[int] = []

    async def run() -> Journal:
        loop = asyncio.get_running_loop()
        done = asyncio.Event()

        def on_durable(seq: int, _ns: int, _at: int) -> None:
            durable.append(seq)
            if seq == 200:
                done.set()

        journal = Journal(Wal(tmp_path), loop, on_durable, lambda e: None)
        journal.start()
        for seq in range(1, 201):
            journal.submit(seq, record(seq))
        await asyncio.wait_for(done.wait(), 30)
        journal.close()
        return journal

    journal = asyncio.run(run())
    assert durable == sorted(durable) and durable[-1] == 200
    assert journal.records == 200 and journal.syncs < 200
    assert [b.seq for b in Wal(tmp_path).replay()] == list(range(1, 201))


def test_a_failed_write_is_reported_and_nothing_after_it_is_durable(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    durable: list[int] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        failed = asyncio.Event()

        def on_error(exc: BaseException) -> None:
            errors.append(exc)
            failed.set()

        journal = Journal(Wal(tmp_path), loop, lambda s, _n, _at: durable.append(s), on_error)
        journal.start()
        journal.submit(1, record(1))
        journal.submit(1, record(1))  # a replayed seq: the WAL refuses it
        await asyncio.wait_for(failed.wait(), 30)
        journal.close()

    asyncio.run(run())
    assert len(errors) == 1 and "seq 1" in str(errors[0])
    assert all(s <= 1 for s in durable)


def test_a_disk_full_write_is_reported_and_only_what_was_synced_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.pwrite
    budget = {"bytes": 5}  # once patched: 5 more bytes fit on the disk

    def small_disk(fd: int, data: bytes | memoryview, offset: int) -> int:
        if budget["bytes"] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real(fd, bytes(data[: budget["bytes"]]), offset)
        budget["bytes"] -= n
        return n

    errors: list[BaseException] = []
    durable: list[int] = []

    async def run() -> Journal:
        loop = asyncio.get_running_loop()
        failed = asyncio.Event()
        journal = Journal(
            Wal(tmp_path), loop, lambda s, _n, _at: durable.append(s),
            lambda e: (errors.append(e), failed.set()),
        )  # fmt: skip
        journal.start()
        for seq in (1, 2):
            journal.submit(seq, record(seq))
        while not durable or durable[-1] < 2:
            await asyncio.sleep(0.01)
        monkeypatch.setattr(os, "pwrite", small_disk)
        for seq in (3, 4):
            journal.submit(seq, record(seq))
        await asyncio.wait_for(failed.wait(), 30)
        journal.close()
        return journal

    journal = asyncio.run(run())
    monkeypatch.undo()
    assert len(errors) == 1 and "No space" in str(errors[0])
    assert durable[-1] == 2 and journal.durable_seq == 2 and journal.error is errors[0]
    again = Wal(tmp_path)  # the partial third record is a torn tail
    assert [b.seq for b in again.replay()] == [1, 2] and again.torn_bytes == 5
