"""One actor's slot as the actor sees it at run time: where it runs and which cores it pins.

The control plane (``raydex.cluster.control.placement``) plans a :class:`BundlePlacement` per
actor and hands it to the actor; inside the actor, :func:`pin_bundle` pins every thread to the
bundle's cores (Ray pins nothing) and reports the placement in force. Kept apart from the planner
so the actors import only this leaf, never the control plane that creates them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .pinning import PinReport, current_policy, pin_all_threads, try_realtime
from .topology import HOST_LABEL, numa_resource

__all__ = ["BundlePlacement", "Role", "pin_bundle"]

Role = Literal["sequencer", "snapshot", "committer", "replica", "standby"]


@dataclass(frozen=True, slots=True)
class BundlePlacement:
    """One actor's slot: host, NUMA node, cores to pin, Ray resources to reserve."""

    role: Role
    group: str
    index: int
    host: str
    numa_node: int
    cpus: tuple[int, ...]
    #: CPUs (and ``numa<N>`` units) reserved in Ray: ``len(cpus)``
    #: unless the NUMA node is oversubscribed.
    request: float
    shared: bool
    pin: bool
    realtime: bool
    #: the heap on 2 MiB transparent huge pages (``raydex.cluster.hugepages``)
    huge_pages: bool = False

    def bundle(self) -> dict[str, float]:
        """The Ray bundle: ``{"CPU": r, "numa<N>": r}``."""
        return {"CPU": self.request, numa_resource(self.numa_node): self.request}

    def label_selector(self) -> dict[str, str]:
        return {HOST_LABEL: self.host}


def pin_bundle(bundle: BundlePlacement, node_id: str, *, rt_priority: int = 10) -> PinReport:
    """Inside the actor: pin all threads to the bundle's cores (if ``pin``), try SCHED_FIFO (if
    ``realtime``), and report the placement in force."""
    policy = try_realtime(rt_priority) if bundle.realtime else current_policy()
    if not bundle.pin:
        return PinReport(node_id, bundle.numa_node, (), policy, 0)
    return pin_all_threads(bundle.cpus, node_id=node_id, numa_node=bundle.numa_node, policy=policy)
