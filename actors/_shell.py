"""What every Ray actor shell of raydex does the same way: pin itself, say where it is."""

from __future__ import annotations

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
