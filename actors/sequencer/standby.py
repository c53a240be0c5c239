"""The standby sequencer: a second log and a hot engine on another host, ready to take over.

::

    primary ──Replicate(epoch | records)──► StandbyService.replicate
                                              │ seq in order? epoch not older? (else GAP/FENCED)
                                              ├─► Journal: write + sync its own WAL (group commit)
                                              ├─► BlockProducer.replay: the same block, applied
                                              └─► answer REPLICATE_OK(seq) once synced
    takeover: promote(epoch) ─► stop following, drain the journal ─► a SequencerService on the
              same producer, WAL and ring (no replay) ─► serves the data plane as the primary

Invariants:
- The standby writes the primary's records byte for byte, in seq order, each once: a record
  for a seq it holds is acked again when its crc is the one held (a resend after a reconnect),
  answered DIVERGED otherwise; a record after a gap is answered GAP with what it holds.
- An ack (REPLICATE_OK) names a seq only once every record up to it is synced to its disk; the
  primary releases a block's outcomes only with that ack (replicated durability), so every
  acknowledged tx is on both hosts.
- It refuses (FENCED) every request of an epoch older than the newest it has seen; promotion
  raises its epoch first, so the old primary can never get another block acked.
- Its engine applies each record as it arrives (the primary's ``replay``: same frames, same
  state hash), so a takeover starts serving from memory without replaying the log.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import shutil
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raydex.codecs import (
    REPLICATE_DIVERGED,
    REPLICATE_FENCED,
    REPLICATE_GAP,
    REPLICATE_OK,
    CodecError,
    Verifier,
    decode_replicate,
    decode_wal_record,
    peek_wal_record,
    wal_record_crc,
)
from raydex.codecs import (
    encode_replicate_reply as _encode_reply,
)
from raydex.engine import state_digest

from ..runtime import (
    HeldBlocks,
    advertised_host,
    current_namespace,
    exit_process,
    held_blocks,
    log_fatal,
)
from ..snapshot.store import snapshot_seq, snapshots, write_snapshot
from ..transport import BlockHub, data_plane_server
from .arbiter import Verdict
from .journal import Journal
from .producer import BlockProducer, ClosedBlock
from .repair import AskFollowers
from .service import SequencerActor, SequencerConfig, SequencerService

log = logging.getLogger(__name__)


#: snapshots a standby keeps in its folder (the WAL is kept back to the oldest)
SNAPSHOTS_KEPT = 3
#: seconds a standby waits for Ray's word on the primary's node in one round of its watch
NODE_LOOK_S = 1.0


class _Frozen:
    """The state as listed at one seq (immutable records) and its hash: what a snapshot is
    written from off the loop while the engine moves on."""

    def __init__(self, records: tuple[Any, ...], state_hash: bytes) -> None:
        self._records, self._hash = records, state_hash

    def records(self) -> tuple[Any, ...]:
        return self._records

    def state_hash(self) -> bytes:
        return self._hash


def record_epoch(record: bytes) -> int:
    """The epoch a WAL record carries (0 for layout 2)."""
    info = peek_wal_record(record)
    return int(info.epoch) if info is not None else 0


def _reply(kind: int, seq: int, epoch: int) -> bytes:
    reply: bytes = _encode_reply(kind, seq, epoch)
    return reply


class StandbyService:
    """Asyncio core of the standby (see module docstring); ``promote`` turns it into the
    primary's :class:`SequencerService`."""

    def __init__(
        self, config: SequencerConfig, on_fatal: Callable[[str], None] = log_fatal, epoch: int = 0
    ) -> None:
        self.config = config
        self.on_fatal = on_fatal
        #: the newest epoch seen (a primary's request, or this standby's own promotion)
        self.epoch = epoch
        self.producer: BlockProducer | None = None
        self.journal: Journal | None = None
        self.server: Any = None
        self.port = 0
        #: newest seq handed to the journal / synced
        self.received = 0
        self.durable = 0
        self.requests = 0
        self.fenced_requests = 0
        self.gaps = 0
        self.diverged = 0
        #: when the newest record arrived (monotonic s; 0: none yet)
        self.last_record_at = 0.0
        #: why the standby stopped (None while it follows)
        self.failed: str | None = None
        self.promoted = False
        #: crc of the newest records by seq (a resend is acked when it matches)
        self._crcs: dict[int, int] = {}
        self._crc_order: deque[int] = deque()
        #: the newest blocks applied, re-served by the hub after a promotion
        self._kept: deque[ClosedBlock] = deque(maxlen=config.ring_size)
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._ids = itertools.count()
        self._turn = asyncio.Lock()
        #: the newest snapshot in its folder, and how many it wrote
        self.snapshot_seq = 0
        self.snapshots_written = 0
        self._snapshotting: asyncio.Task[None] | None = None

    async def start(self) -> int:
        """Recover its own log (newest usable snapshot + WAL), open the journal and serve
        replication on ``replication_port``; the port."""
        cfg = self.config
        wal = cfg.open_wal()
        try:
            self.producer, replayed = BlockProducer.recover(
                Path(cfg.snapshot_dir), wal, Verifier(cfg.chain_id), keep_blocks=cfg.ring_size
            )
        except BaseException:
            wal.close()
            raise
        self._kept.extend(self.producer.recovered_blocks)
        self.producer.recovered_blocks.clear()
        for block in self._kept:
            self._remember(block.seq, wal_record_crc(block.wal_record))
        self.received = self.durable = self.producer.seq
        log.info("standby recovered at seq %d (%d WAL blocks replayed)", self.received, replayed)
        loop = asyncio.get_running_loop()
        self.journal = Journal(
            wal, loop, self._on_durable, self._on_journal_error, realtime=cfg.journal_realtime
        )
        self.journal.start()
        self.server = data_plane_server(
            cfg.data_plane,
            BlockHub(ring_size=1),
            self.replicate,
            host=cfg.data_host,
            port=cfg.replication_port,
            secret=cfg.data_plane_secret,
            unix_dir=cfg.unix_socket_dir if cfg.unix_sockets else None,
        )
        self.port = await self.server.start()
        self.snapshot_seq = max(
            (snapshot_seq(d) for d in snapshots(Path(cfg.snapshot_dir))), default=0
        )
        if cfg.standby_snapshot_blocks > 0:
            self._snapshotting = loop.create_task(self._snapshot_loop(), name="standby-snapshots")
        return self.port

    # ---- its own snapshots (and WAL pruning behind them) ----------------------------------------

    async def _snapshot_loop(self) -> None:
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.maintenance_interval_s)
            p = self.producer
            if p is not None and p.seq - self.snapshot_seq >= cfg.standby_snapshot_blocks:
                try:
                    await self.snapshot_now()
                except Exception:  # logged; the WAL is kept meanwhile, nothing is lost
                    log.exception("standby snapshot failed")

    async def snapshot_now(self) -> Path:
        """Write a snapshot of the state applied now (once its block is synced here), keep the
        newest ``SNAPSHOTS_KEPT``, and prune the WAL behind the oldest of them (and
        ``wal_keep_blocks``). The state is listed on the loop (O(state)); the files are written
        on a worker thread."""
        p = self.producer
        assert p is not None and p.wal is not None, "start() first"
        cfg = self.config
        state = _Frozen(tuple(p.engine.records()), p.engine.state_hash())
        seq, height, crc = p.seq, p.height, self._crcs.get(p.seq)
        await self._durable_through(seq)  # never a snapshot of a block this log may lose
        folder, wal = Path(cfg.snapshot_dir), p.wal

        def write() -> Path:
            path, _ = write_snapshot(folder, state, seq, height, crc)
            for old in snapshots(folder)[:-SNAPSHOTS_KEPT]:
                shutil.rmtree(old, ignore_errors=True)
            oldest = snapshot_seq(snapshots(folder)[0])
            wal.prune(min(oldest, seq - cfg.wal_keep_blocks))
            return path

        path = await asyncio.get_running_loop().run_in_executor(None, write)
        self.snapshot_seq = seq
        self.snapshots_written += 1
        return path

    # ---- following ------------------------------------------------------------------------------

    async def replicate(self, frame: bytes) -> bytes:
        """The replication handler: ``Replicate(epoch | records)`` in, a ``REPLICATE_*`` reply
        out (see the module docstring). An empty request asks what the standby holds."""
        epoch, records = decode_replicate(frame)
        self.requests += 1
        if self.promoted or epoch < self.epoch or self.failed is not None:
            self.fenced_requests += 1
            return _reply(REPLICATE_FENCED, self.durable, self.epoch)
        self.epoch = epoch
        async with self._turn:  # requests of one stream come in order; a reconnect's may overlap
            top = 0
            for seq, record in records:
                if record_epoch(record) > epoch:  # a primary sends its own and older epochs only
                    raise CodecError(f"record {seq} of epoch {record_epoch(record)} > {epoch}")
                if seq <= self.received:
                    if not await self._holds(seq, record):
                        self.diverged += 1
                        return _reply(REPLICATE_DIVERGED, seq, self.epoch)
                    top = seq
                    continue
                if seq != self.received + 1:
                    self.gaps += 1
                    return _reply(REPLICATE_GAP, self.received, self.epoch)
                self._append(seq, record)
                top = seq
        if not records:
            return _reply(REPLICATE_OK, self.durable, self.epoch)
        await self._durable_through(top)
        return _reply(REPLICATE_OK, self.durable, self.epoch)

    def _append(self, seq: int, record: bytes) -> None:
        producer, journal = self.producer, self.journal
        assert producer is not None and journal is not None, "start() first"
        journal.submit(seq, record)  # the disk works while the engine applies it
        self.received = seq
        self.last_record_at = time.monotonic()
        self._remember(seq, wal_record_crc(record))
        try:
            block = producer.replay(decode_wal_record(record))
        except (CodecError, ValueError) as exc:  # logged by the primary: a bug, not damage
            self._fail(f"block {seq} from the primary does not apply: {exc!r}")
            raise
        self._kept.append(block)

    async def _holds(self, seq: int, record: bytes) -> bool:
        """Whether the record held at ``seq`` (at most ``received``) is ``record``."""
        crc = wal_record_crc(record)
        held = self._crcs.get(seq)
        if held is None:
            await self._durable_through(seq)
            assert self.producer is not None and self.producer.wal is not None
            got = self.producer.wal.read_records(seq, seq, 1, 1)
            held = wal_record_crc(got[0][1]) if got and got[0][0] == seq else None
        return bool(held == crc)

    def _remember(self, seq: int, crc: int) -> None:
        self._crcs[seq] = crc
        self._crc_order.append(seq)
        while len(self._crc_order) > self.config.ring_size:
            self._crcs.pop(self._crc_order.popleft(), None)

    async def _durable_through(self, seq: int) -> None:
        if self.durable >= seq:
            return
        if self.failed is not None:
            raise RuntimeError(self.failed)
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (seq, next(self._ids), fut))
        await fut

    def _on_durable(self, seq: int, fsync_ns: int = 0, synced_at_ns: int = 0) -> None:
        self.durable = max(self.durable, seq)
        if fsync_ns and self.producer is not None and self.producer.wal is not None:
            self.producer.wal.fsync_time.record(fsync_ns)
        w = self._waiters
        while w and w[0][0] <= seq:
            fut = heapq.heappop(w)[2]
            if not fut.done():
                fut.set_result(None)

    def _on_journal_error(self, exc: BaseException) -> None:
        self._fail(f"standby WAL write failed after seq {self.durable}: {exc!r}")

    def _fail(self, reason: str) -> None:
        if self.failed is None:
            self.failed = reason
            log.error("standby: %s", reason)
        while self._waiters:
            fut = heapq.heappop(self._waiters)[2]
            if not fut.done():
                fut.set_exception(RuntimeError(reason))
        self.on_fatal(reason)

    # ---- takeover -------------------------------------------------------------------------------

    async def promote(
        self,
        epoch: int,
        service: SequencerService | None = None,
        followers: AskFollowers | None = None,
        on_fatal: Callable[[str], None] | None = None,
    ) -> SequencerService:
        """Become the primary of ``epoch``: refuse the old primary from now on (FENCED), drain
        the journal (everything received is synced), and start a :class:`SequencerService` on
        this producer, WAL and ring (``service``: a service not started yet, e.g. the actor
        shell's, whose metrics it already exports; else a new one with ``followers`` and
        ``on_fatal``); it checks its tail against its followers as any start does
        (``repair.py``). Returns the serving service."""
        if epoch < self.epoch:
            raise ValueError(f"promotion to epoch {epoch}: this standby has seen {self.epoch}")
        self.epoch = epoch
        self.promoted = True
        await self._stop_snapshots()
        async with self._turn:
            journal = await self._close_serving()
            if journal is not None:
                if journal.error is not None:
                    raise RuntimeError(f"the standby's WAL failed: {journal.error!r}")
                self._on_durable(journal.durable_seq)
        producer = self.producer
        assert producer is not None, "start() first"
        producer.recovered_blocks = deque(self._kept)
        self._kept.clear()
        if service is None:
            service = SequencerService(
                self.config, on_fatal=on_fatal or self.on_fatal, followers=followers
            )
        service.preload(producer, epoch)
        await service.start()
        log.warning("standby promoted: primary of epoch %d from seq %d", epoch, producer.seq)
        return service

    async def _stop_snapshots(self) -> None:
        if self._snapshotting is not None:
            self._snapshotting.cancel()
            await asyncio.gather(self._snapshotting, return_exceptions=True)
            self._snapshotting = None

    async def _close_serving(self) -> Journal | None:
        """Stop serving replication and close the journal (its last writes synced); the closed
        journal, None if none was open."""
        if self.server is not None:
            await self.server.stop()
            self.server = None
        journal, self.journal = self.journal, None
        if journal is not None:
            await asyncio.get_running_loop().run_in_executor(None, journal.close)
        return journal

    async def stop(self) -> None:
        await self._stop_snapshots()
        await self._close_serving()
        if self.producer is not None and self.producer.wal is not None:
            self.producer.wal.close()

    # ---- control plane --------------------------------------------------------------------------

    def held_blocks(self, name: str, since: int, frames_after: int) -> HeldBlocks:
        """Its answer to a primary repairing its log's tail: the newest seq applied and the
        frames it keeps (``runtime/held.py``)."""
        p = self.producer
        frames = [(b.seq, b.frame) for b in self._kept]
        return held_blocks(name, "standby", p.seq if p else 0, frames, since, frames_after)

    def state_hash(self) -> dict[str, Any]:
        """The state hash of what it applied (O(state)), with its seq."""
        p = self.producer
        return {
            "seq": p.seq if p else 0,
            "state_hash": state_digest(p.engine.records()).hex() if p else "",
        }

    def status(self) -> dict[str, Any]:
        """O(1): what it received, synced and applied, its epoch, and how long since a record."""
        p = self.producer
        return {
            "role": "standby",
            "epoch": self.epoch,
            "received_seq": self.received,
            "durable_seq": self.durable,
            "applied_seq": p.seq if p else 0,
            "replication_port": self.port,
            "requests": self.requests,
            "fenced_requests": self.fenced_requests,
            "gaps": self.gaps,
            "diverged": self.diverged,
            "since_record_s": (
                round(time.monotonic() - self.last_record_at, 3) if self.last_record_at else None
            ),
            "snapshot_seq": self.snapshot_seq,
            "snapshots_written": self.snapshots_written,
            "failed": self.failed,
            "promoted": self.promoted,
        }


