"""What every Ray actor shell of raydex does the same way: pin itself, say where it is, export
its metrics (GC and placement on top of the service's own; flushed every ``METRICS_INTERVAL_S``)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raydex.observability.metrics import Recorder

#: how often an actor's Recorder exports (Ray's agent scrapes workers every ~10 s anyway)
METRICS_INTERVAL_S = 2.0


def advertised_host() -> str:
    """This node's IP as other nodes reach it (127.0.0.1 outside Ray)."""
    try:
        import ray

        return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    except Exception:  # outside a Ray worker: loopback
        return "127.0.0.1"


def pin_actor(bundle: Any) -> dict[str, Any]:
    """Pin the calling actor's threads to its planned bundle (a ``BundlePlacement``); the placement
    report, or {} when the actor was not planned (tests, embedded runs without a plan)."""
    if bundle is None:
        return {}
    import ray

    from raydex.cluster.bundle import pin_bundle

    report = pin_bundle(bundle, ray.get_runtime_context().get_node_id())
    return dataclasses.asdict(report)


class ActorRuntime:
    """The per-process discipline every raydex actor applies around its boot: GC policy and
    monitor before it, pinning (all threads, once they exist) and the boot-heap freeze after it."""

    def __init__(self, bundle: Any = None, gc_spec: Any = None, nice: int | None = 0) -> None:
        """``nice``: the niceness for every thread after the boot. 0 for the hot path (Ray starts
        workers at 15); None keeps Ray's, for background roles (snapshot holder, committer) that
        should yield the CPU to the sequencer and the replicas when the host is saturated."""
        from raydex.observability.gcstats import GcMonitor, GcPolicy

        self.nice = nice
        self.bundle = bundle
        self.gc = GcPolicy(gc_spec)
        self.monitor = GcMonitor()
        self.placement: dict[str, Any] = {}
        self.metrics: Recorder | None = None
        self._scheduled: asyncio.Task[None] | None = None

    def before_boot(self) -> None:
        self.monitor.install()
        self.gc.apply()

    def after_boot(self, metrics: Recorder | None = None) -> None:
        from raydex.cluster.pinning import renice_all_threads

        self.placement = pin_actor(self.bundle)
        if self.nice is not None:
            self.placement["nice"] = renice_all_threads(self.nice)
        else:
            self.placement["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
        self.gc.after_boot()
        self._scheduled = asyncio.get_running_loop().create_task(self.gc.run_scheduled())
        if metrics is not None:
            self.start_metrics(metrics)

    def start_metrics(self, rec: Recorder) -> None:
        """Add this process's GC and placement series to ``rec`` and start its flush task."""
        self.metrics = rec
        if self.bundle is not None:
            rec.base["group"] = str(self.bundle.group)
        mon = self.monitor
        for g in range(3):
            rec.histogram("raydex_gc_pause_seconds", mon.pauses[g], gen=str(g))
            rec.counter_fn(
                "raydex_gc_collections_total", lambda g=g: mon.collections[g], gen=str(g)
            )
        p = self.placement
        rec.gauge(
            "raydex_placement_info",
            lambda: 1.0,
            node=advertised_host(),
            numa_node=str(p.get("numa_node", -1)),
            cpus=",".join(str(c) for c in p.get("cpus", ())) or "any",
            policy=str(p.get("policy", "unpinned")),
        )
        rec.start(METRICS_INTERVAL_S)

    def status(self) -> dict[str, Any]:
        out = {"placement": self.placement, "gc": self.monitor.summary()}
        if self.metrics is not None:
            m = self.metrics
            out["metrics"] = {"flushes": m.flushes, "dropped_samples": m.dropped}
        return out
