"""The GC policy sets what the spec says and the monitor sees the collections it causes."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import NamedTuple

import pytest

from raydex.cluster.control.spec import GcSpec
from raydex.observability.gcstats import UNTRACKING, GcMonitor, GcPolicy, untrack, untrack_all


def test_the_policy_applies_thresholds_and_disables_full_collections() -> None:
    before = gc.get_threshold()
    try:
        GcPolicy(
            GcSpec(thresholds=(5000, 20, 30), gen2_disabled=True, collect_interval_s=1)
        ).apply()
        t0, t1, t2 = gc.get_threshold()
        assert (t0, t1) == (5000, 20) and t2 > 10**9
        GcPolicy(GcSpec(thresholds=(800, 11, 12))).apply()
        assert gc.get_threshold() == (800, 11, 12)
    finally:
        gc.set_threshold(*before)


def test_the_monitor_records_each_collection_by_generation() -> None:
    mon = GcMonitor().install()
    try:
        gc.collect(0)
        gc.collect(2)
    finally:
        mon.uninstall()
    s = mon.summary()
    assert s["gen0"]["collections"] >= 1 and s["gen2"]["collections"] >= 1
    # what they freed is counted by generation: a cycle dropped before a collection is in it
    mon.install()
    try:
        a: list[object] = []
        a.append(a)
        del a
        gc.collect(1)
    finally:
        mon.uninstall()
    assert mon.summary()["gen1"]["collected"] >= 1
    assert s["gen2"]["pause_us"]["count"] == s["gen2"]["collections"]


def test_scheduled_collections_run_when_gen2_is_disabled() -> None:
    policy = GcPolicy(GcSpec(gen2_disabled=True, collect_interval_s=0.01))
    mon = GcMonitor().install()

    async def run() -> None:
        task = asyncio.get_running_loop().create_task(policy.run_scheduled())
        for _ in range(1000):  # bounded: a full collection of a big test heap takes a while
            if policy.scheduled >= 2:
                break
            await asyncio.sleep(0.01)
        task.cancel()

    try:
        asyncio.run(run())
    finally:
        mon.uninstall()
    assert policy.scheduled >= 2
    assert mon.collections[2] >= policy.scheduled


def test_freezing_after_each_collection_leaves_the_next_only_the_new_heap() -> None:
    """With ``freeze_after_collect`` a scheduled collection freezes its survivors (the next one
    traverses only what was allocated since); cycles among them go at the thawed one."""

    class Node:
        peer: object = None

    policy = GcPolicy(
        GcSpec(gen2_disabled=True, collect_interval_s=1, freeze_after_collect=True, thaw_every=3)
    )
    gc.unfreeze()
    try:
        kept = [Node() for _ in range(20_000)]  # survivors of the first collection
        policy.collect_scheduled()
        assert gc.get_freeze_count() >= len(kept)
        a, b = kept[0], kept[1]
        a.peer, b.peer = b, a  # a cycle among frozen objects
        gone = weakref.ref(a)
        del a, b, kept
        policy.collect_scheduled()  # the second: frozen objects are not traversed
        assert policy.thawed == 0 and gone() is not None and policy.last_thaw is None
        policy.collect_scheduled()  # the third: thawed, collected whole, frozen again
        assert policy.thawed == 1 and gone() is None and gc.get_freeze_count() > 0
        assert policy.last_thaw is not None
        pause_ns, freed = policy.last_thaw
        assert pause_ns > 0 and freed >= 2  # the two nodes of the cycle (and their dicts)
    finally:
        gc.unfreeze()


def test_the_plain_scheduled_collection_freezes_nothing() -> None:
    gc.unfreeze()
    policy = GcPolicy(GcSpec(gen2_disabled=True, collect_interval_s=1))
    policy.collect_scheduled()
    assert gc.get_freeze_count() == 0 and policy.scheduled == 1


# ---- immutable records out of the collector's lists (observability/_untrack.c) -----------------


class _Fill(NamedTuple):
    price: int
    size: int
    tx_hash: bytes


class _Row(NamedTuple):
    fill: _Fill
    note: str | None
    extra: object


class _Open(tuple):  # type: ignore[type-arg]  # a tuple subclass with a __dict__: mutable
    pass


needs_untrack = pytest.mark.skipif(not UNTRACKING, reason="built without a C compiler")


@needs_untrack
def test_a_named_tuple_of_atoms_leaves_the_collectors_lists_nested_ones_too() -> None:
    fill = _Fill(100, 2, b"h")
    row = _Row(fill, None, 7)
    assert gc.is_tracked(row) and gc.is_tracked(fill)
    assert untrack(row) is True
    assert not gc.is_tracked(row) and not gc.is_tracked(fill)
    assert row == (fill, None, 7) and row.fill.price == 100  # the same value, read as before
    assert untrack(row) is True  # already out: still True, nothing changes


@needs_untrack
def test_a_record_holding_any_other_container_stays_tracked() -> None:
    class Anything:
        pass

    for extra in ([], {}, {"k": 1}, _Open((1,)), Anything()):
        row = _Row(_Fill(1, 1, b""), None, extra)
        assert untrack(row) is False, extra
        assert gc.is_tracked(row), extra  # an empty dict may get a container later: kept
    mutable = _Open((1, 2))
    assert untrack(mutable) is False and gc.is_tracked(mutable)
    assert untrack(5) is False and untrack([1]) is False  # not tuples: nothing to do


@needs_untrack
def test_untrack_all_counts_what_is_out_and_skips_the_rest() -> None:
    rows = [_Fill(i, i, b"") for i in range(5)] + [_Row(_Fill(0, 0, b""), None, [])] + ["x"]
    assert untrack_all(rows) == 5
    assert [gc.is_tracked(r) for r in rows[:6]] == [False] * 5 + [True]
    assert untrack_all(iter(rows[:5])) == 5  # any iterable
    with pytest.raises(TypeError):
        untrack_all(3)


@needs_untrack
def test_a_cycle_that_holds_an_untracked_record_is_still_collected() -> None:
    class Holder:
        pass

    h = Holder()
    h.row = _Row(_Fill(1, 2, b"x"), "n", 3)  # type: ignore[attr-defined]
    h.me = h  # type: ignore[attr-defined]
    assert untrack(h.row)  # type: ignore[attr-defined]
    gone = weakref.ref(h)
    del h
    gc.collect()
    assert gone() is None
