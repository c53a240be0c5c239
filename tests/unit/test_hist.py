"""The latency histogram reports percentiles within its stated resolution and merges exactly."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from raydex.observability.hist import SUB_BITS, Histogram


@given(st.lists(st.integers(0, 10**12), min_size=1, max_size=100), st.floats(0.01, 1.0))
def test_a_percentile_is_at_or_just_above_the_exact_one(values: list[int], q: float) -> None:
    h = Histogram()
    h.record_many(values)
    exact = sorted(values)[max(1, -(-int(q * len(values) * 1_000_000) // 1_000_000)) - 1]
    got = h.percentile(q)
    assert exact <= got <= max(exact, exact + exact // 2 ** (SUB_BITS - 1)) or got == h.max


def test_merging_two_histograms_equals_recording_everything_in_one() -> None:
    rng = random.Random(7)
    xs = [rng.randrange(1, 10**9) for _ in range(1000)]
    a, b, both = Histogram(), Histogram(), Histogram()
    a.record_many(xs[:400])
    b.record_many(xs[400:])
    both.record_many(xs)
    a.merge(b)
    assert a.counts == both.counts and a.total == 1000 and a.max == both.max
    assert a.summary_us() == both.summary_us()


def test_an_empty_histogram_reports_zeros() -> None:
    assert Histogram().summary_us()["p99"] == 0
