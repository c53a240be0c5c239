"""Transport-agnostic core of the data plane: the interface, its errors, and the block hub.

The hub is the publisher's half of the block stream, shared by every transport:

- ``publish(seq, frame)`` appends to a bounded ring and offers the frame to every live
  subscription. It never awaits and never blocks: cost is O(subscribers) appends.
- Block seqs are contiguous: each publish carries ``last_seq + 1`` (anything else is a bug in the
  publisher and raises ``ValueError``). Contiguity is what lets a subscriber say "from seq N" and
  be sure nothing in between was missed.
- ``subscribe(from_seq)`` succeeds iff the hub can still produce every frame with
  ``seq >= from_seq``, i.e. ``from_seq > floor`` where ``floor`` is the newest seq no longer held
  (evicted from the ring, or published before this hub existed). Otherwise it raises
  :class:`ResyncRequired`: the subscriber must rebuild from a snapshot.
- A subscription replays the ring from ``from_seq``, then yields live frames. Its live queue is
  bounded (``queue_size`` frames, replay not counted). A subscriber whose queue is full when a
  frame arrives is cut off (policy: disconnect, counted in ``cut_off_total``); it is expected to
  reconnect from its last applied seq + 1 and replay from the ring, or resync.

Frames are opaque ``bytes`` shared by reference between the ring and all queues, so memory is
about ``ring_size`` frames regardless of subscriber count. ``ring_size`` trades memory for how
long a subscriber may be away and still catch up without a snapshot; ``queue_size`` trades memory
per subscriber for how long a burst a subscriber may lag before it is cut off.

The rulebook every network plane (gRPC, TCP and its Unix-domain sockets) follows, written once
here and called from each:

- membership: :func:`check_listen` refuses to serve off loopback without the deployment's secret,
  and :func:`admits` compares a caller's secret in constant time;
- before the secret is shown: :class:`PreAuth` bounds what a stranger can hold: a HELLO of at
  most ``MAX_HELLO`` bytes, ``hello_timeout_s`` to send it whole, ``max_per_peer`` connections
  per peer address and ``max_total`` in all that have not shown it yet; beyond, the connection is
  closed unread, and every refusal is counted by reason (:data:`PREAUTH_REASONS`);
- block order: :func:`accept_seq` drops a duplicate and turns a gap into :class:`ResyncRequired`;
  :meth:`Backoff.wait` paces the reconnects in between (the Ray plane too);
- tx batches: :class:`TxBounds` bounds the batches a server runs (per stream and in total), and
  :class:`PendingBatches` fails every batch in flight with :class:`TxStreamBroken` when a stream
  breaks (at most once: nothing is resent).

Everything here is single-event-loop code: call it from the loop that runs the transports.
"""

from __future__ import annotations

import asyncio
import enum
import hmac
import itertools
import logging
import secrets
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from raydex.observability.logbudget import LogBudget

log = logging.getLogger(__name__)

Frame = tuple[int, bytes]
T = TypeVar("T")


class StreamOrder:
    """One tx stream's batches, kept in arrival order through the sequencer's signature check
    (``SequencerService.handle_batch``): a member may keep several batches out on one stream
    (``MicroBatcher``), and the check yields between slices, so a later, smaller batch could
    finish its check first. Batches of different streams are not ordered against each other
    (a slow check on one stream never holds another). ``remote``: the stream comes from another
    host (a TCP peer whose address is not this machine's; a Unix socket never is), which the
    sequencer's signature policy looks at."""

    __slots__ = ("last", "remote")

    def __init__(self, remote: bool = False) -> None:
        #: resolved once the stream's latest batch to arrive has executed (or failed)
        self.last: asyncio.Future[None] | None = None
        self.remote = remote


#: The stream the running tx batch arrived on: each data-plane server sets a fresh
#: :class:`StreamOrder` per stream, and the tasks serving its batches inherit it.
TX_STREAM: ContextVar[StreamOrder | None] = ContextVar("raydex_tx_stream", default=None)

#: Tx batches a data-plane server runs at once per stream (both planes' default): a member may
#: keep this many out (``MicroBatcher``); the next one stays unread until one finishes.
MAX_INFLIGHT_PER_STREAM = 4

#: The publisher's tx batch handler: takes a request frame, returns the result frame.
TxHandler = Callable[[bytes], Awaitable[bytes]]


class TransportError(Exception):
    """Base of the data plane's expected failures (a broken stream is not a bug)."""


