"""The snapshot holder: the full exchange state, materialized as Arrow snapshots.

::

    sequencer ──tx log (WAL records, gRPC)──► SnapshotService ── every K blocks or T s ──►
              ──delta blocks (gRPC)─────────►  engine replica      snapshot-<seq>/ (Arrow IPC)
                                               ring of deltas       ray.put(tables) (owned here)
    replicas ◄── latest_snapshot() / blocks_since(seq) (long poll) ──┘

State is kept by *re-executing* the logged txs with the deterministic engine (state-machine
replication), so a snapshot is exactly ``Engine.records()`` of the sequencer's state at that seq:
the same tables the sequencer recovers from and replicas boot from. Its state hash is written in
each snapshot's ``meta.json`` and can be compared with the sequencer's.

The delta ring lets a replica that booted from snapshot ``S`` fetch blocks ``S+1..`` even when the
sequencer's own ring has moved past them. ``blocks_since(n)`` is long-poll style: answered at once
when newer blocks exist, else when one arrives or the timeout passes; every answer says which seq
it reflects.

Cost: replaying costs what the sequencer's execution costs (minus signatures); a snapshot is
``records()`` + Arrow conversion + IPC write, O(state), off the trading path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from raydex.codecs import decode_wal_record
from raydex.engine import Engine
from raydex.observability.hist import Histogram
from raydex.observability.metrics import Recorder

from ..runtime import ActorRuntime
from ..transport import GrpcBlockSource, ResyncRequired, TransportUnavailable
from .store import load_engine_snapshot, replay_block, write_snapshot

log = logging.getLogger(__name__)

TablesHook = Callable[[int, int, dict[str, pa.Table]], None]


@dataclass(frozen=True, slots=True)
class SnapshotConfig:
    dir: str
    #: snapshot after this many blocks (more often: faster replica boot and WAL replay, more CPU)
    every_blocks: int = 1000
    #: ... or after this many seconds, whichever comes first (only when something changed)
    every_seconds: float = 5.0
    #: how many recent delta blocks are kept for replicas catching up
    ring_size: int = 50_000
    #: snapshot folders kept on disk (older ones are deleted)
    keep: int = 3


class SnapshotService:
    """Asyncio core of the snapshot holder (see module docstring)."""

    def __init__(self, config: SnapshotConfig, on_tables: TablesHook | None = None) -> None:
        self.config = config
        self.on_tables = on_tables
        self.engine: Engine = Engine()
        self.seq = 0
        self.height = 0
        self.snapshot_seq = -1
        self.snapshots_written = 0
        self.last_snapshot_s = 0.0
        self.ring: deque[tuple[int, bytes]] = deque(maxlen=config.ring_size)
        self.delta_seq = 0
        self._new_delta = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._sources: list[GrpcBlockSource] = []
        self._last_snapshot_at = 0.0
        #: snapshot build (records, Arrow, IPC write, the ``on_tables`` put), ns
        self.build_time = Histogram()
        self.metrics = Recorder("snapshot", "snapshot")
        self.metrics.histogram("raydex_snapshot_build_seconds", self.build_time)
        self.metrics.gauge("raydex_block_seq", lambda: self.seq)

    async def start(self, delta_target: str, txlog_target: str) -> None:
        folder = Path(self.config.dir)
        folder.mkdir(parents=True, exist_ok=True)
        self.engine, self.seq, self.height = load_engine_snapshot(folder)
        self.delta_seq = self.seq
        self.snapshot()  # replicas can boot at once, even on a fresh exchange
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._follow_txlog(txlog_target)),
            loop.create_task(self._follow_deltas(delta_target)),
        ]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for s in self._sources:
            await s.close()

    # ---- following the sequencer ----------------------------------------------------------------

    async def _follow_txlog(self, target: str) -> None:
        source = GrpcBlockSource(target, name="snapshot-txlog")
        self._sources.append(source)
        while True:
            try:
                async for seq, record in source.subscribe(self.seq + 1):
                    block = decode_wal_record(record)
                    replay_block(self.engine, block)
                    self.seq = seq
                    self.height += len(block.txs)
                    if self._due():
                        self.snapshot()
            except (TransportUnavailable, ResyncRequired) as exc:
                # The sequencer is away, or its ring moved past us: retry (its WAL has it all).
                log.warning("tx-log stream: %s; retrying", exc)
                await asyncio.sleep(0.5)

    async def _follow_deltas(self, target: str) -> None:
        source = GrpcBlockSource(target, name="snapshot-deltas")
        self._sources.append(source)
        while True:
            try:
                async for seq, frame in source.subscribe(self.delta_seq + 1):
                    self.ring.append((seq, frame))
                    self.delta_seq = seq
                    self._new_delta.set()
                    self._new_delta = asyncio.Event()
            except (TransportUnavailable, ResyncRequired) as exc:
                log.warning("delta stream: %s; retrying", exc)
                if isinstance(exc, ResyncRequired):
                    self.ring.clear()
                    self.delta_seq = self.seq
                await asyncio.sleep(0.5)

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
        folder = Path(self.config.dir)
        _, tables = write_snapshot(folder, self.engine, self.seq, self.height)
        if self.on_tables is not None:
            self.on_tables(self.seq, self.height, tables)
        for old in sorted(folder.glob("snapshot-*[0-9]"))[: -self.config.keep]:
            for f in old.iterdir():
                f.unlink()
            with contextlib.suppress(OSError):
                old.rmdir()
        self.snapshot_seq = self.seq
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
        if not ring or self.delta_seq <= seq:
            return self.delta_seq, []
        first = ring[0][0]
        if seq + 1 < first:
            raise ResyncRequired(seq + 1, first - 1)
        start = seq + 1 - first
        out = [ring[i] for i in range(start, min(len(ring), start + max_blocks))]
        return self.delta_seq, out

    def status(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "height": self.height,
            "delta_seq": self.delta_seq,
            "snapshot_seq": self.snapshot_seq,
            "snapshots_written": self.snapshots_written,
            "last_snapshot_s": self.last_snapshot_s,
            "ring": len(self.ring),
            "state_hash": self.engine.state_hash().hex(),
        }


class SnapshotActor:
    """Ray shell (wrap with ``ray.remote``): owns the Arrow snapshot objects in the object store,
    so they live as long as this actor; replicas on the same node map them zero-copy."""

    def __init__(
        self,
        config: SnapshotConfig,
        delta_target: str,
        txlog_target: str,
        bundle: Any = None,
        gc_spec: Any = None,
    ) -> None:
        self.service = SnapshotService(config, on_tables=self._put)
        self._latest: tuple[int, int, dict[str, Any]] | None = None
        self.runtime = ActorRuntime(bundle, gc_spec, nice=None)
        # started from __init__, so a restarted holder resumes by itself
        self._started = asyncio.get_event_loop().create_task(
            self._start(delta_target, txlog_target)
        )

    async def _start(self, delta_target: str, txlog_target: str) -> None:
        self.runtime.before_boot()
        await self.service.start(delta_target, txlog_target)
        self.runtime.after_boot(self.service.metrics)

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

    async def status(self) -> dict[str, Any]:
        await self._started
        return {**self.service.status(), **self.runtime.status()}

    async def stop(self) -> None:
        await self.service.stop()
