"""Repairing the log's tail from the followers, and checking what the log rebuilt, before serving.

::

    start: WAL open (a torn tail is cut) ─► recover: snapshot + replay to seq L (each rebuilt
           block's sha256 kept) ─► ask every follower held_blocks(since, L) (runtime/held.py)
           ─► check: every rebuilt block the committer committed (else the holder holds) has its
              hash ─ no: the log was altered after it was written: refuse
           ─► repair: followers applied up to H > L: blocks L+1..H from their frames, each the
              committer's block hash where it has one, else the one frame every holder agrees
              on ─► folded into the state, written as restored records (synced) ─► serve

Why the tail can be repaired and when it may be cut. A block is published only after its WAL
record is durable, and a replica answers a client's tx only after applying its block (operator
commands through Ray are answered when durable: the only acknowledgement no follower witnesses).
So every block anyone was told about is held by some follower, or was never acknowledged: when
the followers that answered applied nothing beyond the log, what the log cut was never
acknowledged to any client of theirs, and saying so is the whole repair. A follower that does
not answer within the deadline is named in the log and the status; a block only it held is lost,
and it learns so itself (it resumes at its seq, finds another block there: ``Diverged``).

Refusals (:class:`StartRefused`, a ``WalError``): a rebuilt block whose hash is not the committed
one (or, past the committer's memory, not the holder's); a block after the log that the followers
applied but none holds any more, or that they hold in different versions with no committed hash
to choose by. The sequencer then does not serve: its status says why, and it tries again later.

Cost: one sha256 per replayed block; the repair folds each restored block into the state
(O(state) per block: there are a handful).
"""

from __future__ import annotations

import hashlib
import logging
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ..runtime import HeldBlocks
from .producer import BlockProducer, ClosedBlock
from .wal import Wal, WalError

log = logging.getLogger(__name__)

#: ``(since, frames_after) -> (answers, names of the followers that did not answer in time)``
AskFollowers = Callable[[int, int], Awaitable[tuple[list[HeldBlocks], list[str]]]]


class StartRefused(WalError):
    """The sequencer must not serve: its log cannot be checked or repaired (see the module
    docstring). It tries again later; the status carries the reason."""


@dataclass(slots=True)
class RepairReport:
    """What the start found and did (``SequencerService.status()['recovery']``)."""

    #: the log's end after the replay (the state's seq before any repair)
    log_seq: int = 0
    torn_bytes: int = 0
    #: followers that answered, with the newest seq each applied; those that did not answer
    followers: dict[str, int] = field(default_factory=dict)
    unanswered: list[str] = field(default_factory=list)
    #: rebuilt blocks whose hash a follower confirmed (the committer's chain, else the holder)
    checked_blocks: int = 0
    #: seqs restored from the followers' frames (first, last), and which of them the committer
    #: had a hash for
    restored: tuple[int, int] | None = None
    restored_checked: int = 0
    verdict: str = ""


def check_rebuilt(rebuilt: Mapping[int, bytes], answers: Iterable[HeldBlocks]) -> int:
    """Compare the hashes of the blocks the log rebuilt with the committer's chain (the holder's
    frames past the committer's memory); StartRefused on a difference. Returns how many rebuilt
    blocks were confirmed."""
    committed, held = _references(answers)
    checked = 0
    for seq, digest in rebuilt.items():
        ref = committed.get(seq)
        who = "the committer committed"
        if ref is None:
            ref, who = held.get(seq), "the snapshot holder applied"
        if ref is None:
            continue
        if ref != digest:
            raise StartRefused(
                f"the WAL's record of block {seq} rebuilds a block whose hash "
                f"{digest.hex()[:16]} differs from the one {who} ({ref.hex()[:16]}): the log was "
                "altered after it was written (a record with a valid crc but other content); "
                "refusing to start. Restore the WAL from a good copy, or move it aside so the "
                "sequencer recovers from the newest snapshot and the followers"
            )
        checked += 1
    return checked


