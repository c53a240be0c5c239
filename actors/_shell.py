"""What every Ray actor shell of raydex does the same way: pin itself, say where it is."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any


def advertised_host() -> str:
    """This node's IP as other nodes reach it (127.0.0.1 outside Ray)."""
    try:
        import ray

        return str(ray.util.get_node_ip_address())
    except Exception:  # outside a Ray worker: loopback
        return "127.0.0.1"


def pin_actor(bundle: Any) -> dict[str, Any]:
    """Pin the calling actor's threads to its planned bundle (a ``BundlePlacement``); the placement
    report, or {} when the actor was not planned (tests, embedded runs without a plan)."""
    if bundle is None:
        return {}
    import ray

    from raydex.cluster.placement import pin_bundle

    report = pin_bundle(bundle, ray.get_runtime_context().get_node_id())
    return dataclasses.asdict(report)


class ActorRuntime:
    """The per-process discipline every raydex actor applies around its boot: GC policy and
    monitor before it, pinning (all threads, once they exist) and the boot-heap freeze after it."""

    def __init__(self, bundle: Any = None, gc_spec: Any = None) -> None:
        from raydex.observability.gcstats import GcMonitor, GcPolicy

        self.bundle = bundle
        self.gc = GcPolicy(gc_spec)
        self.monitor = GcMonitor()
        self.placement: dict[str, Any] = {}
        self._scheduled: asyncio.Task[None] | None = None

    def before_boot(self) -> None:
        self.monitor.install()
        self.gc.apply()

    def after_boot(self) -> None:
        self.placement = pin_actor(self.bundle)
        self.gc.after_boot()
        self._scheduled = asyncio.get_running_loop().create_task(self.gc.run_scheduled())

    def status(self) -> dict[str, Any]:
        return {"placement": self.placement, "gc": self.monitor.summary()}
