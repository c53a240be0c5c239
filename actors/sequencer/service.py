"""The sequencer: executes every transaction, closes blocks, logs them, fans them out.

::

    replicas ──tx batches (data plane)───────►┌───────────────────────────────┐
    operator ──Ray call: operator(txs)───────►│ SequencerService              │
                                              │  BlockProducer (engine)       │
                                              │  close when the previous block│
                                              │  is durable or block_max_txs ─┼─► Journal thread:
                                              │                               │   WAL write+fsync
    replicas, committer ◄──blocks─────────────┤  BlockHub ring    ◄── durable ┼───┘
    snapshot holder ◄──stamped blocks─────────┤  BlockHub ring                │
                    ──WAL range read─────────►│  read_txlog: older records    │
                                              │  from the WAL files           │
                                              │ supervised: oracle, maintenance (snapshot watch,
                                              │  WAL pruning)                  │
                                              └───────────────────────────────┘

``SequencerService`` is the asyncio core (tested without Ray); ``SequencerActor`` is the Ray shell
(detached, named) that owns one and exposes the control plane: ``start``, ``status``,
``state_hash``, ``operator``. Data-plane traffic (the arrows above: tx batches up, blocks and the
tx log down) goes over the data plane ``data_plane`` names, never through Ray calls.

Invariants:
- A submitter's future resolves only after its block's WAL record is durable; blocks are
  published in seq order, each once, never replaced (followers check it on every resume).
- A batch whose frame does not decode, or over ``max_batch_txs``, is refused whole and changes
  nothing. A stream's batches execute in the order sent.
- Before it serves, the blocks rebuilt from the WAL are checked against the followers' hashes
  and a lost tail is taken back from their copies (``repair.py``); a log that cannot be used
  raises ``WalError`` from :meth:`SequencerService.start` (the shell then refuses to start,
  stays up and says why, and tries again).
- Once serving, the sequencer is serving or exiting: a failed WAL write or sync, a dead block
  loop or a supervised loop that keeps failing calls ``on_fatal`` (the shell exits so Ray
  restarts it).
- Followers behind the ring catch up from the WAL through bounded range reads up to the newest
  *published* seq; the WAL is pruned only behind every snapshot on disk (and ``wal_keep_blocks``).
- ``block_close="durable"``: the open block closes as soon as the previous one is durable (or at
  ``block_max_txs``), so blocks grow with the load; ``"timer"``: every ``block_interval_ms``.

``status()`` is O(1); ``state_hash()`` is O(state) on the block loop, for tests and operators.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from raydex.codecs import (
    DEFAULT_CHAIN_ID,
    CodecError,
    ResultCode,
    SetMarkPrice,
    TxOutcome,
    Verifier,
    decode_batch,
    decode_wal_read_request,
    encode_outcomes,
    encode_wal_read_reply,
    signing,
    stamp_block,
    wal_record_crc,
)
from raydex.engine import state_digest
from raydex.observability.hist import Histogram
from raydex.observability.metrics import Recorder

from ..runtime import (
    ActorRuntime,
    HeldBlocks,
    Supervisor,
    advertised_host,
    current_namespace,
    exit_process,
    log_fatal,
    short_hash,
)
from ..snapshot.store import read_snapshot_meta, snapshot_seq, snapshots
from ..transport import (
    DEFAULT_DATA_PLANE,
    PREAUTH_REASONS,
    TX_STREAM,
    BlockHub,
    DataPlane,
    PreAuth,
    StreamOrder,
    data_plane_server,
)
from .arbiter import ARBITER_NAME, DEFAULT_LEASE_S, Fenced, Verdict
from .journal import Journal
from .oracle import Oracle, oracle_commands
from .producer import BlockProducer, Checked, ClosedBlock
from .repair import (
    AskFollowers,
    RepairReport,
    check_rebuilt,
    restore_tail,
    tail_to_restore,
)
from .replication import Replicator
from .steps import StepClock, StepCounters
from .wal import FsyncPolicy, Wal, WalError

log = logging.getLogger(__name__)

#: a degraded primary waits for its standby's acks again once the standby is this few blocks
#: behind what was released (it is in sync when it acked those too)
CATCH_UP_BLOCKS = 4

#: how a block closes (see the module docstring): when the previous one is durable, or on a timer
BlockClose = Literal["durable", "timer"]


@dataclass(frozen=True, slots=True)
class SequencerConfig:
    wal_dir: str
    snapshot_dir: str
    chain_id: int = DEFAULT_CHAIN_ID
    #: "durable": a block closes when the previous one is durable (blocks grow with the load,
    #: one fsync per block, no idle tick); "timer": every ``block_interval_ms``
    block_close: BlockClose = "durable"
    #: the timer's period (``block_close="timer"`` only)
    block_interval_ms: float = 1.0
    block_max_txs: int = 1000
    wal_fsync: FsyncPolicy = "block"
    #: WAL segments born full-size (zeros, prepared by a background thread): a block's sync then
    #: flushes its data and no filesystem metadata (``actors/sequencer/wal.py``; a faster, cheaper
    #: sync: ``raydex bench wal``). Costs ``wal_segment_bytes`` of disk for the next segment.
    wal_preallocate: bool = True
    #: the journal thread (the WAL's writes and syncs) at SCHED_FIFO where the host allows it:
    #: it sleeps in the sync nearly all the time, and wakes as soon as the disk answers instead
    #: of waiting for a busy core (``journal.py``); the rest of the sequencer keeps ``realtime``.
    #: Off unless the spec says so (``raydex.yaml`` does), as every other SCHED_FIFO knob
    journal_realtime: bool = False
    #: the data plane its streams are served on: "grpc" (HTTP/2, ``DEFAULT_DATA_PLANE``) or
    #: "tcp" (plain asyncio streams carrying the same frames and secret, less CPU per tx; the
    #: shipped raydex.yaml chooses it); see ``actors/transport/planes.py``
    data_plane: DataPlane = DEFAULT_DATA_PLANE
    #: TCP plane only: also serve both streams on Unix-domain sockets in ``unix_socket_dir``
    #: ("" = the temp folder); followers on the same host use them instead of loopback TCP, for
    #: less CPU per round trip (``raydex bench transport``). Off: TCP only.
    unix_sockets: bool = True
    unix_socket_dir: str = ""
    #: where the data plane listens: blocks and tx batches on ``data_port``, the tx log on
    #: ``txlog_port`` (0: any free port); the spec sets both from ``ports.data``
    data_host: str = "127.0.0.1"
    data_port: int = 0
    txlog_port: int = 0
    ring_size: int = 4096
    #: Oracle: every interval, each market's mark moves toward its book mid by at most
    #: ``oracle_max_step_bps`` (0 = off: marks only change by operator SetMarkPrice). Shorter
    #: interval: marks track the book closely (and liquidations trigger sooner), more commands.
    oracle_interval_ms: float = 0.0
    oracle_max_step_bps: int = 50
    #: Check user txs' signatures again in the sequencer, before they execute. None (auto):
    #: without a ``data_plane_secret`` every batch (the plane is open to anyone on loopback);
    #: with one, the batches of streams from another host (a TCP peer whose address is not this
    #: machine's), not those of the same host's members (its Unix socket, loopback): a member's
    #: secret crosses the network in the clear, a same-host member shares the sequencer's trust
    #: domain, and the committer re-verifies every executed tx anyway (``actors/audit.py``). A
    #: verify costs ~30 µs of the sequencer's core per tx. True: every batch; False: none (the
    #: audit alone, after the fact).
    verify_signatures: bool | None = None
    #: Busy-poll the event loop (it never parks: see ``actors/runtime/shell.py``): less wake-up
    #: latency per batch, one whole core burnt; only where the sequencer has a core of its own.
    busy_poll: bool = False
    #: WAL segment size: smaller prunes more finely (less disk) with more files and more syncs of
    #: the folder; larger makes fewer, bigger files
    wal_segment_bytes: int = 64 << 20
    #: WAL blocks kept behind the newest snapshot (pruning margin): more lets a follower that far
    #: behind catch up from the WAL instead of rebooting from a snapshot, and costs disk (about
    #: 80 KB per 1,000-tx block) and recovery reads; segments back to the oldest snapshot on disk
    #: are kept anyway (so recovery can fall back to it)
    wal_keep_blocks: int = 100_000
    #: how often the maintenance loop looks for a new snapshot and prunes (a listdir each time)
    maintenance_interval_s: float = 1.0
    #: bounds of one WAL range read (catch-up): more records per call catch up in fewer round
    #: trips, at a longer pause of the reader thread and larger messages (< 64 MB)
    txlog_read_max_records: int = 2000
    txlog_read_max_bytes: int = 16 << 20
    #: Data plane bounds (either plane's server). Most txs in one batch from a replica; a bigger
    #: batch is refused whole with ``BATCH_TOO_LARGE`` (21514). Must be at least every replica
    #: group's ``max_batch_txs`` (the spec checks it); larger lets one batch hold the block longer.
    max_batch_txs: int = 1000
    #: Tx batches being executed at once over all streams (a batch beyond waits, unread): bounds
    #: the work members can queue; more than the replica count lets each pipeline.
    max_inflight_batches: int = 64
    #: Longest the loop checks a batch's signatures before it yields (ms; batches are checked
    #: before they execute, slice by slice): shorter keeps block closes and other batches flowing
    #: under a flood of signed txs, at a little more overhead per batch.
    verify_slice_ms: float = 2.0
    #: Before a data-plane caller has shown the secret (``transport.PreAuth``): seconds it has to
    #: send its whole HELLO (TCP; gRPC: to finish the HTTP/2 handshake), and how many connections
    #: may be waiting for theirs, per peer address (the Unix socket counts as one) and in all;
    #: beyond, a connection is closed unread (``raydex_preauth_refusals_total{reason}``). A HELLO
    #: is at most 256 bytes. Shorter and smaller bound what strangers hold sooner; too small
    #: turns away a reconnect storm of the deployment's own followers (each shows it at once).
    hello_timeout_s: float = 5.0
    max_unauthenticated: int = 256
    max_unauthenticated_per_peer: int = 16
    #: gRPC plane only: connections in all (it cannot tell a member's before its first call)
    max_data_connections: int = 1024
    #: At start, how long the sequencer waits for its followers' answers (what they applied and
    #: hold of the newest blocks: ``repair.py``) before it goes on without the silent ones.
    #: Longer waits out a follower that is slow to answer; a block only it holds is lost if the
    #: log lost it too. Also the pause before a refused start is tried again (at least 1 s).
    repair_timeout_s: float = 10.0
    #: Where an acknowledged block is durable: "local" (this host's WAL synced) or "replicated"
    #: (also synced by the standby at ``standby_target``, ``replication.py``: a tx is answered
    #: only once its block is on both hosts; costs max(local sync, round trip + the standby's
    #: sync) per block instead of the local sync). The spec chooses "replicated" when it names
    #: a standby.
    durability: Literal["local", "replicated"] = "local"
    #: the standby's replication address (a data-plane target; deploy fills it in)
    standby_target: str = ""
    #: the standby's actor name (the arbiter lets only it take over; deploy fills it in)
    standby_name: str = ""
    #: A standby writes a snapshot of its own state every this many blocks (into
    #: ``snapshot_dir`` on its host, the newest 3 kept) and prunes its WAL behind them as the
    #: primary does: a restarted standby replays from its newest snapshot, and after a takeover
    #: the snapshots are on the new primary's host even when the holder's were lost with the old
    #: one. Fewer: shorter replays, an O(state) listing on the standby's loop more often
    #: (its acks wait meanwhile). 0: none (the standby keeps its whole WAL).
    standby_snapshot_blocks: int = 10_000
    #: the port a standby serves replication on (the spec: ``ports.data + 2``; 0: any free port)
    replication_port: int = 0
    #: Replicated durability with the standby gone or behind: after this many seconds waiting
    #: for its ack, the primary marks the standby out of sync at the arbiter (it may then never
    #: take over) and acknowledges on its local sync alone, status ``degraded`` (counted), until
    #: the standby caught up again. 0: wait for the standby forever (never acknowledge on one
    #: host; trading stops while the standby is away). Shorter: a shorter stall when the standby
    #: dies; too short turns a slow sync on the standby into a degradation.
    replication_timeout_s: float = 2.0
    #: The deployment's data-plane secret (``raydex deploy`` makes one; never in raydex.yaml):
    #: every data-plane caller must carry it. Empty: no check, loopback only (tests, embedded
    #: runs).
    data_plane_secret: str = field(default="", repr=False)

    def open_wal(self) -> Wal:
        """The WAL in ``wal_dir`` with this config's sync, segment size and preallocation (the
        primary's and the standby's alike)."""
        return Wal(
            self.wal_dir,
            fsync=self.wal_fsync,
            segment_bytes=self.wal_segment_bytes,
            preallocate=self.wal_preallocate,
        )


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """The newest snapshot in the snapshot folder, as the sequencer last saw it."""

    seq: int = -1
    state_hash: str = ""
    oldest_seq: int = -1


class SequencerService:
    """Asyncio core of the sequencer (see module docstring).

    ``on_fatal(reason)`` is called when the sequencer cannot go on (see the invariants); the
    actor shell passes :func:`exit_process`. The default only logs (tests, embedded runs).
    ``clock``: the wall clock (ns) that stamps each block's time, the engine's only time (tests
    that need minutes to pass, a TWAP's slices, move it forward)."""

    def __init__(
        self,
        config: SequencerConfig,
        on_fatal: Callable[[str], None] = log_fatal,
        followers: AskFollowers | None = None,
        epoch: int = 0,
        on_degrade: Callable[[], Awaitable[bool]] | None = None,
        on_in_sync: Callable[[], Awaitable[object]] | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.config = config
        #: a producer already at the log's end (``preload``): the start serves from it
        self._preloaded: BlockProducer | None = None
        #: the epoch this sequencer sequences in (the arbiter's; 0: no arbiter)
        self.epoch = epoch
        #: asks the arbiter whether the primary may acknowledge without its standby (marks the
        #: standby out of sync there); None: allowed (no arbiter)
        self.on_degrade = on_degrade
        #: tells the arbiter the standby holds every acknowledged block again
        self.on_in_sync = on_in_sync
        self.replicator: Replicator | None = None
        #: replicated durability with the standby not (yet) known to hold every released block:
        #: blocks are released on the local sync alone
        self.degraded = False
        self.degradations = 0
        #: the standby is known to hold every block released so far (the arbiter is told)
        self.standby_in_sync = False
        #: the standby's actor name (the arbiter lets only it take over)
        self.standby_name = ""
        #: the newest block released while degraded: the standby is in sync once it acked it
        self._sync_point = 0
        #: the newest seq synced locally, and the newest released (published, answered)
        self._local_seq = 0
        self._released_seq = 0
        #: a degradation being asked for at the arbiter
        self._degrading = False
        #: the standby's epoch that fenced this sequencer (0: never)
        self.fenced_by = 0
        self._calls: set[asyncio.Future[object]] = set()
        self.on_fatal = on_fatal
        #: asks the followers what they hold of the newest blocks (``repair.py``); None: no
        #: followers to ask (a first start, a test): a torn tail is cut as found
        self.followers = followers
        #: what the last start found and did: the log's end, the followers' answers, the blocks
        #: checked and restored (``repair.RepairReport``)
        self.recovery = RepairReport()
        #: blocks taken back from the followers over this process's starts
        self.restored_blocks = 0
        #: stamps block times (ns); the oracle's time ticks read it too
        self.clock = clock
        self.producer: BlockProducer | None = None
        self.hub: BlockHub | None = None
        #: the snapshot holder's stream: each block's delta frame stamped with the crc of its WAL
        #: record (``codecs.stamp_block``); the holder applies the deltas and keeps the crc as the
        #: identity of its history. WAL range reads (catch-up) are served on the same port.
        self.txlog: BlockHub | None = None
        self.server: Any = None
        self.txlog_server: Any = None
        self.port = 0
        self.txlog_port = 0
        self.replayed = 0
        #: why the sequencer stopped serving (None while it serves)
        self.failed: str | None = None
        self._pending: asyncio.Future[ClosedBlock] | None = None
        #: a close is scheduled for this loop turn (natural batching)
        self._close_soon = False
        #: closed blocks whose WAL record the journal has not synced yet, in seq order
        self._undurable: deque[tuple[ClosedBlock, asyncio.Future[ClosedBlock]]] = deque()
        self.journal: Journal | None = None
        self.oracle: Oracle | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False
        self.blocks = 0
        self.txs = 0
        self.snapshot = SnapshotInfo()
        self.pruned_through = 0
        self.pruned_segments = 0
        self.txlog_reads = 0
        #: tx batches refused whole (undecodable, or over ``max_batch_txs``)
        self.batches_refused = 0
        self._verify_turn = asyncio.Lock()
        #: open (first tx in) -> durable and published, per block
        self.block_time = Histogram()
        #: the close itself on the loop: encode the block and queue its WAL record
        self.close_time = Histogram()
        #: from the journal's sync returning to this loop publishing the block (the loop thread's
        #: wake-up, and whatever it was running first)
        self.handoff_time = Histogram()
        self.block_txs = Histogram()
        #: CPU per step (decode, engine, close, publish) on the real path (``steps.py``)
        self.steps = StepCounters()
        self.metrics = Recorder("sequencer", "sequencer")
        m = self.metrics
        m.histogram("raydex_block_seconds", self.block_time)
        m.histogram("raydex_block_close_seconds", self.close_time)
        m.histogram("raydex_wal_handoff_seconds", self.handoff_time)
        m.histogram("raydex_block_size_txs", self.block_txs)
        m.counter_fn("raydex_blocks_total", lambda: self.blocks)
        m.counter_fn("raydex_txs_total", lambda: self.txs)
        m.counter_fn("raydex_wal_restored_blocks_total", lambda: self.restored_blocks)
        m.gauge("raydex_block_seq", lambda: self.producer.seq if self.producer else 0)
        m.gauge("raydex_sequencer_epoch", lambda: self.epoch)
        m.gauge(
            "raydex_replication_lag_blocks",
            lambda: self.replicator.lag if self.replicator else 0,
        )
        m.gauge("raydex_replication_degraded_info", lambda: 1.0 if self.degraded else 0.0)
        m.counter_fn("raydex_replication_degradations_total", lambda: self.degradations)
        m.gauge(
            "raydex_signing_info",
            lambda: 1.0,
            backend=signing.BACKEND,
            accelerated=str(signing.ACCELERATED).lower(),
        )
        #: the pre-auth bounds of the blocks/txs server and of the tx-log server
        self.preauth = tuple(
            PreAuth(
                config.hello_timeout_s,
                config.max_unauthenticated_per_peer,
                config.max_unauthenticated,
            )
            for _ in range(2)
        )
        for reason in PREAUTH_REASONS:
            m.counter_fn(
                "raydex_preauth_refusals_total",
                lambda r=reason: sum(p.refused[r] for p in self.preauth),
                reason=reason,
            )
        self.supervisor = Supervisor(m, self._fatal)

    def preload(self, producer: BlockProducer, epoch: int) -> None:
        """Before :meth:`start`: serve from ``producer`` (a promoted standby's, ``standby.py``:
        its engine at its log's end, its WAL open, its newest blocks in ``recovered_blocks``)
        in ``epoch``, instead of recovering from the snapshot folder and the WAL."""
        self._preloaded = producer
        self.epoch = epoch

    @property
    def wal(self) -> Wal:
        assert self.producer is not None and self.producer.wal is not None, "start() first"
        return self.producer.wal

    async def start(self) -> int:
        """Recover (newest usable snapshot + WAL), check the rebuilt blocks and repair a lost
        tail from the followers (``repair.py``), open the data plane, start the loops; the
        blocks port. Raises (WalError, StartRefused, OSError, ...) when the sequencer cannot
        start; nothing is served then."""
        cfg = self.config
        digests: dict[int, bytes] = {}
        preloaded, self._preloaded = self._preloaded, None
        if preloaded is not None:  # a promoted standby: its WAL is open, its engine current
            assert preloaded.wal is not None
            wal = preloaded.wal
        else:
            wal = cfg.open_wal()
        try:
            if preloaded is not None:
                self.producer, self.replayed = preloaded, 0
                for block in preloaded.recovered_blocks:
                    digests[block.seq] = hashlib.sha256(block.frame).digest()
            else:
                self.producer, self.replayed = BlockProducer.recover(
                    Path(cfg.snapshot_dir),
                    wal,
                    Verifier(cfg.chain_id),
                    keep_blocks=cfg.ring_size,
                    digests=digests,
                )
            await self._check_and_repair(self.producer, wal, digests)
        except BaseException:
            self.producer = None
            wal.close()
            raise
        self.producer.epoch = self.epoch  # written into every block's WAL record
        self.producer.verify_signatures = (
            cfg.verify_signatures
            if cfg.verify_signatures is not None
            else not cfg.data_plane_secret
        )
        self.metrics.histogram("raydex_wal_fsync_seconds", wal.fsync_time)
        log.info(
            "sequencer recovered: snapshot seq %d (%s), %d WAL blocks replayed, now at seq %d",
            self.recovery.log_seq - self.replayed,
            self.producer.recovered_from.path if self.producer.recovered_from else None,
            self.replayed,
            self.producer.seq,
        )
        # Re-serve the blocks rebuilt from the WAL: a follower behind the crash (the snapshot
        # holder, a replica) resumes from them instead of finding its seq below the ring.
        rebuilt = self.producer.recovered_blocks
        first = rebuilt[0].seq - 1 if rebuilt else self.producer.seq
        self.hub = BlockHub(ring_size=cfg.ring_size, last_seq=first)
        self.txlog = BlockHub(ring_size=cfg.ring_size, last_seq=first)
        for block in rebuilt:
            self.hub.publish_nowait(block.seq, block.frame)
            self.txlog.publish_nowait(block.seq, _stamped(block))
        rebuilt.clear()
        self.server = data_plane_server(
            cfg.data_plane,
            self.hub,
            self.handle_batch,
            host=cfg.data_host,
            port=cfg.data_port,
            secret=cfg.data_plane_secret,
            max_inflight=cfg.max_inflight_batches,
            unix_dir=cfg.unix_socket_dir if cfg.unix_sockets else None,
            preauth=self.preauth[0],
            max_connections=cfg.max_data_connections,
        )
        self.txlog_server = data_plane_server(
            cfg.data_plane,
            self.txlog,
            self.read_txlog,
            host=cfg.data_host,
            port=cfg.txlog_port,
            secret=cfg.data_plane_secret,
            unix_dir=cfg.unix_socket_dir if cfg.unix_sockets else None,
            preauth=self.preauth[1],
            max_connections=cfg.max_data_connections,
        )
        try:
            self.port = await self.server.start()
            self.txlog_port = await self.txlog_server.start()
        except BaseException:
            await self.stop()  # a port bound above and the WAL (an unstarted server: a no-op)
            raise
        loop = asyncio.get_running_loop()
        self._local_seq = self._released_seq = self._sync_point = self.producer.seq
        self.journal = Journal(
            wal, loop, self._on_durable, self._on_journal_error, realtime=cfg.journal_realtime
        )
        self.journal.start()
        if cfg.durability == "replicated":
            self.standby_name = cfg.standby_name
            if cfg.standby_target:
                # waiting for the standby from the first block: one that does not answer
                # within the timeout degrades the primary, as a standby lost later does
                self._replicate_to(cfg.standby_target)
            else:  # no standby yet (deploy names one later: ``set_standby``)
                self.degraded = True
            if cfg.replication_timeout_s > 0:
                self.supervisor.start("replication-watch", self._watch_replication)
        if cfg.block_close == "timer":
            self._loop_task = loop.create_task(self._block_loop(), name="block-loop")
            self._loop_task.add_done_callback(self._on_block_loop_end)
        if cfg.oracle_interval_ms > 0:
            self.oracle = Oracle(
                self._engine,
                lambda cmds: self.submit(cmds, operator=True),
                cfg.oracle_interval_ms,
                cfg.oracle_max_step_bps,
                clock=self.clock,
            )
            self.supervisor.start("oracle", self.oracle.run)
        self.supervisor.start("maintenance", self._maintain)
        return self.port

    async def _check_and_repair(
        self, producer: BlockProducer, wal: Wal, rebuilt: dict[int, bytes]
    ) -> None:
        """Before serving: ask the followers, check the rebuilt blocks against the committer's
        chain and restore the blocks after the log's end that they applied (``repair.py``)."""
        report = self.recovery = RepairReport(log_seq=producer.seq, torn_bytes=wal.torn_bytes)
        if self.followers is None:
            return
        since = min(rebuilt) if rebuilt else producer.seq
        answers, report.unanswered = await self.followers(since, producer.seq)
        report.followers = {a.name: a.seq for a in answers}
        if report.unanswered:
            log.warning(
                "sequencer start: %s did not answer within %.0f s; a block only they applied "
                "cannot be restored (they will find their history replaced when they resume)",
                ", ".join(report.unanswered), self.config.repair_timeout_s,
            )  # fmt: skip
        report.checked_blocks = check_rebuilt(rebuilt, answers)
        top, blocks = tail_to_restore(producer.seq, rebuilt.get(producer.seq), answers)
        if blocks:
            committed = {s for a in answers if a.role == "committer" for s, _ in a.digests}
            restored = restore_tail(producer, wal, blocks)
            producer.recovered_blocks.extend(restored)
            self.restored_blocks += len(restored)
            report.restored = (blocks[0][0], blocks[-1][0])
            report.restored_checked = sum(1 for seq, _, _ in blocks if seq in committed)
            report.verdict = (
                f"the WAL ended at seq {report.log_seq} ({wal.torn_bytes} torn bytes cut); blocks "
                f"{blocks[0][0]}..{top} that the followers applied were restored from their "
                f"copies ({report.restored_checked} of {len(blocks)} checked against the "
                "committer's chain) and written back to the log"
            )
            log.warning("WAL repaired: %s", report.verdict)
        elif wal.torn_bytes:
            newest = max(report.followers.values(), default=0)
            report.verdict = (
                f"the torn tail cut after seq {report.log_seq} held no block any of the "
                f"{len(answers)} followers that answered applied (newest applied: {newest}): it "
                "was never acknowledged to any of their clients"
            )
            log.warning("WAL: %s", report.verdict)
        else:
            report.verdict = "the WAL holds every block the followers applied"
        if report.checked_blocks:
            log.info(
                "sequencer start: %d rebuilt blocks match the hashes the followers hold",
                report.checked_blocks,
            )

    async def stop(self) -> None:
        self._stopping = True
        await self.supervisor.stop()
        if self.replicator is not None:
            await self.replicator.stop()
        if self._loop_task is not None:
            self._loop_task.remove_done_callback(self._on_block_loop_end)
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        if self.journal is not None:
            if self.failed is None:
                self._close_block()
            await asyncio.get_running_loop().run_in_executor(None, self.journal.close)
            if self.journal.error is None:
                self._on_durable(self.journal.durable_seq)
        for server in (self.server, self.txlog_server):
            if server is not None:
                await server.stop()
        if self.producer is not None and self.producer.wal is not None:
            self.producer.wal.close()

    def signature_policy(self) -> str:
        """Whose batches the sequencer checks (``verify_signatures``): all, other hosts', none."""
        if self.producer is not None and self.producer.verify_signatures:
            return "all"
        return "other hosts" if self.config.verify_signatures is None else "none"

    def _engine(self) -> Any:
        assert self.producer is not None
        return self.producer.engine

    # ---- data plane -----------------------------------------------------------------------------

    async def handle_batch(self, frame: bytes) -> bytes:
        """Tx handler of the data plane's tx streams: batch frame in, outcome frame out.

        An undecodable batch is answered ``INVALID_TX_INFO``, one over ``max_batch_txs``
        ``BATCH_TOO_LARGE`` (one outcome for the whole batch, zero hash, seq 0); an empty batch
        at once with no outcome. Signatures are checked slice by slice before the batch executes
        (:meth:`check_signatures`), so a flood of signed txs never holds the loop for long; the
        batches of one stream still execute in the order they arrived (``StreamOrder``)."""
        reply: bytes
        steps = self.steps
        steps.batches += 1
        t0 = StepClock()
        try:
            txs = decode_batch(frame, self.config.max_batch_txs)
        except CodecError as exc:
            self.batches_refused += 1
            too_large = exc.code == ResultCode.BATCH_TOO_LARGE
            code = ResultCode.BATCH_TOO_LARGE if too_large else ResultCode.INVALID_TX_INFO
            reply = encode_outcomes([(bytes(40), code, 0, 0)])
            return reply
        finally:
            steps.decode_ns += StepClock() - t0
        if not txs:
            reply = encode_outcomes([])
            return reply
        stream = TX_STREAM.get()
        verify = self.verifies(stream)
        if stream is None or not verify:
            # nothing to wait for: batches execute in the order they arrive (without a stream,
            # a verifying producer checks each tx as it executes)
            outcomes = await self.submit(txs, operator=False, verify=verify)
            t0 = StepClock()
            reply = encode_outcomes(outcomes)
            steps.publish_ns += StepClock() - t0
            return reply
        # The check yields between slices, so a later batch of this stream (a replica keeps
        # several out, ``MicroBatcher``) may finish its check first; it still executes after
        # this one. Other streams' batches do not wait for this one (StreamOrder).
        before, mine = stream.last, asyncio.get_running_loop().create_future()
        stream.last = mine
        try:
            checked = await self.check_signatures(txs, verify=True)
            if before is not None and not before.done():
                await asyncio.wait((before,))  # not ``await before``: a cancel must not reach it
            fut, at = self._execute(txs, False, checked, verify=True)
        finally:
            mine.set_result(None)
        block = await fut
        t0 = StepClock()
        reply = encode_outcomes([block.outcomes[i] for i in at])
        steps.publish_ns += StepClock() - t0
        return reply

    def verifies(self, stream: StreamOrder | None) -> bool:
        """Whether the batches of ``stream`` (None: not a data-plane stream) have their
        signatures checked here (``SequencerConfig.verify_signatures``)."""
        producer = self.producer
        if producer is None:
            return False
        if producer.verify_signatures:
            return True
        return self.config.verify_signatures is None and stream is not None and stream.remote

    async def check_signatures(
        self, txs: Sequence[Any], verify: bool | None = None
    ) -> list[Checked] | None:
        """Each user tx's signature checked against its key as it is now, yielding to the loop
        every ``verify_slice_ms`` (None when not verifying: ``verify``, by default the
        producer's own policy). The producer trusts a result only if the key is unchanged when
        the tx executes."""
        producer = self.producer
        assert producer is not None, "start() first"
        if not (producer.verify_signatures if verify is None else verify):
            return None
        budget = int(self.config.verify_slice_ms * 1e6)
        clock = time.perf_counter_ns
        check = producer.check_signature
        out: list[Checked] = []
        # Slices take turns (a FIFO lock per slice): a loop iteration runs at most one slice
        # however many batches are being checked, and a small batch waits at most one slice per
        # batch ahead of it, not for whole batches.
        i, n = 0, len(txs)
        while i < n:
            async with self._verify_turn:
                until = clock() + budget
                while i < n:
                    out.append(check(txs[i]))
                    i += 1
                    if clock() >= until:
                        break
            if i < n:
                await asyncio.sleep(0)
        return out

    async def submit(
        self,
        txs: Sequence[Any],
        operator: bool = False,
        checked: Sequence[Checked] | None = None,
        verify: bool | None = None,
    ) -> list[TxOutcome]:
        """Execute ``txs`` in the open block; resolves when that block is durable. ``checked``:
        :meth:`check_signatures` of ``txs``; ``verify``: check their signatures (None: the
        producer's policy)."""
        fut, at = self._execute(txs, operator, checked, verify)
        block = await fut
        return [block.outcomes[i] for i in at]

    def _execute(
        self,
        txs: Sequence[Any],
        operator: bool,
        checked: Sequence[Checked] | None,
        verify: bool | None = None,
    ) -> tuple[asyncio.Future[ClosedBlock], range]:
        """Execute ``txs`` in the open block now: (the future of that block once durable, the
        outcomes' positions in it)."""
        producer = self.producer
        assert producer is not None, "start() first"
        if self._stopping:
            raise RuntimeError(f"sequencer is stopping ({self.failed or 'stop requested'})")
        t0 = StepClock()
        at = producer.submit(txs, self.clock(), operator=operator, checked=checked, verify=verify)
        self.steps.engine_ns += StepClock() - t0
        if self._pending is None:
            self._pending = asyncio.get_running_loop().create_future()
        fut = self._pending
        if producer.open_txs >= self.config.block_max_txs:
            self._close_block()
        elif self.config.block_close == "durable" and not self._undurable:
            self._schedule_close()
        return fut, at

    def _schedule_close(self) -> None:
        """Close the open block later in this loop turn: batches already ready join it."""
        if not self._close_soon:
            self._close_soon = True
            asyncio.get_running_loop().call_soon(self._close_now)

    def _close_now(self) -> None:
        self._close_soon = False
        if self._pending is not None and not self._undurable and not self._stopping:
            self._close_block()

    def _close_block(self) -> None:
        """Close the open block and hand its WAL record to the journal; the block is published
        and its outcomes released by :meth:`_on_durable` once the journal has synced it."""
        producer = self.producer
        fut, self._pending = self._pending, None
        if producer is None or fut is None:
            return
        t0, c0 = time.perf_counter_ns(), StepClock()
        block = producer.close_block(write_wal=False)
        if block is None:
            fut.cancel()
            return
        assert self.journal is not None
        self._undurable.append((block, fut))
        self.journal.submit(block.seq, block.wal_record)
        if self.replicator is not None:
            self.replicator.submit(block.seq, block.wal_record)
        self.close_time.record(time.perf_counter_ns() - t0)
        self.steps.close_ns += StepClock() - c0

    def _on_durable(self, seq: int, fsync_ns: int = 0, synced_at_ns: int = 0) -> None:
        """Blocks up to ``seq`` are on disk: publish them in order and release their outcomes."""
        assert self.hub is not None and self.txlog is not None
        c0 = StepClock()
        if synced_at_ns:  # the journal's sync returned then: how long the loop took to get here
            self.handoff_time.record(time.perf_counter_ns() - synced_at_ns)
        if fsync_ns and self.producer is not None and self.producer.wal is not None:
            self.producer.wal.fsync_time.record(fsync_ns)
        self._local_seq = seq
        self._release(c0)

    def _on_replicated(self, seq: int) -> None:
        """The standby synced blocks up to ``seq``: release what the local sync covers too; a
        degraded primary whose standby now holds every released block is in sync again."""
        if self.degraded and not self._degrading and seq + CATCH_UP_BLOCKS >= self._released_seq:
            # close enough: wait for its acks again (released blocks then stop moving ahead of
            # it), and it is in sync once it acked what was released on this host alone
            self.degraded = False
            self._sync_point = self._released_seq
        if not self.degraded and not self.standby_in_sync and seq >= self._sync_point:
            self.standby_in_sync = True
            log.warning("replication: the standby holds every block through %d: in sync", seq)
            if self.on_in_sync is not None:
                self._tell(self.on_in_sync())
        self._release(StepClock())

    def _through(self) -> int:
        """The newest seq whose block may be released (durable as ``durability`` asks)."""
        if self.replicator is None or self.degraded:
            return self._local_seq
        return min(self._local_seq, self.replicator.acked)

    def _release(self, c0: int) -> None:
        """Publish the closed blocks that are durable enough, in order; release their outcomes."""
        assert self.hub is not None and self.txlog is not None
        seq = self._through()
        if self.fenced_by:
            return
        waiting = self._undurable
        while waiting and waiting[0][0].seq <= seq:
            block, fut = waiting.popleft()
            self.hub.publish_nowait(block.seq, block.frame)
            self.txlog.publish_nowait(block.seq, _stamped(block))
            self.blocks += 1
            self.txs += block.tx_count
            self.block_time.record(self.clock() - block.timestamp_ns)
            self.block_txs.record(block.tx_count)
            if not fut.done():
                fut.set_result(block)
            self._released_seq = block.seq
            self.steps.blocks += 1
        if self.degraded and self.replicator is not None:
            self.replicator.trim(self._released_seq)  # in the local WAL; the standby reads it there
        self.steps.publish_ns += StepClock() - c0
        if (
            self.config.block_close == "durable"
            and self._pending is not None
            and not self._undurable
            and not self._stopping
        ):
            self._close_block()  # natural batching: what arrived during the fsync is the next block

    def _replicate_to(self, target: str) -> None:
        self.replicator = Replicator(
            target,
            self.epoch,
            self._read_durable,
            lambda: self._local_seq,
            self._on_replicated,
            self._on_fenced,
            secret=self.config.data_plane_secret,
        )
        self.replicator.start()

    async def set_standby(self, target: str, name: str) -> None:
        """Replicate to the standby at ``target`` (actor ``name``) from now on, instead of the one
        before (a new standby after one was lost, or after a takeover): it is out of sync until
        it caught up from this primary's WAL, and blocks are acknowledged on this host's sync
        meanwhile (status degraded), as when a standby is lost. Replicated durability only."""
        if self.config.durability != "replicated":
            raise ValueError("set_standby: this sequencer's durability is local")
        old, self.replicator = self.replicator, None
        if old is not None:
            await old.stop()
        self.degraded, self.standby_in_sync = True, False
        self.standby_name = name
        self._replicate_to(target)
        self._release(StepClock())

    def _tell(self, call: Awaitable[object]) -> None:
        """Run an arbiter call in the background (kept referenced; a failure is logged)."""
        task = asyncio.ensure_future(call)
        self._calls.add(task)

        def done(t: asyncio.Future[object]) -> None:
            self._calls.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.warning("arbiter call failed: %r", t.exception())

        task.add_done_callback(done)

    async def _watch_replication(self) -> None:
        """Degrade when a locally durable block has waited ``replication_timeout_s`` for the
        standby's ack, once the arbiter (``on_degrade``) marked the standby out of sync."""
        cfg = self.config
        loop = asyncio.get_running_loop()
        tick = min(0.05, cfg.replication_timeout_s / 4)
        waited_since: float | None = None
        while True:
            await asyncio.sleep(tick)
            r = self.replicator
            if r is None or self.degraded or self.fenced_by:
                waited_since = None
                continue
            stuck = self._local_seq > r.acked and self._local_seq > self._released_seq
            if not stuck:
                waited_since = None
                continue
            now = loop.time()
            if waited_since is None:
                waited_since = now
            if now - waited_since < cfg.replication_timeout_s:
                continue
            self._degrading = True
            try:
                allowed = True if self.on_degrade is None else await self.on_degrade()
            finally:
                self._degrading = False
            if not allowed:  # fenced meanwhile, or the arbiter unreachable: keep waiting
                log.error("replication: the standby is %d blocks behind and the arbiter did not "
                          "allow acknowledging without it; waiting", r.lag)  # fmt: skip
                waited_since = now
                continue
            self.degraded = True
            self.standby_in_sync = False
            self.degradations += 1
            waited_since = None
            log.error("replication DEGRADED: no ack from the standby for %.1f s (%s); blocks are "
                      "acknowledged on this host's sync alone until it catches up",
                      cfg.replication_timeout_s, r.error or "no answer")  # fmt: skip
            self._release(StepClock())

    def _on_fenced(self, epoch: int) -> None:
        """The standby follows a newer epoch: another sequencer is the primary. Nothing more is
        released (its blocks were never acked by the standby), and the process exits."""
        self.fenced_by = epoch
        self._fatal(f"fenced: the standby follows epoch {epoch}, this primary's is {self.epoch}")

    async def _read_durable(
        self, from_seq: int, through_seq: int, max_bytes: int
    ) -> list[tuple[int, bytes]]:
        """Locally durable WAL records ``from_seq..through_seq`` (the replicator's catch-up)."""
        through = min(through_seq, self._local_seq)
        if through < from_seq:
            return []
        wal = self.wal
        records: list[tuple[int, bytes]] = await asyncio.get_running_loop().run_in_executor(
            None, wal.read_records, from_seq, through, 1 << 30, max_bytes
        )
        return records

    def _on_journal_error(self, exc: BaseException) -> None:
        """The WAL failed: nothing more may be acknowledged. Fail what waits (those txs are
        unacknowledged: their submitters learn the outcome after the restart), stop taking txs,
        and exit (Ray restarts the actor, which recovers from what did reach the disk)."""
        self._stopping = True
        durable = self.journal.durable_seq if self.journal is not None else 0
        reason = f"WAL write failed after seq {durable}: {exc!r}"
        self.failed = reason
        log.error("%s; %d closed blocks not acknowledged", reason, len(self._undurable))
        while self._undurable:
            _, fut = self._undurable.popleft()
            if not fut.done():
                fut.set_exception(RuntimeError(reason))
        if self._pending is not None and not self._pending.done():
            self._pending.set_exception(RuntimeError(reason))
        self._pending = None
        self._fatal(reason)

    def _fatal(self, reason: str) -> None:
        self._stopping = True
        if self.failed is None:
            self.failed = reason
        self.on_fatal(reason)

    def _on_block_loop_end(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        self._fatal(f"the block loop ended: {task.exception()!r}")

    async def _block_loop(self) -> None:
        interval = self.config.block_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            if self._pending is not None:
                self._close_block()

    # ---- catch-up from the WAL ------------------------------------------------------------------

    async def read_txlog(self, frame: bytes) -> bytes:
        """Handler of the tx-log server's request channel: a WAL range read (records with
        ``seq >= from_seq``, up to the newest published seq, bounded by the config); the file
        reads run on a worker thread."""
        from_seq, max_records = decode_wal_read_request(frame)
        assert self.hub is not None
        cfg = self.config
        wal = self.wal
        through = self.hub.last_seq
        n = max(1, min(max_records, cfg.txlog_read_max_records))
        records = await asyncio.get_running_loop().run_in_executor(
            None, wal.read_records, from_seq, through, n, cfg.txlog_read_max_bytes
        )
        self.txlog_reads += 1
        reply: bytes = encode_wal_read_reply(wal.first_seq, through, [r for _, r in records])
        return reply

    # ---- oracle ---------------------------------------------------------------------------------

    def oracle_commands(self) -> list[SetMarkPrice]:
        """SetMarkPrice per market whose book mid moved away from its mark (capped step)."""
        return oracle_commands(self._engine(), self.config.oracle_max_step_bps)

    # ---- maintenance: snapshot watch, WAL pruning -----------------------------------------------

    async def _maintain(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await loop.run_in_executor(None, self.maintain_once)
            await asyncio.sleep(self.config.maintenance_interval_s)

    def maintain_once(self) -> list[Path]:
        """Look at the snapshot folder; after a new snapshot, prune the WAL behind it (see the
        module docstring). Runs on a worker thread; returns the segments deleted."""
        cfg = self.config
        dirs = snapshots(Path(cfg.snapshot_dir))
        if not dirs:
            return []
        newest, oldest = snapshot_seq(dirs[-1]), snapshot_seq(dirs[0])
        if newest != self.snapshot.seq:
            try:
                state_hash = str(read_snapshot_meta(dirs[-1]).get("state_digest", ""))
            except (OSError, ValueError, KeyError) as exc:  # being moved aside, or damaged
                log.warning("snapshot %s has no readable meta.json: %r", dirs[-1], exc)
                return []
            self.snapshot = SnapshotInfo(newest, state_hash, oldest)
        through = min(oldest, newest - cfg.wal_keep_blocks)
        if through <= self.pruned_through:
            return []
        removed = self.wal.prune(through)
        self.pruned_through = through
        if removed:
            self.pruned_segments += len(removed)
            log.info(
                "WAL pruned through seq %d (%d segments) behind snapshot seq %d",
                through,
                len(removed),
                newest,
            )
        return removed

    # ---- control plane --------------------------------------------------------------------------

    def state_hash(self) -> dict[str, Any]:
        """The current state hash (``raydex.engine.state_digest``, the one every role reports)
        and the seq it reflects. O(state), on the block loop: for tests and operators, never for
        periodic polling (``status`` is O(1): the newest snapshot's, with its seq)."""
        p = self.producer
        return {
            "seq": p.seq if p else 0,
            "state_hash": state_digest(p.engine.records()).hex() if p else "",
        }

    def replication_status(self) -> dict[str, Any]:
        """Durability mode, the standby's ack and lag, degraded or not (O(1))."""
        r = self.replicator
        return {
            "durability": self.config.durability,
            "standby": r.target if r else None,
            "standby_name": self.standby_name or None,
            "acked_seq": r.acked if r else None,
            "lag_blocks": r.lag if r else None,
            "connected": r.connected if r else None,
            "degraded": self.degraded,
            "in_sync": self.standby_in_sync,
            "degradations": self.degradations,
            "fenced_by": self.fenced_by or None,
            "error": r.error if r else None,
        }

    def status(self) -> dict[str, Any]:
        """O(1): counters, ports, and the newest snapshot's state hash with its seq."""
        p = self.producer
        wal = p.wal if p else None
        return {
            "pid": os.getpid(),
            "signatures": signing.BACKEND,
            "verifies_signatures": bool(self.producer and self.producer.verify_signatures),
            # whose batches are checked here: "all", "other hosts" (auto with a secret), "none"
            "signature_policy": self.signature_policy(),
            "seq": p.seq if p else 0,
            "height": p.height if p else 0,
            "state_hash": self.snapshot.state_hash,
            "state_hash_seq": self.snapshot.seq,
            "failed": self.failed,
            "data_host": self.config.data_host,
            "data_port": self.port,
            "txlog_port": self.txlog_port,
            "data_plane": {
                "plane": self.config.data_plane,
                "authenticated": bool(self.config.data_plane_secret),
                # the Unix-domain sockets followers on this host use (TCP plane; else None)
                "unix": {
                    "blocks": self.server.unix_path if self.server else None,
                    "txlog": self.txlog_server.unix_path if self.txlog_server else None,
                },
                "refused_calls": sum(
                    srv.refused for srv in (self.server, self.txlog_server) if srv is not None
                ),
                # connections turned away before they showed the secret, by reason
                "preauth_refused": {
                    r: sum(p.refused[r] for p in self.preauth) for r in PREAUTH_REASONS
                },
                "unauthenticated_open": sum(p.open for p in self.preauth),
                "batches_refused": self.batches_refused,
            },
            "replayed_blocks": self.replayed,
            "epoch": self.epoch,
            "replication": self.replication_status(),
            # the last start: the log's end, the followers' answers, blocks checked / restored
            "recovery": dataclasses.asdict(self.recovery),
            "blocks": self.blocks,
            "wal": {
                "first_seq": wal.first_seq if wal else 0,
                "last_seq": wal.last_seq if wal else 0,
                "torn_bytes": wal.torn_bytes if wal else 0,
                # segments this process started: preallocated, or ordinary (no spare was ready)
                "segments_preallocated": wal.preallocated_segments if wal else 0,
                "segments_appended": wal.plain_segments if wal else 0,
                "sync_us": wal.fsync_time.summary_us() if wal else {},
                "journal_policy": self.journal.policy if self.journal is not None else "",
                "handoff_us": self.handoff_time.summary_us(),
                "pruned_through": self.pruned_through,
                "pruned_segments": self.pruned_segments,
                "txlog_reads": self.txlog_reads,
            },
            "loop_restarts": {n: self.supervisor.restarts(n) for n in self.supervisor.tasks},
            "block_time_us": self.block_time.summary_us(),
            "block_close_us": self.close_time.summary_us(),
            "block_txs": self.block_txs.summary_us(scale_ns=False),
            # CPU per step since the start (ns; ``steps.py``), the journal's as ``wal_ns``
            "steps": self.steps.as_dict(self.journal.cpu_ns if self.journal is not None else 0),
            "hub": dataclasses.asdict(self.hub.statistics()) if self.hub else {},
        }


def _stamped(block: ClosedBlock) -> bytes:
    """The holder's frame of ``block``: its deltas stamped with its WAL record's crc."""
    frame: bytes = stamp_block(block.frame, wal_record_crc(block.wal_record))
    return frame


class SequencerActor:
    """Ray shell around :class:`SequencerService` (wrap with ``ray.remote``; see ``deploy``).

    Starts as soon as it is created *and whenever Ray restarts it* (the start task is scheduled
    from ``__init__``): it recovers from the newest usable snapshot plus the WAL, asks the
    deployment's followers (every other named actor of its namespace: the holder, the committer,
    the replicas) what they applied, checks and repairs its log's tail from them
    (``repair.py``), so a crash loses nothing acknowledged, and reopens the data plane on its
    configured ports. A log it cannot use (damage, an altered record, a tail it cannot repair:
    ``WalError``) is a refused start: the actor stays up without serving, its status and live
    line say why (``refused``), the error is logged, and it tries again every
    ``repair_timeout_s``. Any other failed start, or a fault that stops the sequencer later (a
    WAL write error), exits the process after logging why, so Ray restarts it instead of keeping
    a live actor that answers nothing.
    """

    def __init__(self, config: SequencerConfig, bundle: Any = None, gc_spec: Any = None) -> None:
        self.service = SequencerService(
            config, on_fatal=exit_process, followers=self._ask_followers
        )
        self.runtime = ActorRuntime(bundle, gc_spec)
        #: why the sequencer does not serve yet (a refused start), None once it serves
        self.refused: str | None = None
        self.refusals = 0
        self.service.metrics.counter_fn(
            "raydex_sequencer_refused_starts_total", lambda: self.refusals
        )
        #: the arbiter's handle (None: no arbiter in this deployment, or outside Ray)
        self.arbiter: Any = None
        #: named actors of the deployment that are not followers (never asked ``held_blocks``)
        self.not_followers: tuple[str, ...] = (ARBITER_NAME,)
        self._lease_task: asyncio.Task[None] | None = None
        self._started = asyncio.get_event_loop().create_task(self._start())

    async def _start(self) -> int:
        self.runtime.before_boot()
        cfg = self.service.config
        booted = False
        while True:
            try:
                await self._claim()
                port = await self.service.start()
                break
            except (WalError, Fenced) as exc:  # the log cannot be used, or another primary
                self.refusals += 1
                self.refused = str(exc)
                log.error("SEQUENCER REFUSES TO START (attempt %d): %s; trying again in %.0f s",
                          self.refusals, exc, max(1.0, cfg.repair_timeout_s))  # fmt: skip
                if not booted:  # status, metrics and the live line while it refuses
                    self.runtime.after_boot(self.service.metrics, live=self.live)
                    booted = True
                await asyncio.sleep(max(1.0, cfg.repair_timeout_s))
            except Exception as exc:  # any other failed start: exit so that Ray restarts us
                log.exception("sequencer start failed")
                exit_process(f"sequencer start failed: {exc!r}")
        if self.refused is not None:
            log.warning("sequencer serving after %d refused starts", self.refusals)
        self.refused = None
        if not booted:
            self.runtime.after_boot(self.service.metrics, busy_poll=cfg.busy_poll, live=self.live)
        self._hold_lease()
        return port

    # ---- the arbiter: epoch, lease, fencing (``arbiter.py``) -------------------------------------

    async def _find_arbiter(self) -> Any:
        """The deployment's arbiter actor, or None (none deployed; outside Ray)."""
        ray = sys.modules.get("ray")
        if ray is None or not ray.is_initialized():
            return None
        loop = asyncio.get_running_loop()
        namespace = current_namespace()
        try:
            return await loop.run_in_executor(
                None, lambda: ray.get_actor(ARBITER_NAME, namespace=namespace)
            )
        except ValueError:
            return None

    def _name(self) -> str:
        ray = sys.modules.get("ray")
        if ray is None or not ray.is_initialized():
            return ""
        return str(ray.get_runtime_context().get_actor_name() or "")

    async def _claim(self) -> None:
        """Before serving: the arbiter grants this sequencer the primary's epoch, or it is
        fenced (another sequencer took over): ``Fenced``, a refused start."""
        self.arbiter = arbiter = await self._find_arbiter()
        if arbiter is None:
            return
        verdict: Verdict = await arbiter.acquire.remote(self._name())
        if not verdict.granted:
            raise Fenced(f"fenced: {verdict.reason}; this sequencer may not sequence")
        self._serve_epoch(verdict.epoch)

    def _serve_epoch(self, epoch: int) -> None:
        svc = self.service
        svc.epoch = epoch
        svc.on_degrade = lambda: self._standby_sync(False)
        svc.on_in_sync = lambda: self._standby_sync(True)

    async def _standby_sync(self, in_sync: bool) -> bool:
        """Tell the arbiter whether the standby holds every acknowledged block; granted only
        to the current primary (a refusal fences this one)."""
        if self.arbiter is None:
            return True
        svc = self.service
        try:
            verdict: Verdict = await self.arbiter.standby_sync.remote(
                self._name(), svc.epoch, svc.standby_name, in_sync
            )
        except Exception as exc:  # the arbiter unreachable: not allowed (wait, safely)
            log.warning("arbiter unreachable (standby in sync: %s): %r", in_sync, exc)
            return False
        if not verdict.granted:
            svc._fatal(f"fenced: {verdict.reason}")
        return bool(verdict.granted)

    def _hold_lease(self) -> None:
        if self.arbiter is not None and self._lease_task is None:
            self._lease_task = asyncio.get_running_loop().create_task(self._renew())

    async def _renew(self) -> None:
        """Renew the lease every third of it; a refusal fences this sequencer (it exits, and
        its restart is refused by ``acquire``). An unreachable arbiter is logged: the standby
        cannot ack this primary's blocks once it took over, so nothing is lost meanwhile."""
        svc = self.service
        while True:
            await asyncio.sleep(DEFAULT_LEASE_S / 3)
            try:
                verdict: Verdict = await self.arbiter.renew.remote(self._name(), svc.epoch)
            except Exception as exc:
                log.warning("lease renewal failed: %r", exc)
                continue
            if not verdict.granted:
                svc._fatal(f"fenced at lease renewal: {verdict.reason}")
                return

    async def _ask_followers(
        self, since: int, frames_after: int
    ) -> tuple[list[HeldBlocks], list[str]]:
        """Every other named actor of this deployment's namespace that has ``held_blocks`` (the
        followers: not the monitor, not a user's own actor), asked it at once
        (``runtime/held.py``), within ``repair_timeout_s``: the answers, and the names that gave
        none (a replica still booting answers that it holds nothing). Outside a Ray actor (the
        shell run in a plain process) there are no followers to ask."""
        ray = sys.modules.get("ray")
        if ray is None or not ray.is_initialized():
            return [], []  # never imports or starts Ray itself
        loop = asyncio.get_running_loop()
        me = ray.get_runtime_context().get_actor_name()
        if me is None:  # a driver, not the sequencer actor
            return [], []
        listed = await loop.run_in_executor(
            None, lambda: ray.util.list_named_actors(all_namespaces=True)
        )
        # the actor's own namespace (the runtime context names the job's): the deployment's
        # (``current_namespace``: deploy sets it), else the only one holding an actor of our name
        namespace = current_namespace()
        mine = {a.get("namespace") for a in listed if a["name"] == me}
        if namespace not in mine and len(mine) == 1:
            namespace = str(mine.pop())
        names = sorted(
            a["name"]
            for a in listed
            if a.get("namespace") == namespace and a["name"] not in (me, *self.not_followers)
        )

        others: set[str] = set()  # named actors that hold no blocks: not followers

        async def ask(name: str) -> HeldBlocks | None:
            actor = await loop.run_in_executor(
                None, lambda: ray.get_actor(name, namespace=namespace)
            )
            if not hasattr(actor, "held_blocks"):  # the deployment's monitor, a user's own actor
                others.add(name)
                return None
            held: HeldBlocks | None = await actor.held_blocks.remote(since, frames_after)
            return held

        tasks = {name: asyncio.ensure_future(ask(name)) for name in names}
        if tasks:
            await asyncio.wait(tasks.values(), timeout=self.service.config.repair_timeout_s)
        answers: list[HeldBlocks] = []
        silent: list[str] = []
        for name, task in tasks.items():
            if name in others:
                continue
            if not task.done():
                task.cancel()
                silent.append(name)
            elif task.exception() is not None:
                log.warning("sequencer start: %s did not answer: %r", name, task.exception())
                silent.append(name)
            elif (held := task.result()) is not None:
                answers.append(held)
        return answers, silent

    async def _ensure_started(self) -> SequencerService:
        await self._started
        return self.service

    async def start(self) -> dict[str, Any]:
        """Wait until the sequencer serves; its :meth:`status`."""
        await self._ensure_started()
        return await self.status()

    async def operator(self, txs: list[Any]) -> list[TxOutcome]:
        """Operator commands (deposits, markets, oracle, funding, key registration), answered
        once their block is durable *and* a follower applied it (or ``repair_timeout_s`` passed,
        logged): like a client's tx, an operator's is acknowledged only when a copy of its block
        exists outside the log, so a damaged log tail can always be repaired (``repair.py``)."""
        svc = await self._ensure_started()
        outcomes = await svc.submit(txs, operator=True)
        if outcomes:
            await self._witnessed(max(o.seq for o in outcomes))
        return outcomes

    async def _witnessed(self, seq: int) -> None:
        """Wait until a follower applied block ``seq`` (none deployed yet, or outside Ray: at
        once), at most ``repair_timeout_s``."""
        loop = asyncio.get_running_loop()
        end = loop.time() + self.service.config.repair_timeout_s
        while True:
            answers, silent = await self._ask_followers(seq, 1 << 62)
            if any(a.seq >= seq for a in answers) or not (answers or silent):
                return
            if loop.time() >= end:
                log.warning("operator commands of block %d answered before any follower "
                            "applied it (none within %.0f s)", seq,
                            self.service.config.repair_timeout_s)  # fmt: skip
                return
            await asyncio.sleep(0.01)

    async def account_by_l1(self, l1_address: bytes) -> int | None:
        """The account index of an L1 address (20 bytes), or None (``raydex deposit``)."""
        svc = await self._ensure_started()
        producer = svc.producer
        return None if producer is None else producer.engine.account_by_l1(l1_address)

    async def submit(self, frame: bytes) -> bytes:
        """The Ray-call transport's tx handler (deployments send batches over the data plane)."""
        svc = await self._ensure_started()
        return await svc.handle_batch(frame)

    async def status(self) -> dict[str, Any]:
        """The service's status (also while the start is refused: ``refused`` says why);
        answered at once, never waiting for the start."""
        svc = self.service
        return {
            **svc.status(),
            **self.runtime.status(),
            "refused": self.refused,
            "refused_starts": self.refusals,
            "address": advertised_host(),
            "repr": self.live(),
        }

    def __repr__(self) -> str:
        """What Ray records when ``__init__`` returns: the fixed facts of :meth:`live` and where
        the live ones are (``actors/runtime/shell.py``)."""
        return self.live(fixed=True)

    def live(self, fixed: bool = False) -> str:
        """Role, deployment/name, state, seq, the newest snapshot's state hash (with its seq),
        ports and placement (see ``actors/runtime/shell.py`` for what Ray shows of it)."""
        svc = self.service
        p = svc.producer
        cfg = svc.config
        snap = svc.snapshot
        state = (
            "failed" if svc.failed
            else "refused" if self.refused
            else "serving" if p is not None and svc.server is not None
            else "booting"
        )  # fmt: skip
        return self.runtime.describe(
            "sequencer",
            {
                "state": state,
                "seq": p.seq if p is not None else None,
                "hash": short_hash(snap.state_hash, snap.seq),
                "data": svc.port or cfg.data_port or None,
                "txlog": svc.txlog_port or cfg.txlog_port or None,
            },
            fixed=fixed,
        )

    async def set_standby(self, target: str, name: str) -> None:
        """Replicate to a new standby (``raydex deploy`` after it placed one): the arbiter first
        records the standby out of sync (it may not take over before it caught up)."""
        svc = await self._ensure_started()
        svc.standby_name = name
        if not await self._standby_sync(False):
            raise RuntimeError(
                "the arbiter did not record the new standby (unreachable, or fenced)"
            )
        await svc.set_standby(target, name)

    async def data_plane_secret(self) -> str:
        """The deployment's data-plane secret, for ``raydex deploy`` to hand to new followers.
        A Ray call: only members of the Ray cluster (Ray's own token auth) can make it."""
        return self.service.config.data_plane_secret

    async def state_hash(self) -> dict[str, Any]:
        """The current state hash (O(state), pauses the block loop; see the service)."""
        svc = await self._ensure_started()
        return svc.state_hash()

    async def stop(self) -> None:
        await self._started
        await self.service.stop()
