"""What a follower holds of the newest blocks: its answer to a sequencer repairing its log.

A sequencer restarts from its WAL. Should the newest records be damaged (a flipped bit in synced
bytes looks like a torn write), the blocks in them were published and applied by the followers,
and a replica answered their txs only after applying them. So before it serves, the sequencer asks
every follower ``held_blocks(since, frames_after)`` and gets a :class:`HeldBlocks`: the newest seq
the follower applied, the frames it still holds after ``frames_after`` (the blocks the log may
have lost) and the digests it knows from ``since`` on (to check the blocks the log rebuilt). The
committer's digests are its hash chain's block hashes; everyone else's are ``sha256(frame)`` of the
frames it holds: the same function (``snapshot.block_digest``).

:class:`RecentBlocks` is the small ring a replica and the committer keep for it (the holder answers
from its own ring of deltas). Cost: one deque append per applied block (a reference, no copy);
memory: ``keep`` frames.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

__all__ = ["MAX_DIGESTS", "MAX_FRAMES", "HeldBlocks", "RecentBlocks", "held_blocks"]

#: frames a follower keeps for this, and sends at most in one answer
MAX_FRAMES = 256
#: digests sent at most in one answer (the newest)
MAX_DIGESTS = 10_000


class HeldBlocks(NamedTuple):
    """One follower's answer (see the module docstring). ``role``: ``committer``, ``snapshot``
    or ``replica``; ``record_crc``: the holder's crc of the WAL record of block ``seq``."""

    name: str
    role: str
    seq: int
    frames: tuple[tuple[int, bytes], ...]
    digests: tuple[tuple[int, bytes], ...]
    record_crc: int | None = None


def held_blocks(
    name: str,
    role: str,
    seq: int,
    frames: Iterable[tuple[int, bytes]],
    since: int,
    frames_after: int,
    digests: Mapping[int, bytes] | None = None,
    record_crc: int | None = None,
) -> HeldBlocks:
    """The answer of a follower at ``seq`` holding ``frames`` (oldest first): frames after
    ``frames_after`` (at most ``MAX_FRAMES``, the oldest of them), digests from ``since`` on (at
    most ``MAX_DIGESTS``, the newest): ``digests`` when given (the committer's block hashes),
    else those of the frames."""
    held = [(s, f) for s, f in frames if s >= since]
    out_frames = tuple((s, f) for s, f in held if s > frames_after)[:MAX_FRAMES]
    if digests is not None:
        pairs = [(s, d) for s, d in digests.items() if s >= since]
    else:
        pairs = [(s, hashlib.sha256(f).digest()) for s, f in held[-MAX_DIGESTS:]]
    return HeldBlocks(name, role, seq, out_frames, tuple(pairs[-MAX_DIGESTS:]), record_crc)


class RecentBlocks:
    """The last ``keep`` block frames a follower applied, in seq order without a gap (a block
    that does not follow the newest one starts the ring again)."""

    __slots__ = ("_frames",)

    def __init__(self, keep: int = MAX_FRAMES) -> None:
        self._frames: deque[tuple[int, bytes]] = deque(maxlen=keep)

    def add(self, seq: int, frame: bytes) -> None:
        frames = self._frames
        if frames and seq != frames[-1][0] + 1:
            if seq <= frames[-1][0]:
                return  # a duplicate (applying twice is a no-op)
            frames.clear()
        frames.append((seq, frame))

    def clear(self) -> None:
        self._frames.clear()

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        return iter(tuple(self._frames))

    def __len__(self) -> int:
        return len(self._frames)
