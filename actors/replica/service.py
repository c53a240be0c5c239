"""The API replica: boots hot from a snapshot, applies the block stream, serves REST + WebSocket.

::

    snapshot holder ──latest_snapshot (Arrow, zero-copy on the node)──┐
                    ──blocks_since(seq) when the sequencer's ring     │ boot / resync
                      no longer holds what we need                    ▼
    sequencer ──Blocks stream (data plane)──► apply loop: decode ─► cache: ReplicaState.apply_block
              │                                                 ─► ws: Fanout.publish ─► clients
              ◄──Txs stream──── batching: MicroBatcher ◄── execute_txs
                                                    ▲
    clients ──HTTP/WS──► app: build_app (http: reads, tx submission; ws: /stream)
             shared port (SO_REUSEPORT: the host's replicas, only those caught up)
             direct port (this replica only, always)

``ReplicaService`` is the asyncio core (tested without Ray: the snapshot and catch-up reads are
plain callables); it owns the caches, the fan-out, the counters, the micro-batcher and the ports.
``ReplicaActor`` is the Ray shell: it wires those reads to the snapshot holder, pins the threads.

Invariants:
- Nothing is served before the boot completed the caches (the direct port opens after it).
- The shared port is open only while caught up: joined within ``api.join_lag_blocks`` of the
  newest seq known to exist (``seen_seq``), left beyond ``api.leave_lag_blocks`` (the direct
  port stays), so its clients never meet a stale replica.
- Blocks are applied in seq order exactly once; a gap triggers a catch-up. The hot path never
  reads over the network: the only remote calls are the data-plane streams and the catch-up.
- ``execute_txs`` returns once the block holding the txs is applied here (a client reads its own
  writes), or raises ApiError 21822 (HTTP 503) after ``api.outcome_timeout_s``: never a hang.

Measurement plugs in through ``ReplicaHooks`` (hooks.py; production runs without). Metrics
(``ReplicaService.metrics``): apply time, book publish delay, tx lifecycle, dry-run time, cache
hits, WS queues and drops, seq and lag; a few ``Histogram.record`` per block and two per tx.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import heapq
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
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
    decode_block,
    signing,
    tables_to_records,
    tx_type_of,
)
from raydex.observability.hist import Histogram
from raydex.observability.logbudget import LogBudget
from raydex.observability.metrics import ApiCounters, Recorder

from ..runtime import (
    ActorRuntime,
    HeldBlocks,
    PrimaryTargets,
    PrimaryWatch,
    RecentBlocks,
    Supervisor,
    exit_process,
    held_blocks,
    log_fatal,
    short_hash,
)
from ..runtime.checks import COMPARE_INTERVAL_S, StateChecks
from ..transport import (
    Link,
    ResyncRequired,
    TransportUnavailable,
    TxChannel,
    block_source,
    retarget,
    tx_channel,
)
from .app import ADMISSION, FAST_SEND, LIMITS, build_app
from .batching import MicroBatcher
from .cache import GapError, ReplicaState
from .deadlines import Deadlines
from .hooks import ReplicaHooks
from .http import (
    KEEPALIVE_S,
    REASONS,
    ApiConfig,
    CommitmentSource,
    ConnectionCaps,
    FastLaneServer,
    LoopLag,
    OpenConnections,
    OutcomePending,
    bad_requests,
    json_error_protocols,
)
from .ws import NATIVE_PATHS, Fanout

log = logging.getLogger(__name__)

#: ``accept`` errors that mean the process (or the host) is out of descriptors or buffers
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

#: quiet time (no block applied) after which ``status`` recomputes the state hash (s)
HASH_QUIET_S = 0.1

#: ``() -> (seq, height, {table name: pa.Table})``: the newest snapshot
FetchSnapshot = Callable[[], Awaitable[tuple[int, int, dict[str, pa.Table]]]]
#: ``(seq) -> (holder's last seq, [(seq, frame), ...])``: delta blocks after ``seq``
FetchBlocks = Callable[[int], Awaitable[tuple[int, list[tuple[int, bytes]]]]]
#: ``snapshot seq -> the market tape as of it`` (``actors/snapshot/tape.py``), None: none kept
FetchTrades = Callable[[int], Awaitable[Sequence[Any] | None]]


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    name: str
    sequencer_target: str
    http_host: str = "127.0.0.1"
    http_port: int = 0
    reuse_port: bool = True
    chain_id: int = DEFAULT_CHAIN_ID
    #: txs in one micro-batch at most (larger: fewer round trips under load; a burst waits
    #: behind at most the batches in flight)
    max_batch_txs: int = 500
    #: micro-batches out to the sequencer at once (``MicroBatcher``; 1 on the Ray plane, and
    #: the sequencer reads at most 4 per stream): 2 lets what arrives during a block's WAL sync
    #: reach the open block, so blocks are smaller and come sooner; 1 makes one round trip per
    #: block (bigger blocks, less CPU per tx)
    max_batches_in_flight: int = 2
    api: ApiConfig = field(default_factory=ApiConfig)
    #: the replica group (a metrics label; A/B runs compare groups); "" = from ``name`` when it
    #: follows deploy's ``raydex-replica-<group>-<i>``, else "replica"
    group: str = ""
    #: Busy-poll the event loop (never park; ``actors/runtime/shell.py``): less wake-up latency
    #: per request and block, one whole core burnt; only where each replica has a core of its own.
    busy_poll: bool = False
    #: the deployment's data-plane secret (``raydex deploy``; never in raydex.yaml)
    data_plane_secret: str = field(default="", repr=False)
    #: hash the state after every block whose seq is a multiple of this, to compare with the
    #: snapshot holder's (``actors/runtime/checks.py``); the spec sets the holder's value here
    state_check_blocks: int = 1000


def _answer(fut: asyncio.Future[bool], value: bool) -> None:
    if not fut.done():
        fut.set_result(value)


def _answer_false(fut: asyncio.Future[bool]) -> None:
    _answer(fut, False)


class ReplicaService:
    """Asyncio core of one API replica (see module docstring)."""

    def __init__(
        self,
        config: ReplicaConfig,
        fetch_snapshot: FetchSnapshot,
        fetch_blocks: FetchBlocks,
        channel: TxChannel | None = None,
        commitments: CommitmentSource | None = None,
        hooks: ReplicaHooks | None = None,
        on_fatal: Callable[[str], None] = log_fatal,
        fetch_trades: FetchTrades | None = None,
    ) -> None:
        self.config = config
        #: the holder's market tape as of a snapshot seq (None: boots without one)
        self.fetch_trades = fetch_trades
        self.commitments = commitments
        self.hooks = hooks if hooks is not None else ReplicaHooks()
        self.fetch_snapshot = fetch_snapshot
        self.fetch_blocks = fetch_blocks
        self.verifier = Verifier(config.chain_id)
        self.state = ReplicaState(self.verifier)
        #: WebSocket subscribers; the apply loop publishes every applied block here
        self.fanout = Fanout(self.state, config.api)
        #: what the app's handlers count (cache hits/fallbacks, dry-run time)
        self.counters = ApiCounters()
        secret = config.data_plane_secret
        self.channel = channel or tx_channel(config.sequencer_target, secret=secret)
        self.batcher = MicroBatcher(
            self.channel, config.max_batch_txs, config.chain_id, config.max_batches_in_flight
        )
        self.loop_lag = LoopLag()
        self.source = block_source(config.sequencer_target, name=config.name, secret=secret)
        self.app: web.Application | None = None
        self.runner: web.AppRunner | None = None
        #: the shared (SO_REUSEPORT) port; its site is open only while caught up
        self.port = 0
        self._shared: asyncio.AbstractServer | None = None
        #: the door in front of the app: every connection's caps and head deadline
        #: (``http/gate.py``), then the fast lane (``api.fast_lane``) or aiohttp; its listeners
        api = config.api
        self.gate = OpenConnections(
            ConnectionCaps(
                api.http_max_connections,
                api.http_max_connections_per_ip,
                api.rate_limit_exempt,
                api.http_head_timeout_s,
            )
        )
        self.lane: FastLaneServer | None = None
        #: accept() failures for want of descriptors (the gate's cap keeps them away)
        self.accept_errors = LogBudget(log)
        self._listeners: list[asyncio.AbstractServer] = []
        self.port_joins = 0
        self.port_leaves = 0
        self.direct_port = 0
        #: event-loop time the block stream was last (re)opened, None while it is not open (a
        #: stream that has stayed open a check interval has not told us we are behind)
        self._stream_since: float | None = None
        #: apply-loop runs so far (a run after the first follows a failure: it resyncs first)
        self._apply_runs = 0
        #: event-loop time the last block was applied; the state hash in ``status`` (see there)
        self._applied_at = 0.0
        #: quiet time after which ``status`` hashes again (s); see ``status``
        self.hash_quiet_s = HASH_QUIET_S
        self._waiters: list[tuple[int, int, asyncio.Future[bool]]] = []
        #: a ledger fold is scheduled on the loop (one per burst of blocks)
        self._fold_scheduled = False
        self._waiter_id = 0
        #: answers a waiter False at its deadline (deadlines.py)
        self._apply_deadlines: Deadlines[asyncio.Future[bool]] = Deadlines(_answer_false)
        self.boots = 0
        self.resyncs = 0
        self.catch_ups = 0
        #: answers 21822 because the block of sequenced txs was not applied here in time
        self.apply_timeouts = 0
        #: hot-path apply per block: decode, cache update, fan-out (ns)
        self.apply_time = Histogram()
        #: the same on this thread's CPU clock (CLOCK_THREAD_CPUTIME_ID): wall minus this is time
        #: the apply waited off the CPU, i.e. the kernel ran another process on this core
        self.apply_cpu_time = Histogram()
        self.blocks_applied = 0
        #: the newest block frames applied here, for a sequencer repairing its log
        #: (``held_blocks``; ``actors/runtime/held.py``)
        self.recent = RecentBlocks()
        #: newest seq known to exist (stream frames, the holder's catch-up answers, the floor of
        #: a publisher's ring that no longer holds our next block)
        self.seen_seq = 0
        #: (seq, state hash hex) last computed (see ``state_hash``)
        self._digest: tuple[int, str] = (-1, "")
        #: the state hashed at every checkpoint seq, and the last comparison with the holder's
        self.checks = StateChecks(config.state_check_blocks)
        self.metrics = Recorder("replica", config.name, group=_group_of(config))
        m = self.metrics
        m.histogram("raydex_apply_seconds", self.apply_time)
        m.histogram("raydex_apply_cpu_seconds", self.apply_cpu_time)
        m.counter_fn("raydex_blocks_total", lambda: self.blocks_applied)
        m.gauge("raydex_block_seq", lambda: self.state.seq)
        m.gauge(
            "raydex_signing_info",
            lambda: 1.0,
            backend=signing.BACKEND,
            accelerated=str(signing.ACCELERATED).lower(),
        )
        m.gauge(
            "raydex_replica_native_info",
            lambda: 1.0,
            **{loop: str(runs).lower() for loop, runs in NATIVE_PATHS.items()},
        )
        m.gauge("raydex_replica_lag_blocks", self.lag)
        checks = self.checks
        m.gauge("raydex_state_check_seq", checks.latest_seq)
        m.counter_fn("raydex_state_divergences_total", lambda: checks.divergences)
        self.publish_delay = m.histogram("raydex_book_publish_delay_seconds")
        self._sequenced = m.histogram_family(
            "raydex_tx_lifecycle_seconds", "tx_type", stage="sequenced"
        )
        self._confirmed = m.histogram_family(
            "raydex_tx_lifecycle_seconds", "tx_type", stage="confirmed"
        )
        counters, fan = self.counters, self.fanout
        m.histogram("raydex_dry_run_seconds", counters.dry_run)
        m.counter_fn("raydex_cache_hits_total", lambda: counters.cache_hits)
        m.counter_fn("raydex_cache_fallbacks_total", lambda: counters.cache_fallbacks)
        m.counter_fn("raydex_overload_refusals_total", self._refusals)
        m.gauge("raydex_queue_delay_seconds", self.queue_delay)
        m.gauge("raydex_ws_connections", lambda: len(fan.clients))
        m.gauge("raydex_ws_queue_depth_messages", lambda: fan.stats().max_queue_depth)
        m.counter_fn("raydex_ws_conflations_total", lambda: fan.conflations)
        m.counter_fn("raydex_ws_slow_disconnects_total", lambda: fan.disconnects)
        m.counter_fn("raydex_ws_messages_total", lambda: fan.messages)
        m.counter_fn("raydex_ws_socket_writes_total", lambda: fan.writes)
        m.counter_fn("raydex_fastlane_requests_total", lambda: self.lane.served if self.lane else 0)
        m.counter_fn(
            "raydex_fastlane_handoffs_total", lambda: self.lane.handoffs if self.lane else 0
        )
        gate = self.gate
        m.gauge("raydex_http_connections", lambda: gate.open)
        for reason in REASONS:
            m.counter_fn(
                "raydex_http_refusals_total", lambda r=reason: gate.refused[r], reason=reason
            )
        m.counter_fn("raydex_http_bad_requests_total", bad_requests)
        m.counter_fn("raydex_http_accept_errors_total", lambda: self.accept_errors.total["accept"])
        #: the apply loop and the port loop; a failure is logged, counted
        #: (``raydex_loop_restarts_total{loop}``) and the loop restarted; too many exit the actor
        self.supervisor = Supervisor(m, on_fatal)

    def queue_delay(self) -> float:
        """The overload door's signal (admission.py): how long a tx arriving now can expect to
        wait before it reaches the sequencer: this event loop's lag (requests waiting in its
        sockets) plus the micro-batcher's delay (the queue to the sequencer)."""
        return self.loop_lag.now() + self.batcher.delay()

    def _refusals(self) -> int:
        door = self.app[ADMISSION] if self.app is not None else None
        return 0 if door is None else door.refused + door.refused_behind

    def overload_stats(self) -> dict[str, float]:
        """The door's refusals (admission.py), txs answered unsent behind a dropped one of
        their key, and the queueing delay now (ms)."""
        door = self.app[ADMISSION].stats() if self.app is not None else {}
        return {**door, "dropped_behind": self.batcher.dropped_behind,
                "queue_delay_ms": round(1000 * self.queue_delay(), 1)}  # fmt: skip

    def lag(self) -> int:
        """Blocks between the newest seq known to exist (``seen_seq``: stream frames, the
        holder's answers, the seqs of the sequencer's outcomes to our own batches) and the one
        applied here. Measured here, at the follower, so it is never negative and never mixes
        two actors' clocks (``raydex_replica_lag_blocks``)."""
        return max(0, self.seen_seq - self.state.seq)

    # ---- boot -----------------------------------------------------------------------------------

    async def _load_snapshot(self) -> int:
        """Replace the caches with the holder's newest snapshot; its seq."""
        seq, height, tables = await self.fetch_snapshot()
        fresh = ReplicaState.from_records(tables_to_records(tables), seq, height, self.verifier)
        if self.fetch_trades is not None:  # the tape as of the snapshot: the same recentTrades
            fresh.seed_trades(await self.fetch_trades(seq) or ())
        self.state.reload(fresh)
        self.checks.forget_after(seq)  # hashes of a state after this one are not ours any more
        return seq

    async def _boot(self) -> None:
        await self._load_snapshot()
        self.boots += 1
        await self._catch_up()

    async def _catch_up(self) -> None:
        """Apply the holder's ring until it has nothing newer (rebooting if it lost our seq)."""
        while True:
            try:
                last, frames = await self.fetch_blocks(self.state.seq)
            except ResyncRequired:
                await self._load_snapshot()
                self.resyncs += 1
                continue
            await self._saw(last)
            for _, frame in frames:
                self._apply(frame)
            self.catch_ups += 1
            if not frames or self.state.seq >= last:
                return
            await asyncio.sleep(0)  # let requests and the port check run between batches

    async def start(self) -> int:
        """Boot from the snapshot and catch up, start the apply loop, open the direct port, and
        join the shared port once caught up (at once if the boot left it within the lag)."""
        await self._boot()
        self.supervisor.start("apply", self._apply_loop)
        self.supervisor.start("loop_lag", self.loop_lag.run)
        state = self.state
        self.supervisor.start(
            "checks", lambda: self.checks.run_quiet(lambda: state.seq, state.records)
        )
        self.app = build_app(
            self.state,
            self.execute_txs,
            self.fanout,
            counters=self.counters,
            config=self.config.api,
            commitments=self.commitments,
            hooks=self.hooks,
            queue_delay=self.queue_delay,
        )
        # aiohttp's keep-alive: the wait for a next request on a connection it took over (a
        # trickling head included: its timer is not reset by a byte)
        self.runner = web.AppRunner(
            self.app, handle_signals=False, access_log=None, keepalive_timeout=KEEPALIVE_S
        )
        await self.runner.setup()
        assert self.runner.server is not None
        self.lane = FastLaneServer(
            json_error_protocols(self.runner.server),
            self.app[FAST_SEND],
            self.config.api.max_body_bytes,
            self.hooks.request_span,
            gate=self.gate,
            serve=self.config.api.fast_lane,
        )
        self._quiet_accept_errors()
        # A private port per replica, so an operator (or a test) can reach this very instance,
        # also while it is off the shared port.
        _, self.direct_port = await self._listen(0, reuse_port=False)
        # The first decision waits one check interval, so a block stream that cannot serve our
        # next seq (the publisher's ring moved past a stale snapshot) has told us so by then.
        await asyncio.sleep(self.config.api.port_check_interval_s)
        await self._update_port()
        self.supervisor.start("port", self._port_loop)
        return self.port

    async def stop(self) -> None:
        await self.supervisor.stop()
        for server in self._listeners:
            server.close()
        if self.lane is not None:
            self.lane.close()
        if self.runner is not None:
            await self.runner.cleanup()
        self._shared = None
        await self.source.close()
        await self.channel.close()

    # ---- the shared port ------------------------------------------------------------------------

    @property
    def serving(self) -> bool:
        """On the shared port (new connections to it may land here)."""
        return self._shared is not None

    async def _saw(self, seq: int) -> None:
        """``seq`` is known to exist: leave the shared port at once if that puts us too far
        behind."""
        if seq > self.seen_seq:
            self.seen_seq = seq
            if self._shared is not None and self.lag() > self.config.api.leave_lag_blocks:
                await self._update_port()

    def _caught_up(self) -> bool:
        """Within ``join_lag_blocks`` of the newest seq we know of, following a block stream that
        has been open a whole check interval without telling us we are behind."""
        api = self.config.api
        since = self._stream_since
        return (
            self.runner is not None
            and since is not None
            and asyncio.get_running_loop().time() - since >= api.port_check_interval_s
            and self.lag() <= api.join_lag_blocks
        )

    async def _update_port(self) -> None:
        """Join the shared port when caught up (``_caught_up``); leave it beyond
        ``leave_lag_blocks`` (connections already accepted stay; the direct port stays)."""
        api = self.config.api
        lag = self.lag()
        site = self._shared
        if site is None:
            if self.runner is not None and self._caught_up():
                site, bound = await self._listen(
                    self.port or self.config.http_port, self.config.reuse_port
                )
                self._shared = site
                self.port = bound or self.config.http_port
                self.port_joins += 1
                log.info("replica %s: on the shared port %d (lag %d)", self.config.name,
                         self.port, lag)  # fmt: skip
        elif lag > api.leave_lag_blocks:
            self._shared = None
            site.close()  # stops accepting; its connections stay
            self._listeners.remove(site)
            self.port_leaves += 1
            log.warning("replica %s: %d blocks behind; off the shared port until caught up",
                        self.config.name, lag)  # fmt: skip

    def _quiet_accept_errors(self) -> None:
        """asyncio logs a traceback for every ``accept`` that fails for want of descriptors
        ("Too many open files"); the gate's cap keeps the process below its file limit, and
        what still fails (another part of the process took the descriptors) is counted and
        logged within a budget instead (``raydex_http_accept_errors_total``)."""
        loop = asyncio.get_running_loop()
        previous = loop.get_exception_handler()

        def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            exc = context.get("exception")
            if isinstance(exc, OSError) and exc.errno in _OUT_OF_DESCRIPTORS:
                self.accept_errors.warning(
                    "accept", "replica HTTP: %s (%r); open connections %d of %d",
                    context.get("message"), exc, self.gate.open, self.gate.max_total,
                )  # fmt: skip
                return
            if previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        loop.set_exception_handler(handle)

    async def _listen(self, port: int, reuse_port: bool) -> tuple[asyncio.AbstractServer, int]:
        """A listening socket on ``port`` (0: any) for the app, through the door (the lane);
        with the port it got."""
        host = self.config.http_host
        loop = asyncio.get_running_loop()
        assert self.lane is not None, "start() builds the door first"
        server = await loop.create_server(self.lane, host, port, reuse_port=reuse_port or None)
        self._listeners.append(server)
        return server, server.sockets[0].getsockname()[1]

    async def _port_loop(self) -> None:
        """Control plane: re-check the shared port every ``port_check_interval_s``."""
        while True:
            await asyncio.sleep(self.config.api.port_check_interval_s)
            try:
                await self._update_port()
            except OSError as exc:  # the port is taken by something else: keep trying
                log.error("replica %s: cannot open the shared port: %s", self.config.name, exc)

    # ---- the hot path ---------------------------------------------------------------------------

    def _apply(self, frame: bytes) -> None:
        t0 = time.perf_counter_ns()
        c0 = time.thread_time_ns()  # inside the wall interval: CPU <= wall for every block
        block = decode_block(frame)
        t1 = time.perf_counter_ns()
        applied = self.state.apply_block(block)
        t2 = time.perf_counter_ns()
        if not applied.duplicate:
            self.recent.add(block.seq, frame)
            self.fanout.publish(applied)
            if applied.books:
                self.publish_delay.record(time.time_ns() - applied.timestamp_ns)
        cpu_ns = time.thread_time_ns() - c0
        t3 = time.perf_counter_ns()
        self.apply_time.record(t3 - t0)
        self.apply_cpu_time.record(cpu_ns)
        self.blocks_applied += 1
        self._applied_at = asyncio.get_running_loop().time()
        seq = self.state.seq
        waiters = self._waiters
        while waiters and waiters[0][0] <= seq:
            _answer(heapq.heappop(waiters)[2], True)
        if self.checks.due(seq):
            self.checks.take(seq, self.state.records())
        if not self._fold_scheduled:  # the ledger folds after the woken waiters ran (ledger.py)
            self._fold_scheduled = True
            asyncio.get_running_loop().call_soon(self._fold_ledger)
        probe = self.hooks.probe
        if probe is not None:
            probe.on_apply(block, applied, t1 - t0, t2 - t1, t3 - t2, cpu_ns)

    def held_blocks(self, since: int, frames_after: int) -> HeldBlocks:
        """What this replica applied and still holds of the newest blocks (``runtime/held.py``):
        asked by a sequencer whose log lost its tail, before it serves."""
        return held_blocks(
            self.config.name, "replica", self.state.seq, self.recent, since, frames_after
        )

    def _fold_ledger(self) -> None:
        self._fold_scheduled = False
        self.state.ledger.catch_up()
        self.state.history.volumes.catch_up()  # the account channels' trade counts (volumes.py)
        self.state.history.candles.catch_up()  # the candles' fold (candles.py)

    async def _resync(self) -> None:
        """Rebuild the caches from the newest snapshot and catch up (after a failed apply: a
        block may have been applied half-way, so the caches cannot be trusted)."""
        self._stream_since = None
        seq = await self._load_snapshot()
        self.resyncs += 1
        await self._catch_up()
        log.warning("replica %s: resynced from the snapshot at seq %d; now at seq %d",
                    self.config.name, seq, self.state.seq)  # fmt: skip

    async def _apply_loop(self) -> None:
        """Follow the block stream (supervised: an unexpected exception is logged and counted by
        the supervisor, which runs this again; a run after the first resyncs from a snapshot,
        since ``apply_block`` is not atomic)."""
        self._apply_runs += 1
        if self._apply_runs > 1:
            await self._resync()
        loop = asyncio.get_running_loop()
        while True:
            try:
                self._stream_since = loop.time()
                async for seq, frame in self.source.subscribe(self.state.seq + 1):
                    if seq > self.seen_seq:
                        self.seen_seq = seq
                    self._apply(frame)
            except (ResyncRequired, GapError) as exc:
                self._stream_since = None
                log.info(
                    "replica %s: %s; catching up from the snapshot holder", self.config.name, exc
                )
                # the publisher holds blocks after its ring's floor / sent a later block
                await self._saw(exc.floor if isinstance(exc, ResyncRequired) else exc.got)
                before = self.state.seq
                await self._catch_up()
                if self.state.seq == before:
                    # Neither the sequencer's ring nor the holder has our next block yet (e.g. the
                    # holder is itself catching up after a sequencer restart): wait, don't spin.
                    await asyncio.sleep(0.2)
            except TransportUnavailable as exc:
                self._stream_since = None
                log.warning(
                    "replica %s: sequencer unreachable (%s); retrying", self.config.name, exc
                )
                await asyncio.sleep(0.5)

    async def _applied(self, seq: int, deadline: float) -> bool:
        """Wait until block ``seq`` is applied here; False if ``deadline`` (loop time) passed."""
        if self.state.seq >= seq:
            return True
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self._waiter_id += 1
        heapq.heappush(self._waiters, (seq, self._waiter_id, fut))
        # the future is answered True when ``seq`` is applied, False at the deadline (it then
        # stays in the heap, done, until its seq is applied); see MicroBatcher.enqueue
        timer = self._apply_deadlines.watch(fut, deadline, fut)
        try:
            return await fut
        finally:
            if timer is not None:
                timer.cancel()

    async def execute_txs(self, txs: list[Any]) -> list[TxOutcome]:
        """The app's ``execute_txs``: micro-batched to the sequencer; returns once applied here.

        Within ``api.outcome_timeout_s`` or ApiError 21822 (HTTP 503): from the batcher if the
        sequencer did not answer, :class:`OutcomePending` (with the hashes) if it did but the
        block has not been applied here yet."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.api.outcome_timeout_s
        t0 = time.perf_counter_ns()
        outcomes = await self.batcher.enqueue(txs, deadline)
        t1 = time.perf_counter_ns()
        top = max((o.seq for o in outcomes), default=0)
        await self._saw(top)  # the sequencer has closed block ``top``: lag counts from there
        if not await self._applied(top, deadline):
            self.apply_timeouts += 1
            raise OutcomePending(
                int(ResultCode.SEQUENCER_UNAVAILABLE),
                f"sequenced in block {top}, which this replica has not applied yet (at "
                f"{self.state.seq}); look the tx up by hash",
                503,
                [o.tx_hash for o in outcomes],
            )
        t2 = time.perf_counter_ns()
        for tx in txs:
            kind = _type_tag(tx)
            self._sequenced.get(kind).record(t1 - t0)
            self._confirmed.get(kind).record(t2 - t0)
        probe = self.hooks.probe
        if probe is not None:
            probe.on_execute(txs, outcomes, t1 - t0, t2 - t0)
        return outcomes

    # ---- control plane --------------------------------------------------------------------------

    def state_hash(self) -> dict[str, Any]:
        """The state hash of the caches (the one every role reports) and the seq it reflects.
        O(state) on the event loop the first time per seq (none if a state check hashed it),
        then cached."""
        seq = self.state.seq
        if self._digest[0] != seq:
            self._digest = (seq, self.checks.done.get(seq) or self.state.state_hash().hex())
        return {"seq": self._digest[0], "state_hash": self._digest[1]}

    def _link_status(self) -> dict[str, Any] | None:
        link: Link | None = getattr(self.source, "link", None)
        return link.status() if link is not None else None

    def status(self, state_hash: bool = True) -> dict[str, Any]:
        """Counters, ports, seq and lag, and a state hash with the seq it is for
        (``state_hash_seq``). ``state_hash``: hash the current seq if the replica has been quiet
        (no block applied) for ``hash_quiet_s``; otherwise, and with ``state_hash=False`` (for
        pollers), the last one computed. Under load a status call therefore costs O(1) (the hash
        is O(state): tens of ms with 10k accounts) and may name an older seq; a quiet replica
        reports the hash of its current seq, once per seq."""
        st = self.state
        fan = self.fanout.stats()
        if state_hash:
            quiet = asyncio.get_running_loop().time() - self._applied_at >= self.hash_quiet_s
            if quiet:
                self.state_hash()
        return {
            "name": self.config.name,
            "pid": os.getpid(),
            "signatures": signing.BACKEND,
            "native": dict(NATIVE_PATHS),
            "port": self.port,
            "direct_port": self.direct_port,
            "serving": self.serving,
            "port_joins": self.port_joins,
            "port_leaves": self.port_leaves,
            "seq": st.seq,
            "seen_seq": self.seen_seq,
            "lag": self.lag(),
            "height": st.height,
            "state_hash": self._digest[1],
            "state_hash_seq": self._digest[0],
            **self.checks.status(),
            "loop_restarts": {n: self.supervisor.restarts(n) for n in ("apply", "port")},
            "boots": self.boots,
            "resyncs": self.resyncs,
            "catch_ups": self.catch_ups,
            "blocks_applied": self.blocks_applied,
            "apply_us": self.apply_time.summary_us(),
            "apply_cpu_us": self.apply_cpu_time.summary_us(),
            "batches": self.batcher.batches,
            "batched_txs": self.batcher.txs,
            "pipelined_batches": self.batcher.pipelined,
            "timeouts": {"sequencer": self.batcher.timeouts, "apply": self.apply_timeouts},
            "reconnects": self.source.reconnects,
            # the block stream reaches the sequencer (None: this plane does not say)
            "sequencer": self._link_status(),
            # the per-account history (ledger.py): logs, entries against the budget, logs dropped
            "ledger": {
                "accounts": len(st.ledger),
                "entries": st.ledger.entries,
                "max_entries": st.ledger.caps.max_entries,
                "dropped": st.ledger.dropped,
            },
            # the data plane's streams go through the sequencer's Unix socket (same host, TCP
            # plane); False: over the network
            "local_data_plane": {
                # any BlockSource / TxChannel may be plugged in (Ray plane, tests): not all say
                "blocks": getattr(self.source, "local", False),
                "txs": getattr(self.channel, "local", False),
            },
            "limits": dataclasses.asdict(self.app[LIMITS].stats()) if self.app else {},
            "overload": self.overload_stats(),
            "ws": {
                "connections": fan.connections,
                "conflations": fan.conflations,
                "disconnects": fan.disconnects,
                "messages": fan.messages,
                "writes": fan.writes,
            },
            "fast_lane": (
                {
                    "serves": self.lane.serve,
                    "served": self.lane.served,
                    "handoffs": self.lane.handoffs,
                    "connections": len(self.lane.connections),
                }
                if self.lane is not None
                else None
            ),
            "http": {
                **self.gate.stats(),
                "bad_requests": bad_requests(),
                "accept_errors": self.accept_errors.total["accept"],
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


class ReplicaActor:
    """Ray shell around :class:`ReplicaService` (wrap with ``ray.remote``).

    Boots from the snapshot holder's newest Arrow snapshot (``ray.get`` of the tables it owns:
    zero-copy on the same node), catches up through its ``blocks_since`` long poll, then follows
    the sequencer's block stream. ``bundle`` (a ``BundlePlacement``) pins every thread to its
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
        self._comparing: asyncio.Task[None] | None = None
        # booted from __init__: also after Ray restarts a crashed replica
        self._started = asyncio.get_event_loop().create_task(self._start())

    def _holder(self) -> Any:
        import ray

        return ray.get_actor(self.holder_name, namespace=self.namespace)

    async def _fetch_snapshot(self) -> tuple[int, int, dict[str, pa.Table]]:
        seq, height, refs = await self._holder().latest_snapshot.remote()
        tables = {name: await ref for name, ref in refs.items()}
        return seq, height, tables

    async def _fetch_trades(self, seq: int) -> Sequence[Any] | None:
        try:
            rows: Sequence[Any] | None = await self._holder().recent_trades.remote(seq)
        except Exception as exc:  # a holder without a tape: boot without one, as before
            log.warning("replica %s: no market tape from the holder: %r", self.config.name, exc)
            return None
        return rows

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

    def hooks(self) -> ReplicaHooks:
        """The measurement hooks the service runs with: none in production. A subclass (the
        loadtest's instrumented replica) returns its probe and middlewares."""
        return ReplicaHooks()

    async def _start(self) -> int:
        self.runtime.before_boot()
        self.service = ReplicaService(
            self.config,
            self._fetch_snapshot,
            self._fetch_blocks,
            commitments=self if self.committer_name else None,
            hooks=self.hooks(),
            on_fatal=exit_process,
            fetch_trades=self._fetch_trades,
        )
        port = await self.service.start()
        self.runtime.after_boot(
            self.service.metrics, busy_poll=self.config.busy_poll, live=self.live
        )
        self._comparing = asyncio.get_running_loop().create_task(self._compare_loop())
        self.service.supervisor.start(
            "primary-watch",
            PrimaryWatch(
                self._follow_primary, self.config.sequencer_target, namespace=self.namespace
            ).run,
        )
        return port

    async def _follow_primary(self, primary: PrimaryTargets) -> None:
        """A standby took over: the block stream and the tx channel go to it."""
        assert self.service is not None
        await retarget(self.service.source, primary.blocks)
        await retarget(self.service.channel, primary.blocks)

    async def _compare_loop(self) -> None:
        """Every ``COMPARE_INTERVAL_S``, compare the state checks with the snapshot holder's
        (``actors/runtime/checks.py``): one small Ray call, off the hot path."""
        assert self.service is not None
        checks = self.service.checks
        while True:
            await asyncio.sleep(COMPARE_INTERVAL_S)
            try:
                checks.compare("holder", await self._holder().state_checks.remote())
            except Exception as exc:  # the holder restarting: the last verdict stands
                log.debug("replica %s: no state checks from the holder: %r", self.config.name, exc)

    async def start(self) -> dict[str, Any]:
        """Wait for the boot; the replica's status."""
        await self._started
        return await self.status()

    async def status(self, state_hash: bool = True) -> dict[str, Any]:
        """The service's status (``state_hash=False``: the last computed hash, for pollers)."""
        if self.service is None:
            return {"name": self.config.name, "booting": True, "repr": self.live()}
        return {**self.service.status(state_hash), **self.runtime.status(), "repr": self.live()}

    def __repr__(self) -> str:
        """What Ray records when ``__init__`` returns: the fixed facts of :meth:`live` and where
        the live ones are (``actors/runtime/shell.py``)."""
        return self.live(fixed=True)

    def live(self, fixed: bool = False) -> str:
        """Role, deployment/name, group, seq, lag (behind the newest seq seen), the last state
        hash computed (with its seq), ports (shared: serving or off; direct) and placement."""
        svc = self.service
        cfg = self.config
        group = svc.metrics.base["group"] if svc is not None else cfg.group or None
        if svc is None or svc.runner is None:
            facts: dict[str, Any] = {"group": group, "state": "booting",
                                     "port": cfg.http_port or None}  # fmt: skip
        else:
            seq, digest = svc._digest
            facts = {
                "group": group,
                "state": "serving" if svc.serving else "off-port",
                "seq": svc.state.seq,
                "lag": svc.lag(),
                "hash": short_hash(digest, seq),
                **svc.checks.facts(),
                "port": svc.port or cfg.http_port or None,
                "direct": svc.direct_port or None,
            }
        return self.runtime.describe("replica", facts, fixed=fixed)

    async def held_blocks(self, since: int, frames_after: int) -> HeldBlocks | None:
        """The service's :meth:`ReplicaService.held_blocks` (None while it boots: nothing
        applied yet); answered at once, never waiting for the boot."""
        return None if self.service is None else self.service.held_blocks(since, frames_after)

    async def state_hash(self) -> dict[str, Any]:
        """The current state hash (O(state), on the replica's loop; ``status`` is cheap)."""
        await self._started
        assert self.service is not None
        return self.service.state_hash()

    async def drain(self) -> None:
        """Before removal: close the port (the host's other replicas keep serving it), tell WS
        clients to go away (they reconnect through the shared port), stop the streams."""
        if self.service is not None:
            await self.service.stop()

    async def stop(self) -> None:
        if self._comparing is not None:
            self._comparing.cancel()
        if self.service is not None:
            await self.service.stop()
