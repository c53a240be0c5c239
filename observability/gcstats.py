"""CPython GC discipline per actor: the configured policy, and what the collector actually did.

``GcPolicy(spec)`` applies a ``GcSpec`` (``cluster/control/spec.py``): thresholds;
``gen2_disabled`` lifts the third threshold out of reach so no full collection runs mid-block, and
``run_scheduled()`` (an asyncio task the actor starts) collects every ``collect_interval_s``
instead, between blocks, freezing the survivors with ``freeze_after_collect`` and collecting the
whole heap every ``thaw_every``-th time; ``after_boot()`` freezes the boot-time heap (caches loaded
from a snapshot) so no collection traverses it again.

``untrack(obj)`` / ``untrack_all(items)`` take immutable records (NamedTuples of atoms: tx
results, trades, done orders, decoded events) out of the collector's lists, as CPython does by
itself for exact tuples only (``observability/_untrack.c``); without the C extension they do
nothing (``UNTRACKING`` is False).

``GcMonitor`` hooks ``gc.callbacks``: per generation it counts collections and records each pause
in a histogram, once per collection, never per allocation; ``summary()`` is what status pages and
metrics report.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

from .hist import Histogram

try:  # optional C extension (observability/_untrack.c), built by every install where a compiler is
    from ._untrack import untrack, untrack_all  # type: ignore[import-not-found]

    UNTRACKING = True
except ImportError:  # pragma: no cover - a build without a C compiler
    UNTRACKING = False

    def untrack(obj: object) -> bool:
        """Without the extension: nothing changes (the object stays tracked)."""
        return False

    def untrack_all(items: Any) -> int:
        """Without the extension: nothing changes."""
        return 0


#: gc threshold meaning "never by itself" (CPython compares counts with it).
_NEVER = 2**31 - 1


class GcMonitor:
    """Pause durations and collection counts per generation, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.pauses = [Histogram(), Histogram(), Histogram()]
        self.collections = [0, 0, 0]
        #: unreachable objects the collections of each generation freed (cyclic garbage)
        self.collected = [0, 0, 0]
        self._t0 = 0
        self.installed = False

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter_ns()
            return
        gen = int(info.get("generation", 0))
        self.pauses[gen].record(time.perf_counter_ns() - self._t0)
        self.collections[gen] += 1
        self.collected[gen] += int(info.get("collected", 0))

    def install(self) -> GcMonitor:
        if not self.installed:
            gc.callbacks.append(self._callback)
            self.installed = True
        return self

    def uninstall(self) -> None:
        if self.installed:
            gc.callbacks.remove(self._callback)
            self.installed = False

    def summary(self) -> dict[str, Any]:
        return {
            f"gen{g}": {
                "collections": self.collections[g],
                "collected": self.collected[g],
                "pause_us": self.pauses[g].summary_us(),
            }
            for g in range(3)
        } | {
            "frozen": gc.get_freeze_count(),
            "thresholds": list(gc.get_threshold()),
            # whether immutable records leave the collector's lists (observability/_untrack.c)
            "untracking": UNTRACKING,
        }


class GcPolicy:
    """Applies a ``GcSpec``-like object (``thresholds``, ``freeze_after_boot``,
    ``gen2_disabled``, ``collect_interval_s``); None keeps CPython's defaults."""

    def __init__(self, spec: Any | None) -> None:
        self.spec = spec
        self.scheduled = 0
        self.thawed = 0
        #: the last thawed (whole-heap) collection: its pause (ns) and the objects it freed, the
        #: cycles that had formed among frozen objects since the previous one
        self.last_thaw: tuple[int, int] | None = None

    def apply(self) -> None:
        if self.spec is None:
            return
        t0, t1, t2 = self.spec.thresholds
        gc.set_threshold(t0, t1, _NEVER if self.spec.gen2_disabled else t2)

    def after_boot(self) -> None:
        if self.spec is not None and self.spec.freeze_after_boot:
            gc.collect()
            gc.freeze()

    async def run_scheduled(self) -> None:
        """Full collections every ``collect_interval_s`` (when gen 2 is disabled)."""
        if self.spec is None or not self.spec.gen2_disabled or self.spec.collect_interval_s <= 0:
            return
        while True:
            await asyncio.sleep(self.spec.collect_interval_s)
            self.collect_scheduled()

    def collect_scheduled(self) -> None:
        """One scheduled full collection: with ``freeze_after_collect`` only what is not frozen
        is traversed and the survivors are frozen; every ``thaw_every``-th one thaws first."""
        spec = self.spec
        freezing = bool(getattr(spec, "freeze_after_collect", False))
        thaw_every = int(getattr(spec, "thaw_every", 0))
        self.scheduled += 1
        thaw = freezing and thaw_every and self.scheduled % thaw_every == 0
        t0 = time.perf_counter_ns()
        if thaw:
            gc.unfreeze()
            self.thawed += 1
        freed = gc.collect(2)
        if thaw:
            self.last_thaw = (time.perf_counter_ns() - t0, freed)
        if freezing:
            gc.freeze()