class ResyncRequired(TransportError):
    """``from_seq`` is older than anything the publisher still holds: resync from a snapshot."""

    def __init__(self, from_seq: int, floor: int) -> None:
        super().__init__(from_seq, floor)
        self.from_seq = from_seq
        self.floor = floor

    def __str__(self) -> str:
        return (
            f"seq {self.from_seq} is no longer held (ring starts after {self.floor}); "
            "resync from a snapshot"
        )


class TransportUnavailable(TransportError):
    """The publisher stayed unreachable for ``Backoff.max_attempts`` consecutive attempts."""


class NotAMember(TransportUnavailable):
    """The publisher refused the call (``UNAUTHENTICATED``): no or a wrong data-plane secret.
    Retrying does not help; the actor was deployed with another deployment's secret."""


def new_secret() -> str:
    """A fresh per-deployment data-plane secret (256 bits, hex): made by ``raydex deploy`` and
    handed to the actors through Ray, never written to a file."""
    return secrets.token_hex(32)


#: why a server turned a caller away (the cause its failed batches and errors name)
NOT_A_MEMBER = "not a member of this deployment"
#: addresses a data-plane server may listen on without a secret
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


def check_listen(host: str, secret: bytes) -> None:
    """Raise ``ValueError`` unless a server may listen on ``host`` with ``secret``: without one,
    only loopback (tests, embedded runs). Every data-plane server calls it before it binds."""
    if not secret and host not in LOOPBACK:
        raise ValueError(
            f"refusing to serve the data plane on {host} without a secret: only "
            "loopback may go without one (raydex deploy generates one per deployment)"
        )


def admits(secret: bytes, given: bytes) -> bool:
    """Whether a caller that presents ``given`` is a member: anyone when the server has no
    ``secret``, else exactly the secret (compared in constant time; a prefix is no secret)."""
    return not secret or hmac.compare_digest(given, secret)


#: the largest HELLO a server reads: the secret is 64 hex characters (``new_secret``)
MAX_HELLO = 256

#: why a connection was turned away before it showed the secret
PreAuthRefusal = Literal[
    "bad_secret", "hello_timeout", "hello_too_large", "not_hello", "per_peer", "total"
]
PREAUTH_REASONS: tuple[PreAuthRefusal, ...] = (
    "bad_secret", "hello_timeout", "hello_too_large", "not_hello", "per_peer", "total",
)  # fmt: skip


class PreAuth:
    """The connections of one server that have not shown the deployment's secret yet (see the
    module docstring): :meth:`admit` counts one as it opens (or refuses it), :meth:`release`
    when it authenticated or ended. ``peer`` is an address (TCP) or ``"unix"`` (the Unix-domain
    socket, mode 0600: this host's user only, so one key for all of it). Memory of a stranger's
    connection is bounded by the transport's read buffer (its high-water mark), not by what the
    stranger sends: nothing beyond ``MAX_HELLO`` is read before the secret matched."""

    def __init__(
        self, hello_timeout_s: float = 5.0, max_per_peer: int = 16, max_total: int = 256
    ) -> None:
        if hello_timeout_s <= 0 or max_per_peer < 1 or max_total < 1:
            raise ValueError("pre-auth bounds: a positive deadline and caps of at least 1")
        self.hello_timeout_s = hello_timeout_s
        self.max_per_peer = max_per_peer
        self.max_total = max_total
        self.open = 0
        self.per_peer: Counter[str] = Counter()
        #: refusals by reason (every one of ``PREAUTH_REASONS``, from 0)
        self.refused: Counter[str] = Counter(dict.fromkeys(PREAUTH_REASONS, 0))
        self.logs = LogBudget(log)

    def admit(self, peer: str) -> bool:
        """Count a connection from ``peer`` opening now; False (counted as refused) when it
        would pass a cap: the caller closes it unread."""
        if self.open >= self.max_total:
            self.refuse("total", peer)
            return False
        if self.per_peer[peer] >= self.max_per_peer:
            self.refuse("per_peer", peer)
            return False
        self.open += 1
        self.per_peer[peer] += 1
        return True

    def release(self, peer: str) -> None:
        """A connection :meth:`admit` counted showed the secret, or ended."""
        self.open -= 1
        left = self.per_peer[peer] - 1
        if left > 0:
            self.per_peer[peer] = left
        else:
            del self.per_peer[peer]

    def refuse(self, reason: PreAuthRefusal, peer: str) -> None:
        """Count (and log, within a budget: one line per reason per 10 s) a refusal."""
        self.refused[reason] += 1
        self.logs.warning(
            reason, "data plane: a connection from %s turned away before authenticating (%s); "
            "%d so far", peer, reason, self.refused[reason],
        )  # fmt: skip


