"""State checks: every follower hashes its state at the same seqs, so any two can be compared.

A state hash (``raydex.engine.state_digest``) says something only next to another at the same seq,
and the roles move at their own pace. So the snapshot holder and every replica also hash their
state right after each *checkpoint* block (seq a multiple of ``every_blocks``, the deployment's
``snapshot.check_every_blocks``) and keep the last ``keep`` hashes. Then:

- a replica asks the holder for its checkpoints every ``COMPARE_INTERVAL_S`` and says in its live
  line and status whether it agrees at the newest checkpoint both passed; each one that differs is
  logged and counted (``raydex_state_divergences_total``);
- ``raydex status`` compares every actor's checkpoints and flags a difference (exit code 3).

A follower whose seq has not moved for ``QUIET_S`` also hashes its current seq (``run_quiet``), so
a quiet exchange still compares. Cost at a checkpoint: the records are listed at once (immutable
tuples: the list is the state at that seq whatever is applied next) and hashed a chunk per
event-loop turn (``digest_steps``), so the loop keeps applying blocks meanwhile; a checkpoint
reached while the previous one is still hashing is skipped (counted).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from raydex.engine import digest_steps, state_digest

log = logging.getLogger(__name__)

#: how often a replica fetches the holder's checkpoints to compare (a Ray call each time)
COMPARE_INTERVAL_S = 5.0
#: a follower whose seq has not moved for this long hashes its current seq too (see the module
#: docstring: a quiet exchange reaches no checkpoint)
QUIET_S = 2.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of comparing with a peer at the newest checkpoint both hashed."""

    peer: str
    seq: int
    agrees: bool
    ours: str
    theirs: str

    def fact(self) -> str:
        """The live line's ``agrees=`` value: ``holder@15000``, or ``NO:holder@15000``."""
        return f"{self.peer}@{self.seq}" if self.agrees else f"NO:{self.peer}@{self.seq}"


class StateChecks:
    """This follower's hashes at the checkpoint seqs, and its last comparison with a peer."""

    def __init__(self, every_blocks: int, keep: int = 8) -> None:
        if every_blocks < 1:
            raise ValueError(f"every_blocks must be >= 1, got {every_blocks}")
        self.every_blocks = every_blocks
        self.keep = keep
        #: checkpoint seq -> state digest (hex), oldest first
        self.done: dict[int, str] = {}
        #: checkpoints passed while the previous one was still being hashed
        self.skipped = 0
        self.verdict: Verdict | None = None
        #: checkpoints at which a comparison disagreed (each counted once)
        self.divergences = 0
        self._task: asyncio.Task[None] | None = None
        self._last_look = -1

    def due(self, seq: int) -> bool:
        """Whether block ``seq`` (just applied) is a checkpoint."""
        return seq % self.every_blocks == 0 and seq > 0

    def take(self, seq: int, records: Iterable[Any]) -> None:
        """Hash ``records`` (the state right after block ``seq``) in the background. Must be
        called on the event loop, before anything else is applied."""
        if self._task is not None and not self._task.done():
            self.skipped += 1
            return
        rows = list(records)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a synchronous caller, e.g. a tool): hash now
            self._record(seq, state_digest(rows).hex())
            return
        self._task = loop.create_task(self._hash(seq, rows))

    async def _hash(self, seq: int, rows: list[Any]) -> None:
        steps = digest_steps(rows)
        try:
            while True:
                next(steps)
                await asyncio.sleep(0)
        except StopIteration as done:
            self._record(seq, bytes(done.value).hex())

    def _record(self, seq: int, digest: str) -> None:
        self.done[seq] = digest
        while len(self.done) > self.keep:
            del self.done[next(iter(self.done))]

    async def run_quiet(
        self,
        seq: Callable[[], int],
        records: Callable[[], Iterable[Any]],
        interval_s: float = QUIET_S,
    ) -> None:
        """:meth:`look` every ``interval_s``: a supervised loop of the follower."""
        while True:
            await asyncio.sleep(interval_s)
            self.look(seq(), records)

    def look(self, seq: int, records: Callable[[], Iterable[Any]]) -> None:
        """If ``seq`` is where the previous look found the follower and is not hashed yet, hash
        it (``records()``: the state at that seq)."""
        if seq == self._last_look and seq > 0 and seq not in self.done:
            self.take(seq, records())
        self._last_look = seq

    def forget_after(self, seq: int) -> None:
        """Drop the checkpoints after ``seq`` (the follower went back to an older state: those
        hashes belong to a history it left)."""
        for s in [s for s in self.done if s > seq]:
            del self.done[s]

    async def settled(self) -> None:
        """Wait for the checkpoint being hashed, if any (tests, shutdown)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    def latest_seq(self) -> int:
        """The newest checkpoint's seq, -1 before the first (a metrics gauge)."""
        return next(reversed(self.done), -1)

    def latest(self) -> tuple[int, str] | None:
        """The newest checkpoint hashed: (seq, digest hex)."""
        if not self.done:
            return None
        seq = next(reversed(self.done))
        return seq, self.done[seq]

    def compare(self, peer: str, theirs: Mapping[int, str]) -> Verdict | None:
        """Compare with ``peer``'s checkpoints at the newest seq both hashed (None: no common
        seq yet; the previous verdict stands). A difference is logged and counted once per seq."""
        common = [s for s in self.done if s in theirs]
        if not common:
            return self.verdict
        seq = max(common)
        ours, other = self.done[seq], theirs[seq]
        verdict = Verdict(peer, seq, ours == other, ours, other)
        if not verdict.agrees and (self.verdict is None or self.verdict.seq != seq):
            self.divergences += 1
            log.error(
                "STATE DIVERGED at seq %d: this follower's state hash %s, %s's %s",
                seq, ours[:16], peer, other[:16],
            )  # fmt: skip
        self.verdict = verdict
        return verdict

    @property
    def diverged(self) -> bool:
        return self.verdict is not None and not self.verdict.agrees

    def facts(self) -> dict[str, Any]:
        """``check`` (newest checkpoint: ``<hash8>@<seq>``) and ``agrees`` for a live line."""
        latest = self.latest()
        return {
            "check": f"{latest[1][:8]}@{latest[0]}" if latest is not None else None,
            "agrees": self.verdict.fact() if self.verdict is not None else None,
        }

    def status(self) -> dict[str, Any]:
        """For ``status()``: the checkpoints (``state_checks``, seq -> hex) and the verdict."""
        v = self.verdict
        return {
            "state_checks": dict(self.done),
            "state_check": {
                "every_blocks": self.every_blocks,
                "skipped": self.skipped,
                "divergences": self.divergences,
                "peer": v.peer if v is not None else None,
                "seq": v.seq if v is not None else None,
                "agrees": v.agrees if v is not None else None,
            },
        }
