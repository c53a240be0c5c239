"""The API replica: boots hot from a snapshot, applies the block stream, serves REST + WebSocket.

::

    snapshot holder ──latest_snapshot (Arrow, zero-copy on the node)──┐
                    ──blocks_since(seq) when the sequencer's ring     │ boot / resync
                      no longer holds what we need                    ▼
    sequencer ──gRPC Blocks stream──► apply loop: ReplicaState.apply_block ─► Fanout (WS)
              ◄──gRPC Txs stream──── MicroBatcher (one batch in flight) ◄── sendTx / WS txs
                                                    ▲
    clients ──HTTP/WS (SO_REUSEPORT: replicas on one host share the port)──► aiohttp app

``ReplicaService`` is the asyncio core (tested without Ray: it takes plain callables for the
snapshot and catch-up reads); ``ReplicaActor`` is the Ray shell that wires those to the snapshot
holder actor, pins the replica's threads to its bundle's cores and reports its placement.

Invariants:
- No request is served before the caches are complete: the HTTP site opens after the boot.
- The hot path never reads over the network: REST and WS answer from ``ReplicaState``; the only
  remote calls are the data-plane streams and, on a gap, the catch-up.
- Blocks are applied in seq order exactly once (the source drops duplicates; ``apply_block``
  ignores replays and raises on a gap, which triggers a catch-up).
- ``submit`` returns only after the block holding the txs has been applied here, so a client that
  got its answer reads its own writes from this replica.

Metrics (``ReplicaService.metrics``, observability/metrics.py; exported by the actor shell):
apply time, engine -> send delay of book updates, tx lifecycle per tx type (submit -> sequenced
-> confirmed here), dry-run time, cache hits/fallbacks, WS connections, queue depth, conflations,
slow-consumer drops, seq and lag. Hot-path cost: a few ``Histogram.record`` per block and two per
submitted tx.

Knobs: ``max_batch_txs`` caps one micro-batch (larger: fewer round trips under load; a burst
waits behind at most one batch).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from aiohttp import web

from raydex.codecs import (
    DEFAULT_CHAIN_ID,
    ResultCode,
    TxOutcome,
    TxType,
    Verifier,
    decode_outcomes,
    encode_batch,
    tables_to_records,
    tx_type_of,
)
from raydex.observability.hist import Histogram
from raydex.observability.metrics import Recorder

from ..runtime import ActorRuntime
from ..transport import (
    GrpcBlockSource,
    GrpcTxChannel,
    ResyncRequired,
    TransportError,
    TransportUnavailable,
    TxChannel,
)
from .app import COUNTERS, ApiError, CommitmentSource, build_app, fanout_of
from .config import ApiConfig
from .state import GapError, ReplicaState

log = logging.getLogger(__name__)

#: ``() -> (seq, height, {table name: pa.Table})``: the newest snapshot
FetchSnapshot = Callable[[], Awaitable[tuple[int, int, dict[str, pa.Table]]]]
#: ``(seq) -> (holder's last seq, [(seq, frame), ...])``: delta blocks after ``seq``
FetchBlocks = Callable[[int], Awaitable[tuple[int, list[tuple[int, bytes]]]]]


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    name: str
    sequencer_target: str
    http_host: str = "127.0.0.1"
    http_port: int = 0
    reuse_port: bool = True
    chain_id: int = DEFAULT_CHAIN_ID
    max_batch_txs: int = 500
    api: ApiConfig = field(default_factory=ApiConfig)
    #: the replica group (a metrics label; A/B runs compare groups); "" = from ``name`` when it
    #: follows deploy's ``raydex-replica-<group>-<i>``, else "replica"
    group: str = ""


class MicroBatcher:
    """Coalesces concurrent submissions into batches, with at most one batch in flight: what
    arrives while a batch is out rides the next one."""

    def __init__(self, channel: TxChannel, max_batch_txs: int) -> None:
        self.channel = channel
        self.max_batch_txs = max_batch_txs
        self._queue: list[tuple[list[Any], asyncio.Future[list[TxOutcome]]]] = []
        self._task: asyncio.Task[None] | None = None
        self.batches = 0
        self.txs = 0

    async def submit(self, txs: list[Any]) -> list[TxOutcome]:
        fut: asyncio.Future[list[TxOutcome]] = asyncio.get_running_loop().create_future()
        self._queue.append((txs, fut))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        return await fut

    async def _run(self) -> None:
        while self._queue:
            batch: list[tuple[list[Any], asyncio.Future[list[TxOutcome]]]] = []
            n = 0
            while self._queue and (not batch or n + len(self._queue[0][0]) <= self.max_batch_txs):
                item = self._queue.pop(0)
                batch.append(item)
                n += len(item[0])
            txs = [tx for part, _ in batch for tx in part]
            try:
                reply = await self.channel.submit(encode_batch(txs))
                outcomes = [TxOutcome._make(o) for o in decode_outcomes(reply)]
            except TransportError as exc:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(
                            ApiError(
                                int(ResultCode.SEQUENCER_UNAVAILABLE),
                                f"sequencer unavailable ({type(exc).__name__}); the tx may "
                                "still execute: look it up by hash",
                                503,
                            )
                        )
                continue
            self.batches += 1
            self.txs += len(txs)
            at = 0
            for part, fut in batch:
                if not fut.done():
                    fut.set_result(outcomes[at : at + len(part)])
                at += len(part)


class ReplicaService:
    """Asyncio core of one API replica (see module docstring)."""

    def __init__(
        self,
        config: ReplicaConfig,
        fetch_snapshot: FetchSnapshot,
        fetch_blocks: FetchBlocks,
        channel: TxChannel | None = None,
        commitments: CommitmentSource | None = None,
    ) -> None:
        self.config = config
        self.commitments = commitments
        self.fetch_snapshot = fetch_snapshot
        self.fetch_blocks = fetch_blocks
        self.verifier = Verifier(config.chain_id)
        self.state = ReplicaState(self.verifier)
        self.channel = channel or GrpcTxChannel(config.sequencer_target)
        self.batcher = MicroBatcher(self.channel, config.max_batch_txs)
        self.source = GrpcBlockSource(config.sequencer_target, name=config.name)
        self.app: web.Application | None = None
        self.runner: web.AppRunner | None = None
        self.port = 0
        self.direct_port = 0
        self._apply_task: asyncio.Task[None] | None = None
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._waiter_id = 0
        self.boots = 0
        self.resyncs = 0
        self.catch_ups = 0
        #: hot-path apply per block: decode, cache update, fan-out (ns)
        self.apply_time = Histogram()
        self.blocks_applied = 0
        #: newest seq known to exist (stream frames, the holder's catch-up answers)
        self.seen_seq = 0
        self.metrics = Recorder("replica", config.name, group=_group_of(config))
        m = self.metrics
        m.histogram("raydex_apply_seconds", self.apply_time)
        m.counter_fn("raydex_blocks_total", lambda: self.blocks_applied)
        m.gauge("raydex_block_seq", lambda: self.state.seq)
        m.gauge("raydex_replica_lag_blocks", lambda: max(0, self.seen_seq - self.state.seq))
        self.publish_delay = m.histogram("raydex_book_publish_delay_seconds")
        self._sequenced = m.histogram_family(
            "raydex_tx_lifecycle_seconds", "tx_type", stage="sequenced"
        )
        self._confirmed = m.histogram_family(
            "raydex_tx_lifecycle_seconds", "tx_type", stage="confirmed"
        )

    # ---- boot -----------------------------------------------------------------------------------

    async def _boot(self) -> None:
        seq, height, tables = await self.fetch_snapshot()
        fresh = ReplicaState.from_records(tables_to_records(tables), seq, height, self.verifier)
        self.state.reload(fresh)
        self.boots += 1
        await self._catch_up()

    async def _catch_up(self) -> None:
        """Apply the holder's ring until it has nothing newer (rebooting if it lost our seq)."""
        while True:
            try:
                last, frames = await self.fetch_blocks(self.state.seq)
            except ResyncRequired:
                seq, height, tables = await self.fetch_snapshot()
                records = tables_to_records(tables)
                self.state.reload(ReplicaState.from_records(records, seq, height, self.verifier))
                self.resyncs += 1
                continue
            self.seen_seq = max(self.seen_seq, last)
            for _, frame in frames:
                self._apply(frame)
            self.catch_ups += 1
            if not frames or self.state.seq >= last:
                return

    async def start(self) -> int:
        """Boot from the snapshot, catch up, start the apply loop, then open the HTTP port."""
        await self._boot()
        loop = asyncio.get_running_loop()
        self._apply_task = loop.create_task(self._apply_loop())
        self.app = build_app(self.state, self.submit, self.config.api, self.commitments)
        self._export_app(self.app)
        self.runner = web.AppRunner(self.app, handle_signals=False, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(
            self.runner,
            self.config.http_host,
            self.config.http_port,
            reuse_port=self.config.reuse_port,
        )
        await site.start()
        self.port = _bound_port(site) or self.config.http_port
        # A private port per replica, so an operator (or a test) can reach this very instance.
        direct = web.TCPSite(self.runner, self.config.http_host, 0)
        await direct.start()
        self.direct_port = _bound_port(direct)
        return self.port

    async def stop(self) -> None:
        if self._apply_task is not None:
            self._apply_task.cancel()
            await asyncio.gather(self._apply_task, return_exceptions=True)
        if self.runner is not None:
            await self.runner.cleanup()
        await self.source.close()
        await self.channel.close()

    # ---- the hot path ---------------------------------------------------------------------------

    def _export_app(self, app: web.Application) -> None:
        m = self.metrics
        counters = app[COUNTERS]
        fan = fanout_of(app)
        m.histogram("raydex_dry_run_seconds", counters.dry_run)
        m.counter_fn("raydex_cache_hits_total", lambda: counters.cache_hits)
        m.counter_fn("raydex_cache_fallbacks_total", lambda: counters.cache_fallbacks)
        m.gauge("raydex_ws_connections", lambda: len(fan.clients))
        m.gauge("raydex_ws_queue_depth_messages", lambda: fan.stats().max_queue_depth)
        m.counter_fn("raydex_ws_conflations_total", lambda: fan.conflations)
        m.counter_fn("raydex_ws_slow_disconnects_total", lambda: fan.disconnects)

    def _apply(self, frame: bytes) -> None:
        t0 = time.perf_counter_ns()
        applied = self.state.apply_block(frame)
        if self.app is not None and not applied.duplicate:
            fanout_of(self.app).publish(applied)
            if applied.books:
                self.publish_delay.record(time.time_ns() - applied.timestamp_ns)
        self.apply_time.record(time.perf_counter_ns() - t0)
        self.blocks_applied += 1
        seq = self.state.seq
        waiters = self._waiters
        while waiters and waiters[0][0] <= seq:
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(None)

    async def _apply_loop(self) -> None:
        while True:
            try:
                async for seq, frame in self.source.subscribe(self.state.seq + 1):
                    if seq > self.seen_seq:
                        self.seen_seq = seq
                    self._apply(frame)
            except (ResyncRequired, GapError) as exc:
                log.info(
                    "replica %s: %s; catching up from the snapshot holder", self.config.name, exc
                )
                before = self.state.seq
                await self._catch_up()
                if self.state.seq == before:
                    # Neither the sequencer's ring nor the holder has our next block yet (e.g. the
                    # holder is itself catching up after a sequencer restart): wait, don't spin.
                    await asyncio.sleep(0.2)
            except TransportUnavailable as exc:
                log.warning(
                    "replica %s: sequencer unreachable (%s); retrying", self.config.name, exc
                )
                await asyncio.sleep(0.5)

    async def _applied(self, seq: int) -> None:
        if self.state.seq >= seq:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiter_id += 1
        heapq.heappush(self._waiters, (seq, self._waiter_id, fut))
        await fut

    async def submit(self, txs: list[Any]) -> list[TxOutcome]:
        """The app's ``submit``: micro-batched to the sequencer; returns once applied here."""
        t0 = time.perf_counter_ns()
        outcomes = await self.batcher.submit(txs)
        t1 = time.perf_counter_ns()
        top = max((o.seq for o in outcomes), default=0)
        await self._applied(top)
        t2 = time.perf_counter_ns()
        for tx in txs:
            kind = _type_tag(tx)
            self._sequenced.get(kind).record(t1 - t0)
            self._confirmed.get(kind).record(t2 - t0)
        return outcomes

    # ---- control plane --------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        st = self.state
        fan = fanout_of(self.app).stats() if self.app is not None else None
        return {
            "name": self.config.name,
            "pid": os.getpid(),
            "port": self.port,
            "direct_port": self.direct_port,
            "seq": st.seq,
            "height": st.height,
            "state_hash": st.state_hash().hex(),
            "boots": self.boots,
            "resyncs": self.resyncs,
            "catch_ups": self.catch_ups,
            "blocks_applied": self.blocks_applied,
            "apply_us": self.apply_time.summary_us(),
            "batches": self.batcher.batches,
            "batched_txs": self.batcher.txs,
            "reconnects": self.source.reconnects,
            "ws": None
            if fan is None
            else {
                "connections": fan.connections,
                "conflations": fan.conflations,
                "disconnects": fan.disconnects,
            },
        }


def _group_of(config: ReplicaConfig) -> str:
    if config.group:
        return config.group
    head, _, index = config.name.removeprefix("raydex-replica-").rpartition("-")
    return head if head and index.isdigit() else "replica"


_TYPE_TAGS: dict[type, str] = {}
_TX_CODES = frozenset(int(t) for t in TxType)


def _type_tag(tx: Any) -> str:
    """``tx_type`` label of a tx: its TxType name in lower case (``create_order``)."""
    cls = type(tx)
    tag = _TYPE_TAGS.get(cls)
    if tag is None:
        code = tx_type_of(cls)
        tag = TxType(code).name.lower() if code in _TX_CODES else str(code)
        _TYPE_TAGS[cls] = tag
    return tag


def _bound_port(site: web.TCPSite) -> int:
    sockets = getattr(site._server, "sockets", None) or []
    return int(sockets[0].getsockname()[1]) if sockets else 0


class ReplicaActor:
    """Ray shell around :class:`ReplicaService` (wrap with ``ray.remote``).

    Boots from the snapshot holder's newest Arrow snapshot (``ray.get`` of the tables it owns:
    zero-copy on the same node), catches up through its ``blocks_since`` long poll, then follows
    the sequencer's gRPC block stream. ``bundle`` (a ``BundlePlacement``) pins every thread to its
    cores once the service has started its threads.
    """

    def __init__(
        self,
        config: ReplicaConfig,
        holder_name: str,
        namespace: str,
        bundle: Any = None,
        committer_name: str | None = None,
        gc_spec: Any = None,
    ) -> None:
        self.config = config
        self.runtime = ActorRuntime(bundle, gc_spec)
        self.committer_name = committer_name
        self.holder_name = holder_name
        self.namespace = namespace
        self.service: ReplicaService | None = None
        # booted from __init__: also after Ray restarts a crashed replica
        self._started = asyncio.get_event_loop().create_task(self._start())

    def _holder(self) -> Any:
        import ray

        return ray.get_actor(self.holder_name, namespace=self.namespace)

    async def _fetch_snapshot(self) -> tuple[int, int, dict[str, pa.Table]]:
        seq, height, refs = await self._holder().latest_snapshot.remote()
        tables = {name: await ref for name, ref in refs.items()}
        return seq, height, tables

    async def _fetch_blocks(self, seq: int) -> tuple[int, list[tuple[int, bytes]]]:
        result: tuple[int, list[tuple[int, bytes]]] = await self._holder().blocks_since.remote(
            seq, 1000, 0.05
        )
        return result

    async def commitment(self, height: int) -> dict[str, Any] | None:
        """CommitmentSource for ``GET block``: asks the committer actor (not a hot path)."""
        found: dict[str, Any] | None = await self._committer().commitment.remote(height)
        return found

    async def latest(self, limit: int) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = await self._committer().latest.remote(limit)
        return found

    def _committer(self) -> Any:
        import ray

        assert self.committer_name is not None, "no committer configured"
        return ray.get_actor(self.committer_name, namespace=self.namespace)

    async def _start(self) -> int:
        self.runtime.before_boot()
        self.service = ReplicaService(
            self.config,
            self._fetch_snapshot,
            self._fetch_blocks,
            commitments=self if self.committer_name else None,
        )
        port = await self.service.start()
        self.runtime.after_boot(self.service.metrics)
        return port

    async def start(self) -> dict[str, Any]:
        """Wait for the boot; the replica's status."""
        await self._started
        return await self.status()

    async def status(self) -> dict[str, Any]:
        if self.service is None:
            return {"name": self.config.name, "booting": True}
        return {**self.service.status(), **self.runtime.status()}

    async def drain(self) -> None:
        """Before removal: close the port (the host's other replicas keep serving it), tell WS
        clients to go away (they reconnect through the shared port), stop the streams."""
        if self.service is not None:
            await self.service.stop()

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.stop()
