"""What every raydex actor shell does the same way (``shell``): pin itself to its bundle's cores,
apply its role's GC policy, say where it runs, export its metrics. A leaf: it imports no role."""

from .shell import METRICS_INTERVAL_S, ActorRuntime, advertised_host, pin_actor

__all__ = ["METRICS_INTERVAL_S", "ActorRuntime", "advertised_host", "pin_actor"]
