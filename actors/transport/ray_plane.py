"""The plain Ray-actor-call data plane: the same semantics as gRPC, carried by actor calls.

The publisher actor (the sequencer) owns a :class:`BlockHub` and a :class:`RayBlockFanout`, and
exposes::

    async def open_blocks(self, subscriber: ActorHandle, name: str, from_seq: int) -> OpenReply:
        return await self.fanout.open(subscriber, name, from_seq)
    async def submit(self, frame: bytes) -> bytes          # the tx handler, for RayTxChannel

The subscriber actor (a replica) owns a :class:`RayBlockSource` and exposes::

    async def on_block(self, seq: int, frame: bytes) -> bool:
        return await self.source.deliver(seq, frame)
    async def on_block_stream_closed(self) -> None:
        self.source.stream_closed()

``on_block`` answers False once the source has no stream being consumed, which stops the pump.
Per subscriber the fanout runs one pump task: it drains the hub subscription and calls
``subscriber.on_block.remote`` with at most ``window`` calls in flight (pipelining hides the
actor-call round trip, a millisecond or more). ``deliver`` awaits room in a bounded local buffer,
so a slow consumer stalls ``on_block``, the window fills, the hub queue fills and the hub cuts the
subscriber off (then ``on_block_stream_closed`` tells it to reopen). The publisher never blocks.

Ray does not promise that calls to an async actor *start* in submission order, and retried calls
may run twice, so :class:`RayBlockSource` reorders by seq (contiguous seqs make that exact) and
drops duplicates. A hole (a lost call) that outlives ``buffer`` later frames, or no traffic at
all for ``idle_timeout_s`` (a dead or restarted publisher), makes it reopen from the next seq it
needs; a quiet publisher thus costs one ``open_blocks`` call per ``idle_timeout_s`` (counted in
``reconnects``). A failing ``open_blocks`` call is retried with bounded backoff. Reopening is
idempotent: the fanout replaces the pump registered under the same ``name``.

Cost: one actor call per block per subscriber (Ray serializes the frame into the call; frames
under 100 KB travel inline, not through the object store). One stream per source at a time.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import ray
from ray.actor import ActorHandle

from .core import (
    DEFAULT_BACKOFF,
    Backoff,
    BlockHub,
    Frame,
    ResyncRequired,
    Subscription,
    TxStreamBroken,
    accept_seq,
)


class OpenReply(NamedTuple):
    """``ok`` False means the subscriber must resync from a snapshot; ``floor`` says why."""

    ok: bool
    floor: int
    last_seq: int


class RayBlockFanout:
    """Publisher side: one pump per subscriber actor from ``hub`` to its ``on_block``."""

    def __init__(self, hub: BlockHub, *, window: int = 16) -> None:
        self._hub = hub
        self._window = window
        self._pumps: dict[str, tuple[Subscription, asyncio.Task[None]]] = {}

    async def open(self, subscriber: ActorHandle[Any], name: str, from_seq: int) -> OpenReply:
        try:
            sub = self._hub.subscribe(from_seq, name)
        except ResyncRequired as exc:
            return OpenReply(False, exc.floor, self._hub.last_seq)
        self._drop(name)
        self._pumps[name] = (sub, asyncio.create_task(self._pump(subscriber, name, sub)))
        stats = self._hub.statistics()
        return OpenReply(True, stats.floor, stats.last_seq)

    async def close(self) -> None:
        for name in tuple(self._pumps):
            self._drop(name)

    @property
    def subscribers(self) -> int:
        return len(self._pumps)

    def _drop(self, name: str) -> None:
        entry = self._pumps.pop(name, None)
        if entry is not None:
            entry[0].close()
            entry[1].cancel()

    async def _pump(self, subscriber: ActorHandle[Any], name: str, sub: Subscription) -> None:
        inflight: deque[Any] = deque()
        try:
            async for seq, frame in sub:
                inflight.append(subscriber.on_block.remote(seq, frame))
                if len(inflight) >= self._window and not await inflight.popleft():
                    return  # the subscriber stopped consuming
            subscriber.on_block_stream_closed.remote()
        except ray.exceptions.RayError:
            pass  # the subscriber died: its replacement reopens
        finally:
            sub.close()
            entry = self._pumps.get(name)
            if entry is not None and entry[0] is sub:
                del self._pumps[name]


_CLOSED = object()


class RayBlockSource:
    """Subscriber side: implements :class:`BlockSource` over ``publisher.open_blocks`` (see
    module docstring). ``me`` defaults to the current actor's handle."""

    def __init__(
        self,
        publisher: ActorHandle[Any],
        *,
        name: str,
        me: ActorHandle[Any] | None = None,
        buffer: int = 64,
        idle_timeout_s: float = 2.0,
        backoff: Backoff = DEFAULT_BACKOFF,
    ) -> None:
        self._publisher = publisher
        self._name = name
        self._me = me
        # Frames plus the close marker; ``_room`` bounds the frames only, so the marker never waits.
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._room = asyncio.Semaphore(buffer)
        self._buffer = buffer
        self._idle_timeout_s = idle_timeout_s
        self._backoff = backoff
        self._active = False
        self.reconnects = 0
        self.duplicates = 0

    async def deliver(self, seq: int, frame: bytes) -> bool:
        """Called by the actor's ``on_block``; waits while the consumer is ``buffer`` behind.

        Returns False when no stream is being consumed: the pump then stops.
        """
        if not self._active:
            return False
        await self._room.acquire()
        if not self._active:
            self._room.release()
            return False
        self._inbox.put_nowait((seq, frame))
        return True

    def stream_closed(self) -> None:
        """Called by the actor's ``on_block_stream_closed``: reopen from the next needed seq."""
        self._inbox.put_nowait(_CLOSED)

    def subscribe(self, from_seq: int) -> AsyncIterator[Frame]:
        return self._stream(from_seq)

    async def _open(self, from_seq: int) -> None:
        me = self._me or ray.get_runtime_context().current_actor
        attempt = 0
        while True:
            try:
                reply: OpenReply = await self._publisher.open_blocks.remote(
                    me, self._name, from_seq
                )
                break
            except ray.exceptions.RayError as exc:
                await self._backoff.wait(attempt, exc)
                attempt += 1
        if not reply.ok:
            raise ResyncRequired(from_seq, reply.floor)

    def _drain(self) -> None:
        while not self._inbox.empty():
            if self._inbox.get_nowait() is not _CLOSED:
                self._room.release()

    async def _stream(self, from_seq: int) -> AsyncIterator[Frame]:
        if self._active:
            raise RuntimeError("a RayBlockSource serves one stream at a time")
        self._drain()
        self._active = True
        try:
            async for item in self._frames(from_seq):
                yield item
        finally:
            self._active = False
            self._drain()

    async def _frames(self, from_seq: int) -> AsyncIterator[Frame]:
        next_seq = from_seq
        held: dict[int, bytes] = {}  # arrived ahead of next_seq (calls started out of order)
        await self._open(next_seq)
        while True:
            try:
                item = await asyncio.wait_for(self._inbox.get(), self._idle_timeout_s)
            except TimeoutError:
                item = _CLOSED
            if item is not _CLOSED:
                self._room.release()
            if item is _CLOSED or len(held) > self._buffer:  # lost frame, or told to reopen
                held.clear()
                self.reconnects += 1
                await self._open(next_seq)
                continue
            seq, frame = item
            if seq > next_seq:  # ahead of a call that started later: held, not a gap
                if seq in held:
                    self.duplicates += 1
                held[seq] = frame
                continue
            if not accept_seq(seq, next_seq):
                self.duplicates += 1
                continue
            yield seq, frame
            next_seq += 1
            while next_seq in held:
                yield next_seq, held.pop(next_seq)
                next_seq += 1


class RayTxChannel:
    """Replica side tx path over ``sequencer.submit.remote(frame)``: one actor call per batch.

    A Ray error (the sequencer died mid-call) surfaces as :class:`TxStreamBroken`: the outcome is
    unknown and the caller learns it from the block stream, exactly as with gRPC.
    """

    #: concurrent actor calls may start in any order (module docstring): one batch out at a time
    ordered = False

    def __init__(self, sequencer: ActorHandle[Any], *, method: str = "submit") -> None:
        self._method = getattr(sequencer, method)

    async def submit(self, frame: bytes) -> bytes:
        try:
            result: bytes = await self._method.remote(frame)
        except ray.exceptions.RayError as exc:
            raise TxStreamBroken(f"tx call failed: {type(exc).__name__}") from exc
        return result

    async def close(self) -> None:
        return None
