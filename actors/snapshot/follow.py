"""Following the sequencer's streams without ever silently diverging.

The sequencer's promise: a block, once published, is never replaced by a different block under the
same seq (blocks rebuilt from the WAL are byte-identical, ``actors/sequencer/producer.py``). The
one way it can break is damage to synced WAL bytes at its tail (a flipped bit in the newest record
looks like a torn write and is cut off); a sequencer that lost published blocks then publishes
different ones under their seqs. A follower detects it the moment it reconnects, because it resumes
*at* the seq it already holds::

    follower at seq N, holding block N ──subscribe(N)──► publisher
                                        ◄── block N ──── same digest: continue with N+1, ...
                                                          other digest: Diverged(N): rebuild
                                                          from a state before N

:func:`follow` implements it over any ``BlockSource``. Caller duties: give the source
``Backoff(max_attempts=1)`` (:data:`ONE_ATTEMPT`) so every reconnect reaches the follower's own
loop and is checked. Digests: ``block_digest`` (sha256 of a delta frame) or
``codecs.wal_record_crc`` (a tx-log record). Cost: one extra frame per (re)connect.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Callable

from ..transport import Backoff, BlockSource, Frame, ResyncRequired

log = logging.getLogger(__name__)

#: the source gives up after one failed attempt: the follower's loop resubscribes (and checks)
ONE_ATTEMPT = Backoff(max_attempts=1)


class Diverged(RuntimeError):
    """The publisher's block ``seq`` is not the one this follower applied: its history from
    ``seq`` on is not the sequencer's. Rebuild from a state before ``seq``; never continue."""

    def __init__(self, seq: int, detail: str = "") -> None:
        super().__init__(seq, detail)
        self.seq = seq
        self.detail = detail

    def __str__(self) -> str:
        return (
            f"the sequencer's block {self.seq} differs from the one applied here{self.detail}: "
            "this follower's history diverged; rebuilding from before it"
        )


def block_digest(frame: bytes) -> bytes:
    """The identity of a delta frame (sha256; also the committer's ``block_hash``)."""
    return hashlib.sha256(frame).digest()


async def follow(
    source: BlockSource,
    seq: int,
    digest: bytes | int | None,
    digest_of: Callable[[bytes], bytes | int],
) -> AsyncIterator[Frame]:
    """Frames after ``seq`` from ``source``, after checking that the publisher's block ``seq``
    has ``digest`` (``digest_of(frame)``). ``digest`` None (nothing to compare: seq 0, or a
    fresh boot that does not know it) subscribes from ``seq + 1`` unchecked.

    Raises :class:`Diverged` on a mismatch; ``ResyncRequired`` when the publisher no longer
    holds ``seq + 1``; whatever the source raises when its stream breaks."""
    if digest is None or seq == 0:
        async for item in source.subscribe(seq + 1):
            yield item
        return
    try:
        frames = source.subscribe(seq)
        first = await anext(aiter(frames), None)
    except ResyncRequired as exc:
        if exc.floor != seq:
            raise
        # block ``seq`` just left the ring but ``seq + 1`` is held: continue unchecked (this
        # stream is the one that replaces the checked one, so only a restart in this instant
        # could slip through; the next reconnect checks again)
        log.info("block %d left the publisher's ring; resuming after it unchecked", seq)
        async for item in source.subscribe(seq + 1):
            yield item
        return
    if first is None:  # the stream ended before its first frame: the caller resubscribes
        return
    if first[0] != seq or digest_of(first[1]) != digest:
        raise Diverged(seq, f" (seq {first[0]})" if first[0] != seq else "")
    async for item in frames:
        yield item


class Reconnect:
    """A follower's pause between broken streams: ``initial_s`` doubling to ``max_s`` while no
    block arrives (a sequencer restart takes seconds); the first failure is logged as a warning,
    then one in ``every`` (no log flood while the publisher is away)."""

    def __init__(self, what: str, initial_s: float, max_s: float = 2.0, every: int = 50) -> None:
        self.what = what
        self.initial_s = initial_s
        self.max_s = max_s
        self.every = every
        self.failures = 0

    def progressed(self) -> None:
        if self.failures:
            log.info("%s: streaming again after %d failed attempts", self.what, self.failures)
        self.failures = 0

    async def wait(self, cause: object) -> None:
        n = self.failures
        if n % self.every == 0:
            log.warning("%s: %s; reconnecting (attempt %d)", self.what, cause, n + 1)
        self.failures += 1
        await asyncio.sleep(min(self.max_s, self.initial_s * 2 ** min(n, 16)))