def _references(answers: Iterable[HeldBlocks]) -> tuple[dict[int, bytes], dict[int, bytes]]:
    committed: dict[int, bytes] = {}
    held: dict[int, bytes] = {}
    for a in answers:
        if a.role == "committer":
            committed.update(a.digests)
        elif a.role == "snapshot":
            held.update(a.digests)
    return committed, held


def tail_to_restore(
    log_seq: int, last_digest: bytes | None, answers: list[HeldBlocks]
) -> tuple[int, list[tuple[int, bytes, int]]]:
    """The blocks after ``log_seq`` the followers applied, chosen and checked (module
    docstring): ``(H, [(seq, frame, origin crc), ...])`` for seqs ``log_seq+1..H``. A follower
    whose block ``log_seq`` (digest) differs from ``last_digest``, or whose copy of a block in
    the tail is not the one chosen, follows another history and is left out from there on.
    StartRefused when a block cannot be chosen."""
    same = [a for a in answers if _agrees(a, log_seq, last_digest)]
    committed, _ = _references(same)
    crc_at = {
        a.seq: a.record_crc for a in same if a.role == "snapshot" and a.record_crc is not None
    }
    out: list[tuple[int, bytes, int]] = []
    seq = log_seq + 1
    while holders := [a for a in same if a.seq >= seq]:
        versions: dict[bytes, tuple[bytes, list[str]]] = {}
        for a in holders:
            frame = dict(a.frames).get(seq)
            if frame is not None:
                versions.setdefault(_digest(frame), (frame, []))[1].append(a.name)
        if not versions:
            raise StartRefused(
                f"the followers applied blocks after the WAL's end at {log_seq} "
                f"({', '.join(a.name for a in holders)} applied block {seq}) but none still holds "
                f"block {seq} itself: the log cannot be repaired; refusing to start"
            )
        want = committed.get(seq)
        if want is not None:
            if want not in versions:
                raise StartRefused(
                    f"no follower holds block {seq} with the hash the committer committed "
                    f"({want.hex()[:16]}); refusing to start"
                )
            chosen = want
        elif len(versions) > 1:
            each = "; ".join(f"{d.hex()[:12]}: {', '.join(n)}" for d, (_, n) in versions.items())
            raise StartRefused(
                f"the followers hold different blocks {seq} ({each}) and the committer has none "
                "to choose by; refusing to start"
            )
        else:
            chosen = next(iter(versions))
        frame = versions[chosen][0]
        same = [a for a in same if _agrees(a, seq, chosen)]
        crc = crc_at.get(seq)
        out.append((seq, frame, crc if crc is not None else zlib.crc32(frame)))
        seq += 1
    return seq - 1, out


def _agrees(a: HeldBlocks, seq: int, digest: bytes | None) -> bool:
    """``a`` holds no other block ``seq`` than the one with ``digest`` (None: nothing to compare);
    else it follows another history (logged: it finds out itself when it resumes)."""
    if digest is None:
        return True
    theirs = dict(a.digests).get(seq)
    if theirs is None:
        frame = dict(a.frames).get(seq)
        theirs = _digest(frame) if frame is not None else None
    if theirs is None or theirs == digest:
        return True
    log.error(
        "%s applied a block %d other than the log's: it follows another history and is not used "
        "for the repair (it finds out itself when it resumes)", a.name, seq,
    )  # fmt: skip
    return False


def _digest(frame: bytes) -> bytes:
    """A frame's identity, as ``snapshot.block_digest`` and the committer's block hash."""
    return hashlib.sha256(frame).digest()


def restore_tail(
    producer: BlockProducer, wal: Wal, blocks: list[tuple[int, bytes, int]]
) -> list[ClosedBlock]:
    """Fold each block into the state and write its restored record (synced) to ``wal``."""
    out = []
    for seq, frame, origin in blocks:
        closed = producer.restore(frame, origin)
        assert closed.seq == seq
        wal.append_record(seq, closed.wal_record)
        out.append(closed)
    return out