def _set_aside(folder: Path) -> Path | None:
    """Move a WAL folder that holds records aside (``<folder>.set-aside-<unix time>``), never
    deleting it: an old primary's log may end in blocks no one acknowledged, and a standby must
    hold a prefix of the new primary's log (``replication.StandbyMismatch``)."""
    if not any(folder.glob("wal-*.log")):
        return None
    aside = folder.with_name(f"{folder.name}.set-aside-{int(time.time())}")
    folder.rename(aside)
    log.warning("standby: the old log %s moved aside to %s", folder, aside)
    return aside


class StandbyActor(SequencerActor):
    """Ray shell of the standby (wrap with ``ray.remote``; see ``deploy``): follows the primary
    (:class:`StandbyService`), watches the arbiter and Ray's view of the primary's node, and
    takes over when the primary's lease lapsed or its node is dead (``arbiter.take_over``: only
    while it is in sync). Then it is the primary: the same control plane as
    :class:`SequencerActor` (``status``, ``operator``, ``state_hash``, ...), serving the data plane
    on its own host with the epoch the arbiter granted. A restart after the takeover finds
    itself named the primary and serves again (``acquire``)."""

    def __init__(
        self,
        config: SequencerConfig,
        bundle: Any = None,
        gc_spec: Any = None,
        primary: str = "sequencer",
        watch_s: float = 0.1,
        set_aside: bool = False,
    ) -> None:
        if set_aside:
            _set_aside(Path(config.wal_dir))
        self.follower = StandbyService(config, on_fatal=exit_process)
        #: the primary's actor name (its node is watched)
        self.primary = primary
        self.watch_s = watch_s
        #: seconds from the takeover's decision to serving (None: not taken over)
        self.takeover_s: float | None = None
        self._primary_node: str | None = None
        self._looking: asyncio.Future[bool] | None = None
        super().__init__(config, bundle, gc_spec)
        self.not_followers = (*self.not_followers, primary)  # the lost primary answers nothing

    async def held_blocks(self, since: int, frames_after: int) -> HeldBlocks:
        """What it applied (a primary restarting on its own log asks, ``repair.py``)."""
        return self.follower.held_blocks(self._name(), since, frames_after)

    async def _start(self) -> int:
        self.runtime.before_boot()
        try:
            await self.follower.start()
        except Exception as exc:  # exit so that Ray restarts us
            log.exception("standby start failed")
            exit_process(f"standby start failed: {exc!r}")
        self.runtime.after_boot(self.service.metrics, live=self.live)
        verdict = await self._await_takeover()
        t0 = time.monotonic()
        await self.follower.promote(verdict.epoch, self.service)
        self.takeover_s = round(time.monotonic() - t0, 3)
        log.warning("TAKEOVER: serving as the primary of epoch %d at seq %d (%.3f s after the "
                    "arbiter granted it)", verdict.epoch, self.follower.received,
                    self.takeover_s)  # fmt: skip
        self._hold_lease()
        return int(self.service.port)

    async def _await_takeover(self) -> Verdict:
        """Poll the arbiter (and Ray's node table for the primary's node) until it grants this
        standby the primary's epoch."""
        me = self._name()
        while True:
            await asyncio.sleep(self.watch_s)
            arbiter = self.arbiter = self.arbiter or await self._find_arbiter()
            if arbiter is None:
                continue
            try:
                view = await arbiter.view.remote()
                # follow no primary older than the arbiter's (a new standby after a takeover
                # must not take an old primary's records)
                self.follower.epoch = max(self.follower.epoch, int(view["epoch"]))
                if view["primary"] == me:  # taken over before a restart of this process
                    verdict: Verdict = await arbiter.acquire.remote(me)
                else:
                    dead = await self._primary_dead()
                    if view["lease_left_s"] > 0 and not dead:
                        continue
                    verdict = await arbiter.take_over.remote(me, view["epoch"], dead)
            except Exception as exc:  # the arbiter unreachable: nobody may take over
                log.warning("standby: arbiter call failed: %r", exc)
                continue
            if verdict.granted:
                self._serve_epoch(verdict.epoch)
                return verdict
            log.info("standby: no takeover: %s", verdict.reason)

    async def _primary_dead(self) -> bool:
        """Whether Ray reports the node the primary ran on dead (the node is looked up while
        the primary is alive, then watched). Read from the GCS this worker is connected to (the
        named actor's row, ``ray.nodes()``), never through the state API, which finds a cluster
        by itself and may pick another Ray of the host; and bounded by ``NODE_LOOK_S``: a slow
        answer counts as alive this round, so the lease alone still decides the takeover."""
        import ray

        def look() -> bool:
            if self._primary_node is None:
                from ray._private.state import state as gcs

                handle = ray.get_actor(self.primary, namespace=current_namespace())
                row = gcs.actor_table(handle._actor_id.hex())  # type: ignore[no-untyped-call]
                if row and row.get("State") == "ALIVE":
                    self._primary_node = (row.get("Address") or {}).get("NodeID") or None
                return False
            alive = {n["NodeID"]: n["Alive"] for n in ray.nodes()}  # type: ignore[no-untyped-call]
            return not alive.get(self._primary_node, False)

        if self._looking is None or self._looking.done():  # one look at a time
            self._looking = asyncio.get_running_loop().run_in_executor(None, look)
        try:
            return await asyncio.wait_for(asyncio.shield(self._looking), NODE_LOOK_S)
        except Exception as exc:  # slow, gone or unreadable: rely on the lease
            log.info("standby: Ray's view of the primary's node not read: %r", exc)
            return False

    async def status(self) -> dict[str, Any]:
        """The standby's status until it took over, the primary's after."""
        if self.follower.promoted and self._started.done():
            return {**(await super().status()), "role": "primary", "takeover_s": self.takeover_s}
        return {
            **self.follower.status(),
            **self.runtime.status(),
            "refused": None,
            "address": advertised_host(),
            "repr": self.live(),
        }

    async def state_hash(self) -> dict[str, Any]:
        if self.follower.promoted:
            return await super().state_hash()
        return self.follower.state_hash()

    def live(self, fixed: bool = False) -> str:
        if self.follower.promoted:
            return super().live(fixed)
        f = self.follower
        return self.runtime.describe(
            "standby",
            {"state": "failed" if f.failed else "following", "seq": f.durable, "epoch": f.epoch},
            fixed=fixed,
        )