def accept_seq(seq: int, next_seq: int) -> bool:
    """The block-order rule of a subscriber that needs ``next_seq``: True when ``seq`` is it
    (deliver, then need ``seq + 1``), False for an older seq (a duplicate: drop it); a newer
    seq is a gap that no reconnect can fill in order: :class:`ResyncRequired`."""
    if seq == next_seq:
        return True
    if seq < next_seq:
        return False
    raise ResyncRequired(next_seq, seq - 1)


class TxStreamBroken(TransportError):
    """The tx stream broke with this batch in flight: its outcome is unknown to the transport.

    Batches are never resent (at most once); the caller learns the outcome from the block stream
    (each executed tx appears as a ``TxExecuted`` event carrying its hash).
    """


class PendingBatches:
    """The batches out on one client tx stream, awaiting their results by batch id.

    The stream's reader hands each result to its batch (:meth:`resolve`); when the stream ends,
    for any reason, :meth:`fail` ends every batch still out with :class:`TxStreamBroken` naming
    the cause. Nothing is resent: the caller learns those batches' outcome from the blocks.
    """

    __slots__ = ("_futures",)

    def __init__(self) -> None:
        self._futures: dict[int, asyncio.Future[bytes]] = {}

    def add(self, batch_id: int) -> asyncio.Future[bytes]:
        """The future of a batch about to be written under ``batch_id``."""
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._futures[batch_id] = future
        return future

    def unsent(self, batch_id: int, cause: object = None) -> TxStreamBroken:
        """Forget a batch whose write failed; the error its ``submit`` raises (naming ``cause``
        when the stream's end is known, e.g. ``NOT_A_MEMBER``)."""
        self._futures.pop(batch_id, None)
        why = f" ({cause})" if cause is not None else ""
        return TxStreamBroken(f"tx stream broke before batch {batch_id} was sent{why}")

    def resolve(self, batch_id: int, result: bytes) -> None:
        """Hand ``result`` to its batch (an id no longer out is ignored)."""
        future = self._futures.pop(batch_id, None)
        if future is not None and not future.done():
            future.set_result(result)

    def fail(self, cause: object) -> None:
        """The stream broke: every batch still out fails with :class:`TxStreamBroken`."""
        for batch_id, future in self._futures.items():
            if not future.done():
                future.set_exception(TxStreamBroken(f"batch {batch_id}: tx stream broke ({cause})"))
        self._futures.clear()


class TxBounds:
    """How much tx work members can put on a data-plane server: at most ``per_stream`` batches
    run at once per stream (a member may pipeline that many) and ``total`` over all streams; a
    batch beyond either waits unread, so the transport's flow control holds the sender back and
    nothing is dropped. ``max_request_bytes`` caps one batch frame (each plane enforces it in its
    framing). One per server; :meth:`stream` per tx stream it serves.
    """

    __slots__ = ("_slots", "max_request_bytes", "per_stream")

    def __init__(
        self,
        per_stream: int = MAX_INFLIGHT_PER_STREAM,
        total: int = 64,
        max_request_bytes: int = 8 << 20,
    ) -> None:
        if per_stream < 1 or total < 1 or max_request_bytes < 64:
            raise ValueError("in-flight bounds must be >= 1 and max_request_bytes >= 64")
        self.per_stream = per_stream
        self.max_request_bytes = max_request_bytes
        self._slots = asyncio.Semaphore(total)

    def stream(self, remote: bool = False) -> StreamBatches:
        """The bounds of a tx stream opening now. Sets :data:`TX_STREAM` to a fresh
        :class:`StreamOrder` (``remote``: from another host) in the calling task's context,
        which its batch tasks inherit."""
        TX_STREAM.set(StreamOrder(remote))
        return StreamBatches(self._slots, self.per_stream)


