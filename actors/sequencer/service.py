"""The sequencer: executes every transaction, closes blocks, logs them, fans them out.

::

    replicas ──tx batches (gRPC Txs stream)──►┌───────────────────────────────┐
    operator ──Ray call: operator(txs)───────►│ SequencerService              │
                                              │  BlockProducer (engine + WAL) │
                                              │  block loop: every interval   │
                                              │  or block_max_txs, close:     │
                                              │  WAL append+fsync, publish    │
    replicas, snapshot holder ◄──blocks───────┤  BlockHub ring (gRPC Blocks)  │
                                              └───────────────────────────────┘

``SequencerService`` is the asyncio core (tested without Ray); ``SequencerActor`` is the Ray shell
(detached, named) that owns one and exposes the control plane: ``start``, ``status``,
``operator``. Data-plane traffic never goes through Ray calls when the gRPC transport is chosen.

Invariants: a submitter's future resolves only after its block's WAL record is durable; blocks are
published in seq order, each exactly once; a batch whose frame does not decode is answered with
``INVALID_TX_INFO`` for the whole batch and changes nothing.

Knobs: ``block_interval_ms`` (longer = bigger blocks, fewer fsyncs, more latency per tx) and
``block_max_txs`` (caps a block so one burst cannot delay everyone behind it).

Metrics (``SequencerService.metrics``, exported by the actor shell): block time, close time, block
size, WAL fsync, blocks and txs totals, seq; they read the histograms ``status`` reports.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raydex.codecs import (
    BPS,
    DEFAULT_CHAIN_ID,
    MAX_MARKET_INDEX,
    CodecError,
    MarketIndex,
    ResultCode,
    SetMarkPrice,
    TxOutcome,
    Verifier,
    decode_batch,
    encode_outcomes,
)
from raydex.observability.hist import Histogram
from raydex.observability.metrics import Recorder

from ..runtime import ActorRuntime, advertised_host
from ..transport import BlockHub, GrpcDataPlaneServer
from .journal import Journal
from .producer import BlockProducer, ClosedBlock
from .wal import FsyncPolicy, Wal

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SequencerConfig:
    wal_dir: str
    snapshot_dir: str
    chain_id: int = DEFAULT_CHAIN_ID
    block_interval_ms: float = 1.0
    block_max_txs: int = 1000
    wal_fsync: FsyncPolicy = "block"
    grpc_host: str = "127.0.0.1"
    grpc_port: int = 0
    txlog_port: int = 0
    ring_size: int = 4096
    #: Oracle: every interval, each market's mark moves toward its book mid by at most
    #: ``oracle_max_step_bps`` (0 = off: marks only change by operator SetMarkPrice). Shorter
    #: interval: marks track the book closely (and liquidations trigger sooner), more commands.
    oracle_interval_ms: float = 0.0
    oracle_max_step_bps: int = 50
    #: re-verify every user signature in the sequencer (see ``BlockProducer.verify_signatures``)
    verify_signatures: bool = True


class SequencerService:
    """Asyncio core of the sequencer (see module docstring)."""

    def __init__(self, config: SequencerConfig) -> None:
        self.config = config
        self.producer: BlockProducer | None = None
        self.hub: BlockHub | None = None
        #: the tx-log stream (one WAL record per block) that the snapshot holder replays
        self.txlog: BlockHub | None = None
        self.server: GrpcDataPlaneServer | None = None
        self.txlog_server: GrpcDataPlaneServer | None = None
        self.port = 0
        self.txlog_port = 0
        self.replayed = 0
        self._pending: asyncio.Future[ClosedBlock] | None = None
        #: closed blocks whose WAL record the journal has not synced yet, in seq order
        self._undurable: deque[tuple[ClosedBlock, asyncio.Future[ClosedBlock]]] = deque()
        self.journal: Journal | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._oracle_task: asyncio.Task[None] | None = None
        self._stopping = False
        self.blocks = 0
        self.txs = 0
        #: open (first tx in) -> durable and published, per block
        self.block_time = Histogram()
        #: the close itself on the loop: encode the block and queue its WAL record
        self.close_time = Histogram()
        self.block_txs = Histogram()
        self.metrics = Recorder("sequencer", "sequencer")
        m = self.metrics
        m.histogram("raydex_block_seconds", self.block_time)
        m.histogram("raydex_block_close_seconds", self.close_time)
        m.histogram("raydex_block_size_txs", self.block_txs)
        m.counter_fn("raydex_blocks_total", lambda: self.blocks)
        m.counter_fn("raydex_txs_total", lambda: self.txs)
        m.gauge("raydex_block_seq", lambda: self.producer.seq if self.producer else 0)

    async def start(self) -> int:
        """Recover (newest snapshot + WAL), open the data plane, start the block loop; port."""
        cfg = self.config
        wal = Wal(cfg.wal_dir, fsync=cfg.wal_fsync)
        self.producer, self.replayed = BlockProducer.recover(
            Path(cfg.snapshot_dir), wal, Verifier(cfg.chain_id), keep_blocks=cfg.ring_size
        )
        self.producer.verify_signatures = cfg.verify_signatures
        self.metrics.histogram("raydex_wal_fsync_seconds", wal.fsync_time)
        # Re-serve the blocks rebuilt from the WAL: a follower behind the crash (the snapshot
        # holder, a replica) resumes from them instead of finding its seq below the ring.
        rebuilt = self.producer.recovered_blocks
        first = rebuilt[0].seq - 1 if rebuilt else self.producer.seq
        self.hub = BlockHub(ring_size=cfg.ring_size, last_seq=first)
        self.server = GrpcDataPlaneServer(
            self.hub, self.handle_batch, host=cfg.grpc_host, port=cfg.grpc_port
        )
        self.port = await self.server.start()
        self.txlog = BlockHub(ring_size=cfg.ring_size, last_seq=first)
        for block in rebuilt:
            self.hub.publish_nowait(block.seq, block.frame)
            self.txlog.publish_nowait(block.seq, block.wal_record)
        rebuilt.clear()
        self.txlog_server = GrpcDataPlaneServer(self.txlog, host=cfg.grpc_host, port=cfg.txlog_port)
        self.txlog_port = await self.txlog_server.start()
        loop = asyncio.get_running_loop()
        self.journal = Journal(wal, loop, self._on_durable, self._on_journal_error)
        self.journal.start()
        self._loop_task = loop.create_task(self._block_loop())
        if cfg.oracle_interval_ms > 0:
            self._oracle_task = loop.create_task(self._oracle_loop())
        return self.port

    async def stop(self) -> None:
        self._stopping = True
        for task in (self._oracle_task, self._loop_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._close_block()
        if self.journal is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.journal.close)
            if self.producer is not None and self.producer.wal is not None:
                self._on_durable(self.producer.wal.last_seq)
        for server in (self.server, self.txlog_server):
            if server is not None:
                await server.stop()
        if self.producer is not None and self.producer.wal is not None:
            self.producer.wal.close()

    # ---- data plane -----------------------------------------------------------------------------

    async def handle_batch(self, frame: bytes) -> bytes:
        """Tx handler of the gRPC ``Txs`` stream: batch frame in, outcome frame out."""
        reply: bytes
        try:
            txs = decode_batch(frame)
        except CodecError:
            reply = encode_outcomes([(bytes(32), ResultCode.INVALID_TX_INFO, 0, 0)])
            return reply
        reply = encode_outcomes(await self.submit(txs, operator=False))
        return reply

    async def submit(self, txs: Sequence[Any], operator: bool = False) -> list[TxOutcome]:
        """Execute ``txs`` in the open block; resolves when that block is durable."""
        producer = self.producer
        assert producer is not None, "start() first"
        if self._stopping:
            raise RuntimeError("sequencer is stopping")
        at = producer.submit(txs, time.time_ns(), operator=operator)
        if self._pending is None:
            self._pending = asyncio.get_running_loop().create_future()
        fut = self._pending
        if producer.open_txs >= self.config.block_max_txs:
            self._close_block()
        block = await fut
        return [block.outcomes[i] for i in at]

    def _close_block(self) -> None:
        """Close the open block and hand its WAL record to the journal; the block is published
        and its outcomes released by :meth:`_on_durable` once the journal has synced it."""
        producer = self.producer
        fut, self._pending = self._pending, None
        if producer is None or fut is None:
            return
        t0 = time.perf_counter_ns()
        block = producer.close_block(write_wal=False)
        if block is None:
            fut.cancel()
            return
        assert self.journal is not None
        self._undurable.append((block, fut))
        self.journal.submit(block.seq, block.wal_record)
        self.close_time.record(time.perf_counter_ns() - t0)

    def _on_durable(self, seq: int, fsync_ns: int = 0) -> None:
        """Blocks up to ``seq`` are on disk: publish them in order and release their outcomes."""
        assert self.hub is not None and self.txlog is not None
        if fsync_ns and self.producer is not None and self.producer.wal is not None:
            self.producer.wal.fsync_time.record(fsync_ns)
        waiting = self._undurable
        while waiting and waiting[0][0].seq <= seq:
            block, fut = waiting.popleft()
            self.hub.publish_nowait(block.seq, block.frame)
            self.txlog.publish_nowait(block.seq, block.wal_record)
            self.blocks += 1
            self.txs += block.tx_count
            self.block_time.record(time.time_ns() - block.timestamp_ns)
            self.block_txs.record(block.tx_count)
            if not fut.done():
                fut.set_result(block)

    def _on_journal_error(self, exc: BaseException) -> None:
        """The WAL failed: nothing more may be acknowledged. Fail what waits and stop taking txs
        (Ray restarts the actor, which recovers from what did reach the disk)."""
        self._stopping = True
        log.error("WAL write failed, sequencer stops acknowledging: %r", exc)
        while self._undurable:
            _, fut = self._undurable.popleft()
            if not fut.done():
                fut.set_exception(RuntimeError(f"WAL write failed: {exc!r}"))

    async def _block_loop(self) -> None:
        interval = self.config.block_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            if self._pending is not None:
                self._close_block()

    # ---- oracle ---------------------------------------------------------------------------------

    def oracle_commands(self) -> list[SetMarkPrice]:
        """SetMarkPrice per market whose book mid moved away from its mark (capped step)."""
        assert self.producer is not None
        engine = self.producer.engine
        step_bps = self.config.oracle_max_step_bps
        out: list[SetMarkPrice] = []
        for i in range(MAX_MARKET_INDEX + 1):
            m = engine.market(i)
            if m is None:
                continue
            bid, ask = engine.book_levels(i, 0, 1), engine.book_levels(i, 1, 1)
            if not bid or not ask:
                continue
            mid = (bid[0][0] + ask[0][0]) // 2
            cap = max(1, m.mark_price * step_bps // BPS)
            target = min(max(mid, m.mark_price - cap), m.mark_price + cap)
            if target != m.mark_price:
                out.append(SetMarkPrice(MarketIndex(i), target))
        return out

    async def _oracle_loop(self) -> None:
        interval = self.config.oracle_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            cmds = self.oracle_commands()
            if cmds:
                await self.submit(cmds, operator=True)

    # ---- control plane --------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        p = self.producer
        return {
            "pid": os.getpid(),
            "seq": p.seq if p else 0,
            "height": p.height if p else 0,
            "state_hash": p.engine.state_hash().hex() if p else "",
            "grpc_port": self.port,
            "txlog_port": self.txlog_port,
            "replayed_blocks": self.replayed,
            "blocks": self.blocks,
            "block_time_us": self.block_time.summary_us(),
            "block_close_us": self.close_time.summary_us(),
            "block_txs": self.block_txs.summary_us(scale_ns=False),
            "hub": dataclasses.asdict(self.hub.statistics()) if self.hub else {},
        }


class SequencerActor:
    """Ray shell around :class:`SequencerService` (wrap with ``ray.remote``; see ``deploy``).

    Starts as soon as it is created *and whenever Ray restarts it* (the start task is scheduled
    from ``__init__``): it recovers from the newest snapshot plus the WAL, so a crash loses nothing
    acknowledged, and reopens the data plane on its configured ports.
    """

    def __init__(self, config: SequencerConfig, bundle: Any = None, gc_spec: Any = None) -> None:
        self.service = SequencerService(config)
        self.runtime = ActorRuntime(bundle, gc_spec)
        self._started = asyncio.get_event_loop().create_task(self._start())

    async def _start(self) -> int:
        self.runtime.before_boot()
        port = await self.service.start()
        self.runtime.after_boot(self.service.metrics)
        return port

    async def _ensure_started(self) -> SequencerService:
        await self._started
        return self.service

    async def start(self) -> dict[str, Any]:
        svc = await self._ensure_started()
        return svc.status()

    async def operator(self, txs: list[Any]) -> list[TxOutcome]:
        """Operator commands (deposits, markets, oracle, funding, key registration)."""
        svc = await self._ensure_started()
        return await svc.submit(txs, operator=True)

    async def submit(self, frame: bytes) -> bytes:
        """The Ray-call transport's tx handler (the gRPC stream is the default data path)."""
        svc = await self._ensure_started()
        return await svc.handle_batch(frame)

    async def status(self) -> dict[str, Any]:
        svc = await self._ensure_started()
        return {**svc.status(), **self.runtime.status(), "address": advertised_host()}

    async def stop(self) -> None:
        await self._started
        await self.service.stop()
