"""The GC policy sets what the spec says and the monitor sees the collections it causes."""

from __future__ import annotations

import asyncio
import gc
import weakref

from raydex.cluster.control.spec import GcSpec
from raydex.observability.gcstats import GcMonitor, GcPolicy


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