class StreamBatches:
    """One server tx stream's batches: read only while the stream is under its bound
    (:meth:`admit`), each run as its own task (:meth:`start`), so their results may go back in
    any order. The stream's owner cancels what is left when the stream ends (:meth:`cancel`)."""

    __slots__ = ("_mine", "_running", "_slots")

    def __init__(self, slots: asyncio.Semaphore, per_stream: int) -> None:
        self._slots = slots
        self._mine = asyncio.Semaphore(per_stream)
        self._running: set[asyncio.Task[None]] = set()

    async def admit(self, read: Callable[[], Awaitable[T | None]]) -> T | None:
        """Wait for room on this stream, then ``read`` the next batch (None: the stream ended),
        then wait for room on the server. A batch returned holds both until its task ends."""
        await self._mine.acquire()  # at the bound: leave the next batch unread
        try:
            batch = await read()
            if batch is not None:
                await self._slots.acquire()
                return batch
        except BaseException:
            self._mine.release()
            raise
        self._mine.release()
        return None

    def start(self, work: Coroutine[Any, Any, None]) -> None:
        """Run an admitted batch's ``work`` as its own task; its room is freed when it ends."""
        task = asyncio.create_task(work)
        self._running.add(task)
        task.add_done_callback(self._release)

    def _release(self, task: asyncio.Task[None]) -> None:  # also for a task cancelled unstarted
        self._running.discard(task)
        self._mine.release()
        self._slots.release()

    async def drain(self) -> None:
        """Wait for every batch started to end."""
        if self._running:
            await asyncio.wait(tuple(self._running))

    def cancel(self) -> None:
        for task in tuple(self._running):
            task.cancel()


@runtime_checkable
class BlockSink(Protocol):
    """Sequencer side: fan a block out to every subscriber."""

    async def publish(self, seq: int, frame: bytes) -> None: ...


@runtime_checkable
class BlockSource(Protocol):
    """Replica side: every block from ``from_seq`` on, in order, each exactly once."""

    def subscribe(self, from_seq: int) -> AsyncIterator[Frame]: ...


@runtime_checkable
class TxChannel(Protocol):
    """Replica side: send one tx batch frame, await its result frame. ``ordered``: batches
    submitted one after another (without awaiting the first) execute in that order, so a
    replica may keep several out (``MicroBatcher``, which takes a channel without the attribute
    as unordered)."""

    ordered: bool

    async def submit(self, frame: bytes) -> bytes: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Backoff:
    """Reconnect delays: ``initial_s * factor**n`` capped at ``max_s``.

    A short ``initial_s`` resumes a blip fast; ``max_s`` bounds both the recovery time once the
    publisher is back and the load reconnect attempts put on it. ``max_attempts`` consecutive
    failures (no frame received in between) raise :class:`TransportUnavailable`; ``None`` retries
    forever, which is what a replica wants while the sequencer restarts.
    """

    initial_s: float = 0.02
    max_s: float = 1.0
    factor: float = 2.0
    max_attempts: int | None = None

    def delay(self, attempt: int) -> float:
        return float(min(self.max_s, self.initial_s * self.factor ** min(attempt, 64)))

    def check(self, attempt: int, cause: object) -> None:
        """Raise once ``attempt + 1`` consecutive attempts (0-based ``attempt``) have failed."""
        if self.max_attempts is not None and attempt + 1 >= self.max_attempts:
            raise TransportUnavailable(f"gave up after {attempt + 1} attempts: {cause}")

    async def wait(self, attempt: int, cause: object) -> None:
        """After failed attempt ``attempt`` (0-based): :meth:`check`, then sleep its delay."""
        self.check(attempt, cause)
        await asyncio.sleep(self.delay(attempt))


DEFAULT_BACKOFF = Backoff()


class Link:
    """Whether a follower's block stream reaches its publisher, for its status page: up from a
    successful connect (or a frame) until an attempt fails, then down with the cause and since
    when, until the next connect. A connection the network lost without a word (no FIN, no RST)
    counts as up until the OS gives up on it: there is no heartbeat on a quiet stream."""

    __slots__ = ("cause", "since", "up")

    def __init__(self) -> None:
        self.up = False
        self.cause = "not connected yet"
        self.since = time.monotonic()

    def opened(self) -> None:
        if not self.up:
            self.up, self.cause, self.since = True, "", time.monotonic()

    def failed(self, cause: object) -> None:
        if self.up:
            self.up, self.since = False, time.monotonic()
        self.cause = str(cause) or type(cause).__name__  # the latest attempt's

    def status(self) -> dict[str, Any]:
        """``{"reachable", "for_s", "cause"}``: the state and how long it has held."""
        return {
            "reachable": self.up,
            "for_s": round(time.monotonic() - self.since, 1),
            "cause": self.cause,
        }


