"""The flight recorder: the last few seconds of spans in a ring, dumped as a Chrome trace when a
slow event is seen.

A *span* is ``(name, track, start_ns, dur_ns, args)`` with ``start_ns`` on the wall clock
(``time.time_ns()``), so the dumps of several processes line up when opened together in Perfetto
(https://ui.perfetto.dev) or ``chrome://tracing``.

Invariants:
- The ring never holds more than ``max_spans`` spans, and ``spans()`` returns only those that
  ended within ``window_s`` of the newest one.
- ``SlowTrigger.observe`` fires at most ``max_dumps`` times and never twice within
  ``min_interval_s``: a slow period yields a few dumps, not a disk full of them.
- A dump is valid Chrome-trace JSON (``{"traceEvents": [...], "displayTimeUnit": "ns",
  "otherData": {...}}``, complete events ``"ph": "X"`` in µs, one ``thread_name`` per track).

Loadtest only: too costly to keep on in production. ``record`` is a tuple build and a deque
append; ``dump`` is synchronous and linear in the spans held, so a replica uses ``capture`` (a
copy of the spans) and ``Capture.write`` after the timed window, off its loop.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from raydex.observability.gcstats import untrack

__all__ = ["Capture", "FlightRecorder", "SlowTrigger", "Span", "chrome_trace"]

#: JSON of a trace document; a value JSON has no type for (an arg) is written as its str()
_encode = msgspec.json.Encoder(enc_hook=str).encode


class Span(NamedTuple):
    """One span; ``args`` as (key, value) pairs of atoms, so the span holds no mutable container
    and is out of the cyclic GC's lists (see :meth:`FlightRecorder.record`)."""

    name: str
    track: str
    start_ns: int
    dur_ns: int
    args: tuple[tuple[str, Any], ...] | None = None


class FlightRecorder:
    """A bounded ring of recent spans (by count and by time)."""

    def __init__(self, window_s: float = 5.0, max_spans: int = 100_000) -> None:
        if window_s <= 0 or max_spans < 1:
            raise ValueError("window_s must be > 0 and max_spans >= 1")
        self.window_ns = int(window_s * 1e9)
        self._ring: deque[Span] = deque(maxlen=max_spans)
        self.recorded = 0

    def record(
        self,
        name: str,
        start_ns: int,
        dur_ns: int,
        track: str = "main",
        args: Mapping[str, Any] | None = None,
    ) -> None:
        ring = self._ring
        span = Span(name, track, start_ns, dur_ns, tuple(args.items()) if args else None)
        # Out of the collector's lists: the ring holds a few seconds of spans (~20,000 on a
        # replica at 5,000 tx/s), which every collection would otherwise walk, args dicts too.
        untrack(span)
        ring.append(span)
        self.recorded += 1
        horizon = start_ns + dur_ns - self.window_ns
        while ring and ring[0].start_ns + ring[0].dur_ns < horizon:
            ring.popleft()

    def spans(self) -> list[Span]:
        """The spans of the last ``window_s`` seconds (relative to the newest span's end)."""
        if not self._ring:
            return []
        newest = max(s.start_ns + s.dur_ns for s in self._ring)
        horizon = newest - self.window_ns
        return [s for s in self._ring if s.start_ns + s.dur_ns >= horizon]

    def __len__(self) -> int:
        return len(self._ring)

    def capture(self, process: str, reason: str) -> Capture:
        """The spans now (a list copy, ~1 ms per 10,000), to be written later by
        :meth:`Capture.write`: a loadtest's probe captures on a slow event and writes after its
        timed window, so the trace's build and encode (~1.5 µs per span) is not charged to it."""
        return Capture(self.spans(), process, {"reason": reason, "pid": os.getpid()})

    def dump(self, path: str | os.PathLike[str], process: str, reason: str) -> Path:
        """Write the ring as Chrome-trace JSON to ``path`` (parents created); returns the path."""
        return self.capture(process, reason).write(path)


class Capture(NamedTuple):
    """Spans taken from a :class:`FlightRecorder` at one moment, with what names the dump."""

    spans: list[Span]
    process: str
    other: Mapping[str, Any]

    def write(self, path: str | os.PathLike[str]) -> Path:
        """The Chrome trace to ``path`` (parents created), under a ``.part`` name renamed once
        whole, so a reader sees the whole file or none; returns the path."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        part = out.with_name(out.name + ".part")
        part.write_bytes(_encode(chrome_trace(self.spans, self.process, self.other)))
        part.replace(out)
        return out


def chrome_trace(
    spans: list[Span], process: str, other: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Spans as a Chrome trace document (one process, one thread per track)."""
    pid = os.getpid()
    tids: dict[str, int] = {}
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": process}}
    ]
    for s in spans:
        tid = tids.get(s.track)
        if tid is None:
            tid = tids[s.track] = len(tids) + 1
            events.append(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": pid,
                    "tid": tid,
                    "args": {"name": s.track},
                }
            )
        events.append(
            {
                "name": s.name,
                "cat": "raydex",
                "ph": "X",
                "ts": s.start_ns / 1000.0,
                "dur": s.dur_ns / 1000.0,
                "pid": pid,
                "tid": tid,
                "args": dict(s.args or {}),
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": dict(other or {})}


class SlowTrigger:
    """Decides when a slow event deserves a dump: over its threshold, rate-limited, capped."""

    def __init__(
        self,
        thresholds_ns: Mapping[str, int],
        min_interval_s: float = 2.0,
        max_dumps: int = 10,
    ) -> None:
        self.thresholds_ns = dict(thresholds_ns)
        self.min_interval_ns = int(min_interval_s * 1e9)
        self.max_dumps = max_dumps
        self.fired = 0
        self.seen_slow = 0
        self._last_ns: int | None = None

    def observe(self, name: str, dur_ns: int, now_ns: int | None = None) -> bool:
        limit = self.thresholds_ns.get(name)
        if limit is None or dur_ns <= limit:
            return False
        self.seen_slow += 1
        now = time.monotonic_ns() if now_ns is None else now_ns
        if self.fired >= self.max_dumps or (
            self._last_ns is not None and now - self._last_ns < self.min_interval_ns
        ):
            return False
        self._last_ns = now
        self.fired += 1
        return True
