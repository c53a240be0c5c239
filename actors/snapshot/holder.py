"""The snapshot holder: the full exchange state, materialized as Arrow snapshots.

::

    sequencer ──stamped blocks──────────────►  SnapshotService ── every K blocks or T s ──►
              ──WAL range reads (behind ring)─►  DeltaState        snapshot-<seq>/ (Arrow IPC)
                                                 ring of deltas    ray.put(tables) (owned here)
    replicas ◄── latest_snapshot() / blocks_since(seq) (long poll) ──┘
             ◄── recent_trades(snapshot seq): the market tape as of it (tape.py)

The state is a fold of the blocks' deltas (``deltas.py``), not a re-execution: no engine runs on
the steady path. A snapshot is exactly ``Engine.records()`` of the sequencer's state at its seq.
Each block arrives stamped with the crc of its WAL record; the crc is the identity of the history
followed and goes into each snapshot's ``meta.json`` (``record_crc``), which the sequencer checks
against its WAL when it recovers from the snapshot.

Following (one supervised loop, ``txlog``):
- It resumes *at* its seq and checks the crc there (``follow.py``); ``Diverged`` moves its
  snapshots from that seq aside (``.diverged-snapshot-<seq>``), rebuilds from an older one and
  follows again.
- Behind the sequencer's ring it catches up through WAL range reads: only this path rebuilds an
  engine and re-executes records (O(state) twice per catch-up).
- An exception mid-block restarts from the newest snapshot, never from the half-applied state.

``blocks_since(n)`` answers at once when newer blocks exist, else when one arrives or the timeout
passes; every answer says which seq it reflects; a seq the ring no longer holds raises
``ResyncRequired``. ``status()`` reports the state hash with its seq (O(state) once per seq).
Cost: per block one decode and one dict update per event; a snapshot is O(state), off the trading
path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from raydex.codecs import (
    decode_block,
    decode_wal_read_reply,
    decode_wal_record,
    encode_wal_read_request,
    peek_block_header,
    unstamp_block,
    wal_record_crc,
)
from raydex.engine import Engine, state_digest
from raydex.observability.hist import Histogram
from raydex.observability.metrics import Recorder

from ..runtime import (
    ActorRuntime,
    HeldBlocks,
    PrimaryTargets,
    PrimaryWatch,
    Supervisor,
    exit_process,
    held_blocks,
    log_fatal,
    short_hash,
)
from ..runtime.checks import StateChecks
from ..transport import ResyncRequired, TransportError, block_source, retarget, tx_channel
from .deltas import DeltaState
from .follow import ONE_ATTEMPT, Diverged, Reconnect, block_digest, follow
from .store import (
    LoadedSnapshot,
    load_newest_snapshot,
    quarantine,
    read_snapshot_meta,
    replay_block,
    snapshot_seq,
    snapshots,
    write_snapshot,
)
from .tape import TradeTape

log = logging.getLogger(__name__)

TablesHook = Callable[[int, int, dict[str, pa.Table]], None]


@dataclass(frozen=True, slots=True)
class SnapshotConfig:
    dir: str
    #: snapshot after this many blocks (more often: faster replica boot and WAL replay, more CPU)
    every_blocks: int = 1000
    #: ... or after this many seconds, whichever comes first (only when something changed)
    every_seconds: float = 5.0
    #: state checks: the holder and every replica hash their state after each block whose seq is
    #: a multiple of this, so their hashes compare at equal seq (``actors/runtime/checks.py``);
    #: fewer blocks: divergence seen sooner, one O(state) hash per follower more often
    check_every_blocks: int = 1000
    #: how many recent delta blocks are kept for replicas catching up
    ring_size: int = 50_000
    #: snapshot folders kept on disk (older ones are deleted); the sequencer keeps its WAL back to
    #: the oldest of them, so more means more disk for both
    keep: int = 3
    #: records asked per WAL range read when behind the sequencer's ring (the sequencer caps it)
    catch_up_records: int = 2000
    #: pause before reconnecting a broken stream (short: resumes fast after a sequencer restart)
    retry_s: float = 0.2
    #: deadline of one WAL range read
    read_timeout_s: float = 30.0
    #: the deployment's data-plane secret (``raydex deploy``; never in raydex.yaml)
    data_plane_secret: str = field(default="", repr=False)


class SnapshotService:
    """Asyncio core of the snapshot holder (see module docstring)."""

    def __init__(
        self,
        config: SnapshotConfig,
        on_tables: TablesHook | None = None,
        on_fatal: Callable[[str], None] = log_fatal,
    ) -> None:
        self.config = config
        self.on_tables = on_tables
        self.state = DeltaState()
        #: the engine of a WAL catch-up in progress (None otherwise): the state being built then
        self._replaying: Engine | None = None
        self.seq = 0
        self.height = 0
        #: crc of the tx-log record of block ``seq`` (None: unknown, e.g. seq 0)
        self.record_crc: int | None = None
        self.snapshot_seq = -1
        #: state_digest of the last snapshot
        self.snapshot_hash = ""
        #: (seq, state_digest hex) of the state last hashed
        self._digest: tuple[int, str] = (-1, "")
        #: the state hashed at every checkpoint seq, for replicas and operators to compare
        self.checks = StateChecks(config.check_every_blocks)
        self.snapshots_written = 0
        self.last_snapshot_s = 0.0
        self.ring: deque[tuple[int, bytes]] = deque(maxlen=config.ring_size)
        #: the recent trades per market, and as of each recent snapshot (``tape.py``)
        self.tape = TradeTape()
        self.delta_seq = 0
        #: the delta frame of block ``delta_seq`` (None: not held)
        self.last_frame: bytes | None = None
        self.divergences = 0
        self.wal_records_read = 0
        self._applying = False
        self._new_delta = asyncio.Event()
        self._sources: list[Any] = []
        self._reader: Any = None
        self._last_snapshot_at = 0.0
        #: snapshot build (records, Arrow, IPC write, the ``on_tables`` put), ns
        self.build_time = Histogram()
        self.metrics = Recorder("snapshot", "snapshot")
        self.metrics.histogram("raydex_snapshot_build_seconds", self.build_time)
        self.metrics.gauge("raydex_block_seq", lambda: self.seq)
        self.metrics.gauge("raydex_state_check_seq", self.checks.latest_seq)
        self.supervisor = Supervisor(self.metrics, on_fatal)

    @property
    def folder(self) -> Path:
        return Path(self.config.dir)

    async def start(self, delta_target: str, txlog_target: str) -> None:
        """Follow the sequencer's stamped-block stream and WAL reads at ``txlog_target``.
        ``delta_target`` (the replicas' block stream) is not followed: the stamped stream
        carries the same frames; it is accepted so deployments keep one call shape."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self._load(load_newest_snapshot(self.folder))
        self.delta_seq = self.seq
        self.snapshot()  # replicas can boot at once, even on a fresh exchange
        secret = self.config.data_plane_secret
        txlog = block_source(
            txlog_target, name="snapshot-txlog", secret=secret, backoff=ONE_ATTEMPT
        )
        self._sources = [txlog]
        self._reader = tx_channel(txlog_target, secret=secret)
        self.supervisor.start("txlog", lambda: self._follow_txlog(txlog))
        self.supervisor.start(
            "checks", lambda: self.checks.run_quiet(lambda: self.seq, self._records)
        )

    def _records(self) -> Iterable[Any]:
        """The state's records now (the engine's during a WAL catch-up)."""
        model = self._replaying if self._replaying is not None else self.state
        return model.records()

    async def stop(self) -> None:
        await self.supervisor.stop()
        for s in self._sources:
            await s.close()
        if self._reader is not None:
            await self._reader.close()

    def _load(self, loaded: LoadedSnapshot) -> None:
        self.state = DeltaState.from_records(loaded.engine.records())
        self.tape.clear()
        self.seq, self.height = loaded.seq, loaded.height
        crc = loaded.meta.get("record_crc")
        self.record_crc = int(crc) if crc is not None else None
        self.snapshot_seq = -1  # the next snapshot() writes (and publishes) this state

    # ---- following the stamped blocks -----------------------------------------------------------

    async def _follow_txlog(self, source: Any) -> None:
        if self._applying:  # a previous run died inside a block: never continue from there
            log.error("tx log: the last block was not fully applied; reloading from a snapshot")
            self._load(load_newest_snapshot(self.folder, max_seq=self.seq))
            self._applying = False
            self.snapshot()
        retry = Reconnect("tx log", self.config.retry_s)
        while True:
            before = self.seq
            try:
                async for seq, frame in follow(source, self.seq, self.record_crc, _stamp_crc):
                    self.apply_stamped(seq, frame)
            except ResyncRequired as exc:
                log.info("tx log: %s; catching up from the sequencer's WAL", exc)
                await self._catch_up_from_wal(exc.floor + 1 if exc.floor >= 0 else None)
            except Diverged as exc:
                self._rewind(exc)
            except TransportError as exc:
                if self.seq != before:
                    retry.progressed()
                await retry.wait(exc)

    def apply_stamped(self, seq: int, frame: bytes) -> None:
        """Apply stamped block ``seq`` (the next one), hold its deltas, snapshot when due."""
        if seq != self.seq + 1:
            raise RuntimeError(f"block stream: block {seq} does not follow {self.seq}")
        crc, deltas = unstamp_block(frame)
        block = decode_block(deltas)
        self._applying = True
        self.state.apply(block.events)
        self._applying = False
        self.tape.add(seq, block.timestamp_ns // 1_000_000, block.events)
        self.seq = seq
        self.height = block.height
        self.record_crc = crc
        self._hold(seq, deltas)
        if self.checks.due(seq):
            self.checks.take(seq, self.state.records())
        if self._due():
            self.snapshot()

    def _hold(self, seq: int, frame: bytes) -> None:
        """Keep block ``seq``'s delta frame for replicas catching up (once: a block re-received
        after a reload from a snapshot is already held)."""
        if seq <= self.delta_seq:
            return
        if seq != self.delta_seq + 1:
            self._restart_ring(seq - 1)
        self.ring.append((seq, frame))
        self.delta_seq = seq
        self.last_frame = frame
        self._new_delta.set()
        self._new_delta = asyncio.Event()

    def _apply_record(self, engine: Engine, seq: int, record: bytes) -> Engine:
        """Re-execute the WAL record of block ``seq`` (catch-up only; see the module docstring);
        the engine after it (a new one after a restored record, ``store.replay_block``)."""
        if seq != self.seq + 1:
            raise RuntimeError(f"tx log: block {seq} does not follow {self.seq}")
        block = decode_wal_record(record)
        self._applying = True
        engine = self._replaying = replay_block(engine, block)
        self._applying = False
        self.seq = seq
        if block.restored is not None:
            self.height = peek_block_header(block.restored).height
        else:
            self.height += len(block.txs)
        self.record_crc = wal_record_crc(record)
        if self.checks.due(seq):
            self.checks.take(seq, engine.records())
        if self._due():
            self.snapshot()
        return engine

    async def _catch_up_from_wal(self, until: int | None = None) -> None:
        """Bounded WAL range reads until the holder reaches ``until`` (the first block the
        sequencer's ring holds: the stream serves the rest, and the holder's ring gets them) or
        else the newest published block. The records are re-executed by an engine built from
        the state (see the module docstring)."""
        self._replaying = Engine.from_records(self.state.records())
        try:
            await self._read_wal(until)
        finally:
            engine, self._replaying = self._replaying, None
            self.state = DeltaState.from_records(engine.records())
            self._restart_ring(self.seq)
            self.tape.clear()  # re-executed blocks leave no trades here: a gap, not a tape

    async def _read_wal(self, until: int | None) -> None:
        """Apply WAL range reads to ``_replaying`` (see :meth:`_catch_up_from_wal`)."""
        assert self._reader is not None
        while True:
            want = self.config.catch_up_records
            if until is not None:
                want = max(1, min(want, until - self.seq + 1))
            request = encode_wal_read_request(self.seq, want)
            frame = await asyncio.wait_for(self._reader.submit(request), self.config.read_timeout_s)
            reply = decode_wal_read_reply(frame)
            records = reply.records
            if records and records[0][0] == self.seq and self.seq > 0:
                crc = wal_record_crc(records[0][1])
                if self.record_crc is not None and crc != self.record_crc:
                    raise Diverged(self.seq, " (read from its WAL)")
                records = records[1:]
            elif self.seq < reply.last_seq and (not records or records[0][0] != self.seq + 1):
                raise RuntimeError(
                    f"tx log: the sequencer's WAL holds seqs {reply.first_held}..{reply.last_seq},"
                    f" not {self.seq + 1}: this holder is behind everything it can be served"
                )
            if until is not None:
                records = [r for r in records if r[0] <= until]
            for seq, record in records:
                assert self._replaying is not None
                self._apply_record(self._replaying, seq, record)
            self.wal_records_read += len(records)
            end = reply.last_seq if until is None else min(until, reply.last_seq)
            if self.seq >= end or not records:
                log.info("tx log: caught up from the WAL to seq %d", self.seq)
                return
            await asyncio.sleep(0)  # let replicas' long polls run

    def _rewind(self, exc: Diverged) -> None:
        """The sequencer's block ``exc.seq`` is not ours: set our snapshots from it aside and
        rebuild from the newest one before it."""
        self.divergences += 1
        log.error("tx log: %s", exc)
        for path in snapshots(self.folder):
            if snapshot_seq(path) >= exc.seq:
                moved = quarantine(path, "diverged")
                log.error("snapshot %s belongs to the diverged history: moved to %s", path, moved)
        self._load(load_newest_snapshot(self.folder, max_seq=exc.seq - 1))
        self.checks.forget_after(self.seq)
        self._restart_ring(self.seq)
        log.warning("tx log: rebuilt from snapshot seq %d; following again", self.seq)
        self.snapshot()

    def _restart_ring(self, after_seq: int) -> None:
        self.ring.clear()
        self.delta_seq = after_seq
        self.last_frame = None

    def _due(self) -> bool:
        cfg = self.config
        if self.seq - self.snapshot_seq >= cfg.every_blocks:
            return True
        return time.monotonic() - self._last_snapshot_at >= cfg.every_seconds

    # ---- snapshots ------------------------------------------------------------------------------

    def snapshot(self) -> int:
        """Materialize the current state (disk + ``on_tables``); returns its seq."""
        if self.seq == self.snapshot_seq:
            return self.seq
        t0 = time.perf_counter_ns()
        folder = self.folder
        model = self._replaying if self._replaying is not None else self.state
        path, tables = write_snapshot(folder, model, self.seq, self.height, self.record_crc)
        self.tape.mark(self.seq)
        if self.on_tables is not None:
            self.on_tables(self.seq, self.height, tables)
        for old in snapshots(folder)[: -self.config.keep]:
            with contextlib.suppress(OSError):
                shutil.rmtree(old)
        self.snapshot_seq = self.seq
        self.snapshot_hash = str(read_snapshot_meta(path)["state_digest"])
        self.snapshots_written += 1
        self._last_snapshot_at = time.monotonic()
        took = time.perf_counter_ns() - t0
        self.build_time.record(took)
        self.last_snapshot_s = took / 1e9
        return self.seq

    async def blocks_since(
        self, seq: int, max_blocks: int = 1000, timeout_s: float = 1.0
    ) -> tuple[int, list[tuple[int, bytes]]]:
        """Delta blocks after ``seq`` (long poll). Raises ResyncRequired if the ring no longer
        holds ``seq + 1``."""
        if self.delta_seq <= seq:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new_delta.wait(), timeout_s)
        ring = self.ring
        if self.delta_seq <= seq:
            return self.delta_seq, []
        first = ring[0][0] if ring else self.delta_seq + 1
        if seq + 1 < first:
            raise ResyncRequired(seq + 1, first - 1)
        start = seq + 1 - first
        out = [ring[i] for i in range(start, min(len(ring), start + max_blocks))]
        return self.delta_seq, out

    def held_blocks(self, since: int, frames_after: int) -> HeldBlocks:
        """What the holder applied and holds of the newest blocks (``runtime/held.py``), with
        the crc of its newest block's WAL record: asked by a sequencer whose log lost its tail."""
        return held_blocks(
            "snapshot", "snapshot", self.seq, self.ring, since, frames_after,
            record_crc=self.record_crc,
        )  # fmt: skip

    def state_hash(self) -> dict[str, Any]:
        """The current state hash (``raydex.engine.state_digest``, the one every role reports)
        and its seq: O(state) once per seq (cached), for ``status``, tests and operators."""
        if self._digest[0] != self.seq:  # a state check may have hashed this seq already
            digest = self.checks.done.get(self.seq) or state_digest(self._records()).hex()
            self._digest = (self.seq, digest)
        return {"seq": self._digest[0], "state_hash": self._digest[1]}

    def status(self) -> dict[str, Any]:
        """The current state hash with its seq (``state_hash_seq``; O(state) once per seq, off
        the trading path), the last snapshot's (``snapshot_hash``, ``snapshot_seq``) and the
        state checks (``state_checks``: checkpoint seq -> hash)."""
        current = self.state_hash()
        return {
            "pid": os.getpid(),
            "seq": self.seq,
            "height": self.height,
            "delta_seq": self.delta_seq,
            "snapshot_seq": self.snapshot_seq,
            "snapshots_written": self.snapshots_written,
            "last_snapshot_s": self.last_snapshot_s,
            "ring": len(self.ring),
            "snapshot_hash": self.snapshot_hash,
            "state_hash": current["state_hash"],
            "state_hash_seq": current["seq"],
            "divergences": self.divergences,
            **self.checks.status(),
            "wal_records_read": self.wal_records_read,
            "loop_restarts": {n: self.supervisor.restarts(n) for n in self.supervisor.tasks},
        }


def _stamp_crc(frame: bytes) -> int:
    """The identity of a stamped block: its WAL record's crc (what ``follow`` compares)."""
    crc: int = unstamp_block(frame)[0]
    return crc


class SnapshotActor:
    """Ray shell (wrap with ``ray.remote``): owns the Arrow snapshot objects in the object store,
    so they live as long as this actor; replicas on the same node map them zero-copy. A failed
    start, or a loop that keeps failing, exits the process (Ray restarts the holder)."""

    def __init__(
        self,
        config: SnapshotConfig,
        delta_target: str,
        txlog_target: str,
        bundle: Any = None,
        gc_spec: Any = None,
    ) -> None:
        self.service = SnapshotService(config, on_tables=self._put, on_fatal=exit_process)
        self._latest: tuple[int, int, dict[str, Any]] | None = None
        self.runtime = ActorRuntime(bundle, gc_spec, nice=None)
        # started from __init__, so a restarted holder resumes by itself
        self._started = asyncio.get_event_loop().create_task(
            self._start(delta_target, txlog_target)
        )

    async def _start(self, delta_target: str, txlog_target: str) -> None:
        self.runtime.before_boot()
        try:
            await self.service.start(delta_target, txlog_target)
        except Exception as exc:  # any failed start: exit so that Ray restarts (and retries) us
            log.exception("snapshot holder start failed")
            exit_process(f"snapshot holder start failed: {exc!r}")
        self.runtime.after_boot(self.service.metrics, live=self.live)
        watch = PrimaryWatch(self._follow_primary, txlog_target, "txlog")
        self.service.supervisor.start("primary-watch", watch.run)

    async def _follow_primary(self, primary: PrimaryTargets) -> None:
        """A standby took over: the stamped stream and the WAL reads go to it."""
        for source in self.service._sources:
            await retarget(source, primary.txlog)
        if self.service._reader is not None:
            await retarget(self.service._reader, primary.txlog)

    def _put(self, seq: int, height: int, tables: dict[str, pa.Table]) -> None:
        import ray

        self._latest = (seq, height, {name: ray.put(t) for name, t in tables.items()})

    async def start(self) -> dict[str, Any]:
        """Wait for the boot; the holder's status."""
        await self._started
        return await self.status()

    async def latest_snapshot(self) -> tuple[int, int, dict[str, Any]]:
        """``(seq, height, {table name: ObjectRef[pa.Table]})`` of the newest snapshot."""
        await self._started
        assert self._latest is not None
        return self._latest

    async def blocks_since(
        self, seq: int, max_blocks: int = 1000, timeout_s: float = 1.0
    ) -> tuple[int, list[tuple[int, bytes]]]:
        return await self.service.blocks_since(seq, max_blocks, timeout_s)

    async def recent_trades(self, seq: int) -> tuple[Any, ...] | None:
        """The market tape as of snapshot ``seq`` (``tape.py``), None when not kept: what a
        replica booting from that snapshot starts its ``recentTrades`` with."""
        return self.service.tape.at(seq)

    async def held_blocks(self, since: int, frames_after: int) -> HeldBlocks:
        """:meth:`SnapshotService.held_blocks`, answered at once (never waiting for the boot)."""
        return self.service.held_blocks(since, frames_after)

    async def block_digest(self, seq: int) -> bytes | None:
        """sha256 of the delta frame of block ``seq`` if the ring holds it (a follower that
        rebuilt from the snapshot at ``seq`` checks its history with it)."""
        ring = self.service.ring
        if not ring or not ring[0][0] <= seq <= ring[-1][0]:
            return None
        return block_digest(ring[seq - ring[0][0]][1])

    async def state_hash(self) -> dict[str, Any]:
        await self._started
        return self.service.state_hash()

    async def state_checks(self) -> dict[int, str]:
        """The state hashes at the last checkpoint seqs (``actors/runtime/checks.py``): what
        replicas compare theirs with."""
        return dict(self.service.checks.done)

    async def status(self) -> dict[str, Any]:
        await self._started
        return {**self.service.status(), **self.runtime.status(), "repr": self.live()}

    def __repr__(self) -> str:
        """What Ray records when ``__init__`` returns: the fixed facts of :meth:`live` and where
        the live ones are (``actors/runtime/shell.py``)."""
        return self.live(fixed=True)

    def live(self, fixed: bool = False) -> str:
        """Role, deployment/name, seq, lag (delta blocks seen beyond the tx-log blocks applied),
        the last state hash computed (with its seq), the newest snapshot and placement."""
        svc = self.service
        seq, digest = svc._digest
        return self.runtime.describe(
            "snapshot",
            {
                "state": "serving" if self._latest is not None else "booting",
                "seq": svc.seq if self._latest is not None else None,
                "lag": max(0, svc.delta_seq - svc.seq) if self._latest is not None else None,
                "hash": short_hash(digest, seq),
                **svc.checks.facts(),
                "snapshot": svc.snapshot_seq if svc.snapshot_seq >= 0 else None,
            },
            fixed=fixed,
        )

    async def stop(self) -> None:
        await self.service.stop()
