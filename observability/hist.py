"""HDR-style latency histograms: constant memory, cheap to record, mergeable across actors.

A value is kept in a log-linear bucket that preserves its top ``SUB_BITS`` bits, so a reported
percentile overstates the exact one by less than ``1 / 2**(SUB_BITS - 1)`` (under 1% here) and
the histogram never grows past a few thousand buckets whatever the range (1 ns .. hours).

``record`` is one ``bit_length``, a shift and a dict increment (~0.2 µs): fine per block or per
tx, not per event. ``snapshot()`` returns plain data that crosses Ray and merges with ``merge``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

SUB_BITS = 8


def bucket_top(v: int) -> int:
    """The highest value that falls in ``v``'s bucket."""
    if v < 1 << SUB_BITS:
        return max(v, 0)
    shift = v.bit_length() - SUB_BITS
    return (((v >> shift) + 1) << shift) - 1


class Histogram:
    """Counts per bucket of integer samples (any unit; raydex uses nanoseconds)."""

    __slots__ = ("counts", "max", "min", "total")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.total = 0
        self.max = 0
        self.min = 0

    def record(self, v: int) -> None:
        if v < 1 << SUB_BITS:
            b = v if v > 0 else 0
        else:
            shift = v.bit_length() - SUB_BITS
            b = (((v >> shift) + 1) << shift) - 1
        counts = self.counts
        counts[b] = counts.get(b, 0) + 1
        if self.total == 0 or v < self.min:
            self.min = v
        if v > self.max:
            self.max = v
        self.total += 1

    def record_many(self, values: Iterable[int]) -> None:
        for v in values:
            self.record(v)

    def merge(self, other: Histogram | Mapping[int, int]) -> None:
        counts = other.counts if isinstance(other, Histogram) else other
        for b, c in counts.items():
            self.counts[b] = self.counts.get(b, 0) + c
            self.total += c
        if isinstance(other, Histogram) and other.total:
            self.max = max(self.max, other.max)
            self.min = other.min if self.total == other.total else min(self.min, other.min)

    def percentile(self, q: float) -> int:
        """The bucket top where the cumulative count first reaches ``ceil(q * total)``."""
        if not self.total:
            return 0
        rank = max(1, -(-int(q * self.total * 1_000_000) // 1_000_000))
        acc = 0
        for top in sorted(self.counts):
            acc += self.counts[top]
            if acc >= rank:
                return min(top, self.max)
        return self.max

    def summary_us(self, scale_ns: bool = True) -> dict[str, float]:
        """``{count, p50, p90, p99, p999, max}`` in µs (values recorded in ns)."""
        div = 1000.0 if scale_ns else 1.0
        return {
            "count": self.total,
            "p50": round(self.percentile(0.5) / div, 1),
            "p90": round(self.percentile(0.9) / div, 1),
            "p99": round(self.percentile(0.99) / div, 1),
            "p999": round(self.percentile(0.999) / div, 1),
            "max": round(self.max / div, 1),
        }

    def snapshot(self) -> dict[int, int]:
        return dict(self.counts)

    def reset(self) -> None:
        self.counts.clear()
        self.total = self.max = self.min = 0