class EndReason(enum.Enum):
    SLOW = "slow"  # cut off: the live queue was full when a frame arrived
    CLOSED = "closed"  # closed by its owner (server stopping, subscriber replaced)


@dataclass(frozen=True, slots=True)
class HubStats:
    last_seq: int
    floor: int
    ring_len: int
    subscribers: int
    published_total: int
    cut_off_total: int


class Subscription:
    """One subscriber's stream: the ring replay, then live frames, until cut off or closed.

    Iterate it with ``async for``; iteration stops when it ends, and ``end_reason`` says why.
    """

    __slots__ = ("_from", "_hub", "_limit", "_live", "_replay", "_waiter", "end_reason", "name")

    def __init__(
        self, hub: BlockHub, name: str, from_seq: int, replay: list[Frame], limit: int
    ) -> None:
        self.name = name
        self.end_reason: EndReason | None = None
        self._hub = hub
        self._from = from_seq
        self._limit = limit
        self._replay: deque[Frame] = deque(replay)
        self._live: deque[Frame] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def close(self) -> None:
        """End the stream (idempotent); frames not yet taken are dropped."""
        self._end(EndReason.CLOSED)

    @property
    def backlog(self) -> int:
        return len(self._replay) + len(self._live)

    def _offer(self, item: Frame) -> bool:
        """Queue a live frame; False (and the stream ends as SLOW) when the queue is full."""
        if item[0] < self._from:
            return True
        if len(self._live) >= self._limit:
            self._end(EndReason.SLOW)
            return False
        self._live.append(item)
        self._wake()
        return True

    def _end(self, reason: EndReason) -> None:
        if self.end_reason is None:
            self.end_reason = reason
            self._replay.clear()
            self._live.clear()
            self._hub._detach(self)
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Frame:
        while True:
            if self._replay:
                return self._replay.popleft()
            if self._live:
                return self._live.popleft()
            if self.end_reason is not None:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None


class BlockHub:
    """The publisher's ring and fan-out (see module docstring). Implements :class:`BlockSink`.

    ``last_seq`` is the seq of the newest block published before this hub existed (0 for a fresh
    exchange; the recovered seq after a sequencer restart): those blocks are not held.
    """

    def __init__(self, *, ring_size: int = 2048, queue_size: int = 256, last_seq: int = 0) -> None:
        if ring_size < 1 or queue_size < 1:
            raise ValueError("ring_size and queue_size must be >= 1")
        self._ring: deque[Frame] = deque(maxlen=ring_size)
        self._queue_size = queue_size
        self._last_seq = last_seq
        self._floor = last_seq
        self._subs: set[Subscription] = set()
        self._published = 0
        self._cut_off = 0

    @property
    def last_seq(self) -> int:
        return self._last_seq

    async def publish(self, seq: int, frame: bytes) -> None:
        self.publish_nowait(seq, frame)

    def publish_nowait(self, seq: int, frame: bytes) -> None:
        if seq != self._last_seq + 1:
            raise ValueError(f"block seq {seq} does not follow {self._last_seq}")
        ring = self._ring
        if len(ring) == ring.maxlen:
            self._floor = ring[0][0]
        item = (seq, frame)
        ring.append(item)
        self._last_seq = seq
        self._published += 1
        for sub in tuple(self._subs):
            if not sub._offer(item):
                self._cut_off += 1

    def subscribe(self, from_seq: int, name: str = "") -> Subscription:
        """Open a stream of every frame with ``seq >= from_seq``; raises :class:`ResyncRequired`."""
        if from_seq <= self._floor:
            raise ResyncRequired(from_seq, self._floor)
        ring = self._ring
        start = max(0, from_seq - ring[0][0]) if ring else 0
        replay = list(itertools.islice(ring, start, None))
        sub = Subscription(self, name, from_seq, replay, self._queue_size)
        self._subs.add(sub)
        return sub

    def statistics(self) -> HubStats:
        return HubStats(
            last_seq=self._last_seq,
            floor=self._floor,
            ring_len=len(self._ring),
            subscribers=len(self._subs),
            published_total=self._published,
            cut_off_total=self._cut_off,
        )

    def _detach(self, sub: Subscription) -> None:
        self._subs.discard(sub)
