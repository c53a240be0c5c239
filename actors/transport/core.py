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

Everything here is single-event-loop code: call it from the loop that runs the transports.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import secrets
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

Frame = tuple[int, bytes]


class StreamOrder:
    """One tx stream's batches, kept in arrival order through the sequencer's signature check
    (``SequencerService.handle_batch``): a member may keep several batches out on one stream
    (``MicroBatcher``), and the check yields between slices, so a later, smaller batch could
    finish its check first. Batches of different streams are not ordered against each other
    (a slow check on one stream never holds another)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        #: resolved once the stream's latest batch to arrive has executed (or failed)
        self.last: asyncio.Future[None] | None = None


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


class TxStreamBroken(TransportError):
    """The tx stream broke with this batch in flight: its outcome is unknown to the transport.

    Batches are never resent (at most once); the caller learns the outcome from the block stream
    (each executed tx appears as a ``TxExecuted`` event carrying its hash).
    """


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


DEFAULT_BACKOFF = Backoff()


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
