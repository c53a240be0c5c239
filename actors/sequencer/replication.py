"""The primary's side of replicated durability: its WAL records pushed to the standby, acked.

::

    close block N ─► journal.submit(N)      (local write + sync, journal thread)
                 └─► Replicator.submit(N) ──Replicate(epoch | records)──► standby: write, sync
    on_durable(N) ◄── journal                                               │
    on_acked(N)   ◄── REPLICATE_OK(N) ◄─────────────────────────────────────┘
    release block N once both are in: max(local sync, round trip + remote sync), not the sum

One request is in flight at a time and carries every record closed meanwhile (group commit across
the link, as the journal does on the disk). The standby answers each request with one of the
``codecs.REPLICATE_*`` kinds: OK (durable through seq), GAP (it holds less: the next request
starts after what it holds, read from this primary's WAL when no longer in memory), FENCED (it
follows a newer epoch: this primary is no longer the primary, ``on_fenced``) or DIVERGED (its log
holds another record at a seq: it must be rebuilt; counted and retried after a pause).

Invariants: records are sent in seq order, contiguous from what the standby holds; ``acked`` only
grows and is the newest seq the standby said is durable; a broken stream reconnects (bounded
backoff) and resends every record after ``acked``, which the standby takes idempotently (a seq it
holds with the same crc is acked again). On every connect the standby's newest record is
checked against this primary's at that seq before anything it holds counts as acked (a log that
is not a prefix of the primary's: ``StandbyMismatch``, retried; the primary degrades meanwhile).
Records kept in memory are those not acked, minus what
:meth:`Replicator.trim` dropped (a degraded primary: those are durable in the local WAL).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from raydex.codecs import (
    REPLICATE_DIVERGED,
    REPLICATE_FENCED,
    REPLICATE_GAP,
    REPLICATE_OK,
    CodecError,
    ReplicateReply,
    decode_replicate_reply,
    encode_replicate,
)

from ..transport import TransportError, TxChannel, tx_channel

log = logging.getLogger(__name__)


class StandbyMismatch(TransportError):
    """The standby's log is not a prefix of this primary's: it cannot follow until rebuilt."""


#: reads the local WAL's durable records ``from_seq..through_seq`` (at most ``max_bytes`` or so)
ReadWal = Callable[[int, int, int], Awaitable[list[tuple[int, bytes]]]]


class Replicator:
    """Keeps the standby at ``target`` following this primary's WAL (see module docstring)."""

    def __init__(
        self,
        target: str,
        epoch: int,
        read_wal: ReadWal,
        local_durable: Callable[[], int],
        on_acked: Callable[[int], None],
        on_fenced: Callable[[int], None],
        *,
        secret: str = "",
        max_request_bytes: int = 4 << 20,
        retry_s: float = 0.05,
        max_retry_s: float = 1.0,
    ) -> None:
        self.target = target
        self.epoch = epoch
        self.read_wal = read_wal
        self.local_durable = local_durable
        self.on_acked = on_acked
        self.on_fenced = on_fenced
        self.secret = secret
        self.max_request_bytes = max_request_bytes
        self.retry_s = retry_s
        self.max_retry_s = max_retry_s
        #: newest seq the standby said is durable (0 until it answered)
        self.acked = 0
        #: newest seq handed to :meth:`submit`
        self.submitted = 0
        #: the stream to the standby is open and answered its first request
        self.connected = False
        #: why the last attempt failed (None while connected)
        self.error: str | None = None
        self.requests = 0
        self.reconnects = 0
        self.diverged = 0
        #: the standby's epoch from a FENCED answer (0: never fenced)
        self.fenced_by = 0
        self._unacked: deque[tuple[int, bytes]] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="replicator")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def submit(self, seq: int, record: bytes) -> None:
        """Queue block ``seq``'s record (the loop thread, at close; never blocks)."""
        self._unacked.append((seq, record))
        self.submitted = seq
        self._wake.set()

    def trim(self, through: int) -> None:
        """Forget records ``<= through`` (durable in the local WAL; a degraded primary released
        them): a standby behind them gets them from the WAL instead of from memory."""
        q = self._unacked
        while q and q[0][0] <= through:
            q.popleft()

    @property
    def lag(self) -> int:
        """Blocks closed that the standby has not acked."""
        return max(0, self.submitted - self.acked)

    async def _run(self) -> None:
        delay = self.retry_s
        while True:
            channel = tx_channel(self.target, secret=self.secret)
            try:
                await self._follow(channel)
                return  # fenced
            except (TransportError, OSError, CodecError) as exc:
                self.error = repr(exc)
            finally:
                self.connected = False
                await channel.close()
            self.reconnects += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.max_retry_s)

    async def _follow(self, channel: TxChannel) -> None:
        submit = channel.submit
        # an empty request first: the standby says what it holds
        reply = decode_replicate_reply(await submit(encode_replicate(self.epoch, ())))
        if reply.kind == REPLICATE_OK and reply.seq > 0:
            # never trust what it holds blindly (an old primary's log, rejoining as a standby,
            # may end in blocks this primary never had): its newest record must be ours
            mine = await self._record_at(reply.seq)
            if mine is None:
                raise StandbyMismatch(
                    f"the standby holds blocks up to {reply.seq}, beyond this primary's log "
                    f"({self.local_durable()}): it must be rebuilt"
                )
            reply = decode_replicate_reply(await submit(encode_replicate(self.epoch, [mine])))
            if reply.kind == REPLICATE_DIVERGED:
                self.diverged += 1
                raise StandbyMismatch(
                    f"the standby holds another block at seq {reply.seq}: it must be rebuilt"
                )
        nxt = self._answer(reply)
        if nxt is None:
            return
        self.connected, self.error = True, None
        while True:
            records = await self._take(nxt)
            if not records:
                self._wake.clear()
                if self._next_available(nxt):
                    continue
                await self._wake.wait()
                continue
            self.requests += 1
            reply = decode_replicate_reply(await submit(encode_replicate(self.epoch, records)))
            nxt = self._answer(reply)
            if nxt is None:
                return
            if reply.kind == REPLICATE_DIVERGED:
                await asyncio.sleep(self.max_retry_s)

    def _answer(self, reply: ReplicateReply) -> int | None:
        """Act on a reply; the next seq to send, None when fenced."""
        kind, seq, epoch = reply
        if kind == REPLICATE_FENCED:
            self.fenced_by = epoch
            log.error(
                "the standby follows epoch %d (this primary's: %d): fenced", epoch, self.epoch
            )
            self.on_fenced(epoch)
            return None
        if kind == REPLICATE_DIVERGED:
            self.diverged += 1
            self.error = f"the standby holds another block at seq {seq}: it must be rebuilt"
            log.error("replication: %s", self.error)
            return int(seq)
        if kind == REPLICATE_OK and seq > self.acked:
            self.acked = seq
            self.trim(seq)
            self.on_acked(seq)
        elif kind not in (REPLICATE_OK, REPLICATE_GAP):
            raise CodecError(f"unknown replication reply kind {kind}", type_name="ReplicateReply")
        return int(seq) + 1

    async def _record_at(self, seq: int) -> bytes | None:
        """This primary's record of block ``seq`` (memory, else the local WAL), or None when it
        has none durable at that seq."""
        q = self._unacked
        if q and q[0][0] <= seq <= q[-1][0]:
            return q[seq - q[0][0]][1]
        if seq > self.local_durable():
            return None
        got = await self.read_wal(seq, seq, self.max_request_bytes)
        return got[0][1] if got and got[0][0] == seq else None

    def _next_available(self, nxt: int) -> bool:
        q = self._unacked
        return bool(q and q[-1][0] >= nxt) or self.local_durable() >= nxt

    async def _take(self, nxt: int) -> list[bytes]:
        """The records from ``nxt`` on, about ``max_request_bytes``: from memory, or from the
        local WAL for those no longer kept (they are durable there)."""
        q = self._unacked
        if q and q[0][0] <= nxt:
            out: list[bytes] = []
            size = 0
            for i in range(nxt - q[0][0], len(q)):
                record = q[i][1]
                if out and size + len(record) > self.max_request_bytes:
                    break
                out.append(record)
                size += len(record)
            return out
        through = q[0][0] - 1 if q else self.local_durable()
        if through < nxt:
            return []
        got = await self.read_wal(nxt, through, self.max_request_bytes)
        if got and got[0][0] != nxt:  # pruned behind a snapshot: not in this log any more
            raise StandbyMismatch(
                f"the standby needs block {nxt}, and this primary's log starts at {got[0][0]}: "
                "it must start from a snapshot"
            )
        return [r for _, r in got]
