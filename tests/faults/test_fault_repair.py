"""The log's tail repaired from the followers, and a log that cannot be used refused.

A flipped byte in the newest WAL record (synced, published, acknowledged), with the snapshot holder
paused (no snapshot covers the block, and it answers no one): the sequencer cuts the damaged
record as a torn tail, asks the replica and the committer, takes the block back from their copies
(checked against the committer's hash chain) and writes it back to the log. Every acknowledged tx
is still there (acknowledged as a client is: by a replica, once applied there), the followers
resume without diverging, and the state hashes agree. A record rewritten with a valid crc but
other content refuses the start, as does a damaged log in the actor's shell, which stays up,
says why and starts once the log is restored."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kit.faults import (
    TALLY,
    Load,
    SequencerProcess,
    flip_in_last_record,
    holder_config,
    newest_segment,
    records_end,
    sequencer_config,
    setup_ops,
    targets,
    traders,
    until,
    verify,
)

from raydex.actors.audit import SignatureAudit
from raydex.actors.committer import CommitterFollower
from raydex.actors.replica.service import ReplicaConfig, ReplicaService
from raydex.actors.runtime import HeldBlocks
from raydex.actors.sequencer import SequencerConfig, SequencerService
from raydex.actors.sequencer.repair import StartRefused
from raydex.actors.snapshot import ONE_ATTEMPT, SnapshotService, block_digest
from raydex.actors.transport import block_source, tx_channel
from raydex.codecs import (
    CreateOrder,
    decode_wal_record,
    encode_tx,
    encode_wal_record,
    peek_wal_record,
    tables_to_records,
)


@dataclass
class Rig:
    """A sequencer, the snapshot holder, one replica and the committer (with its audit), in this
    process over the real data plane; ``silent``: followers that answer no one (paused)."""

    tmp: Path
    cfg: SequencerConfig
    svc: SequencerService
    holder: SnapshotService
    replica: ReplicaService
    committer: CommitterFollower
    load: Load
    silent: set[str] = field(default_factory=set)
    _paused: dict[str, Any] = field(default_factory=dict)

    def ask(self) -> Callable[[int, int], Any]:
        followers: dict[str, Callable[[int, int], HeldBlocks]] = {
            "snapshot": self.holder.held_blocks,
            "committer": self.committer.held_blocks,
            "r0": self.replica.held_blocks,
        }

        async def ask(since: int, after: int) -> tuple[list[HeldBlocks], list[str]]:
            answers = [f(since, after) for n, f in followers.items() if n not in self.silent]
            return answers, sorted(self.silent & set(followers))

        return ask

    def pause_holder(self) -> None:
        """The holder stops (a SIGSTOP): nothing applied, nothing answered."""
        self._paused = dict(self.holder.supervisor.tasks)
        self.silent.add("snapshot")

    def resume_holder(self) -> None:
        self.silent.discard("snapshot")
        source = self.holder._sources[0]
        self.holder.supervisor.start("txlog", lambda: self.holder._follow_txlog(source))

    async def restart_sequencer(self) -> None:
        self.svc = SequencerService(self.cfg, followers=self.ask())
        await self.svc.start()


@asynccontextmanager
async def rig(tmp: Path) -> AsyncIterator[Rig]:
    cfg = sequencer_config(tmp, repair_timeout_s=2.0)
    tables: dict[str, tuple[int, int, dict[str, pa.Table]]] = {}
    holder = SnapshotService(
        holder_config(tmp, every_blocks=10_000),
        on_tables=lambda s, h, t: tables.__setitem__("latest", (s, h, t)),
    )
    svc = SequencerService(cfg)
    await svc.start()
    await svc.submit(setup_ops(range(1, 7)), operator=True)
    blocks, txlog = targets(cfg)
    await holder.start(blocks, txlog)
    await until(lambda: holder.seq == svc.state_hash()["seq"], "the holder at the setup")
    holder.snapshot()

    async def fetch_snapshot() -> tuple[int, int, dict[str, pa.Table]]:
        return tables["latest"]

    async def committer_snapshot() -> tuple[int, Any, bytes | None]:
        seq, _, t = tables["latest"]
        ring = dict(holder.ring)
        return seq, tables_to_records(t), block_digest(ring[seq]) if seq in ring else None

    replica = ReplicaService(
        ReplicaConfig(name="r0", sequencer_target=blocks),
        fetch_snapshot,
        lambda s: holder.blocks_since(s, timeout_s=0.01),
    )
    await replica.start()
    committer = CommitterFollower(
        block_source(blocks, name="committer", backoff=ONE_ATTEMPT),
        committer_snapshot,
        retry_s=0.05,
        txlog=tx_channel(txlog),
        audit=SignatureAudit(),
    )
    committer.start()
    r = Rig(tmp, cfg, svc, holder, replica, committer, Load(blocks, traders(), via=None))
    r.load.via = replica.execute_txs
    # the sequencer the test restarts asks these followers
    r.svc.followers = r.ask()
    try:
        yield r
    finally:
        await r.load.close()
        await committer.stop()
        await replica.stop()
        await holder.stop()
        await r.svc.stop()


def test_a_damaged_newest_record_is_restored_from_the_followers_and_nothing_acked_is_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def run() -> None:
        async with rig(tmp_path) as r:
            await r.load.run_until_acked(10)
            await r.holder.supervisor.stop()  # paused: it applies nothing more ...
            r.pause_holder()  # ... and answers no one
            await r.load.run_until_acked(6)
            newest = r.svc.state_hash()["seq"]
            await until(
                lambda: r.committer.committer.seq == newest == r.replica.state.seq,
                "the committer and the replica at the newest block",
            )
            assert r.holder.seq < newest  # no follower but these two holds the newest block
            at_replica = r.replica.state_hash()
            await r.svc.stop()
            seg = newest_segment(tmp_path / "wal")
            flip_in_last_record(seg, 5, 0x20)  # inside the newest record: its crc fails
            TALLY["faults injected"] += 1
            await r.restart_sequencer()
            rec = r.svc.recovery
            assert rec.torn_bytes > 0 and rec.log_seq == newest - 1
            assert rec.restored == (newest, newest) and rec.restored_checked == 1
            assert rec.unanswered == ["snapshot"] and rec.checked_blocks > 0
            assert r.svc.state_hash() == at_replica  # the state the replica applied
            TALLY["faults survived"] += 1
            r.resume_holder()
            await r.load.run_until_acked(5)
            now = r.svc.state_hash()["seq"]
            await until(lambda: r.replica.state.seq == now, "the replica at the newest block")
            await until(lambda: r.committer.committer.seq == now, "the committer likewise")
            assert r.committer.divergences == 0 and r.holder.divergences == 0
            assert r.replica.resyncs == 0 and r.committer.resyncs == 0
            assert r.replica.state_hash() == r.svc.state_hash()
            await verify(tmp_path, r.cfg, r.holder, r.load, r.svc.state_hash)
            # the audit passed the restored block (audited from the original record if it read
            # it before the crash, else skipped: a restored record holds no signed txs)
            audit = r.committer.audit
            assert audit is not None
            await until(lambda: audit.seq >= now, "the audit at the newest block")
            assert audit.failed_txs == 0 and audit.skipped_blocks <= 1

    with caplog.at_level(logging.WARNING):
        asyncio.run(run())
    assert "torn tail of" in caplog.text and "WAL repaired:" in caplog.text
    assert "restored from their copies (1 of 1 checked against the committer's chain)" in (
        caplog.text
    )


def test_a_record_altered_with_a_valid_crc_refuses_the_start_and_nothing_is_cut(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        async with rig(tmp_path) as r:
            await r.load.run_until_acked(8)
            newest = r.svc.state_hash()["seq"]
            await until(lambda: r.committer.committer.seq == newest, "the committer in step")
            await r.svc.stop()
            seg = newest_segment(tmp_path / "wal")
            good = seg.read_bytes()
            # the newest record rewritten: one order's price changed, its crc made valid again
            end = records_end(good)
            off = 0
            while (info := peek_wal_record(good, off)) is not None and info.end < end:
                off = info.end
            block = decode_wal_record(good[off:end])
            tx = block.txs[0]
            assert isinstance(tx, CreateOrder)
            txs = [tx._replace(price=tx.price + 10), *block.txs[1:]]
            forged = encode_wal_record(
                block.seq, block.timestamp_ns, [encode_tx(t) for t in txs], block.refused
            )
            assert len(forged) == end - off
            seg.write_bytes(good[:off] + forged + good[end:])
            TALLY["faults injected"] += 1
            with pytest.raises(StartRefused, match="altered after it was written") as err:
                await r.restart_sequencer()
            assert f"block {newest}" in str(err.value)
            assert seg.read_bytes()[:end] == good[:off] + forged  # nothing was cut
            seg.write_bytes(good)  # the operator restores the log
            await r.restart_sequencer()
            assert r.svc.recovery.checked_blocks > 0 and r.svc.recovery.restored is None
            TALLY["faults survived"] += 1
            await r.load.run_until_acked(3)
            await verify(tmp_path, r.cfg, r.holder, r.load, r.svc.state_hash)

    asyncio.run(run())


def test_the_sequencer_shell_refuses_a_log_it_cannot_use_says_why_and_starts_once_restored(
    tmp_path: Path,
) -> None:
    """The production shell (``SequencerActor``, in its own process): damage in the middle of
    the log is a refused start, not an exit: the process stays up, logs why (again on every
    attempt), and serves once the operator restores the file."""
    cfg = sequencer_config(tmp_path, repair_timeout_s=1.0)
    proc = SequencerProcess(cfg, tmp_path / "sequencer.log")

    async def run() -> None:
        await proc.start(setup=setup_ops(range(1, 9)))
        load = Load(targets(cfg)[0], traders())
        try:
            await load.run_until_acked(12)
            assert proc.kill() == -9
            seg = newest_segment(tmp_path / "wal")
            good = seg.read_bytes()
            at = records_end(good) // 2
            seg.write_bytes(good[:at] + bytes([good[at] ^ 0x04]) + good[at + 1 :])
            TALLY["faults injected"] += 1
            starting = asyncio.create_task(proc.start())
            await until(lambda: proc.log().count("SEQUENCER REFUSES TO START") >= 2,
                        "two refused attempts")  # fmt: skip
            assert proc.alive and not starting.done()
            assert "damaged WAL" in proc.log() and "refusing to start" in proc.log()
            shutil.copyfile(tmp_path / "sequencer.log", tmp_path / "refused.log")
            seg.write_bytes(good)  # restored: the next attempt serves
            await starting
            assert "serving after" in proc.log() and "refused starts" in proc.log()
            TALLY["faults survived"] += 1
            await load.run_until_acked(3)
            holder = SnapshotService(holder_config(tmp_path, every_blocks=1000))
            await holder.start(*targets(cfg))
            try:
                await verify(tmp_path, cfg, holder, load)
            finally:
                await holder.stop()
        finally:
            await load.close()
            if proc.alive:
                proc.kill()

    asyncio.run(run())
