"""Where every actor of a deploy spec runs: host, NUMA node, cores; and the Ray placement groups.

::

    replicas_per_numa_node: 2 on two hosts with NUMA nodes of 8 cores (0-7, 8-15); [n] = pinned core

    host-a (head)                      host-b (worker)
    ┌ numa0 ──────────┬ numa1 ───────┐ ┌ numa0 ─────────┬ numa1 ────────┐
    │ sequencer  [7]  │ replica [8]  │ │ replica [0]    │ replica [8]   │   one placement group
    │ snapshot   [6]  │ replica [9]  │ │ replica [1]    │ replica [9]   │   (one bundle) per
    │ committer  [5]  │              │ │                │               │   actor
    │ replica [0] [1] │              │ │                │               │
    └─────────────────┴──────────────┘ └────────────────┴───────────────┘

``placement_for(spec, topology_by_node)`` is pure: every bundle's host, NUMA node and exact cores
from the spec and each host's ``Topology`` (keyed by host label; the first host is the default for
the sequencer, the holder and the committer, so put the head first). ``create_placement_groups``
turns the plan into Ray placement groups: bundle ``{"CPU": r, "numa<N>": r}`` plus the label
selector ``{"raydex.io/host": host}``. ``discover_topologies()`` reads a live cluster's hosts (one
zero-CPU task per node). Ray does not pin: each actor pins itself (``pin_bundle``).

Core assignment per (host, NUMA node): the sequencer and the holder first, from the highest cores
(CPU 0 usually takes housekeeping and interrupts); replicas the least-used cores, lowest first,
avoiding those two's while any other is free; the committer last, not on the sequencer's core
while another is as free. A node with fewer cores than requested shares them (``shared=True``, each
``r`` scaled down to fit; deploy then reserves only a token, ``deploy.SHARED_REQUEST``).

Invariants of a plan: every bundle's cores belong to its NUMA node on its host; if a node's
requests fit, its bundles' core sets are disjoint; per (host, NUMA node) the ``r`` sum to at most
its core count. ``PlacementError`` when the spec names a host, NUMA node or core count no host
has. Cost: ``placement_for`` is linear in bundles x cores.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..bundle import BundlePlacement, Role, pin_bundle
from ..topology import HOST_LABEL, ROLE_LABEL, Topology, numa_resource, read_topology
from .spec import (
    CommitterSpec,
    DeploySpec,
    ReplicaGroupSpec,
    SequencerSpec,
    SnapshotSpec,
    StandbySpec,
)

if TYPE_CHECKING:
    from ray.util.placement_group import PlacementGroup

__all__ = [
    "BundlePlacement",
    "GroupPlacement",
    "HostIdentityError",
    "NodeFacts",
    "PlacementError",
    "actor_options",
    "create_placement_groups",
    "discover_nodes",
    "discover_topologies",
    "pin_bundle",
    "placement_for",
    "remove_placement_groups",
    "topologies_of",
]

_GRANULARITY = 10_000  # Ray keeps resource quantities to 1e-4


class PlacementError(RuntimeError):
    """The spec cannot be placed on these hosts (or Ray could not reserve a group in time)."""


@dataclass(frozen=True, slots=True)
class GroupPlacement:
    """The bundles of one placement group: a replica group, sequencer, snapshot holder or
    committer."""

    name: str
    bundles: tuple[BundlePlacement, ...]


def placement_for(
    spec: DeploySpec,
    topology_by_node: Mapping[str, Topology],
    keep: Mapping[tuple[str, int], BundlePlacement] | None = None,
) -> list[GroupPlacement]:
    """Plan every bundle of ``spec`` on the hosts of ``topology_by_node`` (pure; see module doc).

    ``keep``: the bundles of actors that run already, by (group, index) (the deployment's
    record): they stay as they are, their cores taken first, and only the rest is planned around
    them. A kept replica leaves the plan only when its group has too many on its (host, NUMA
    node) (the highest indices go) or no longer covers that slot; one on a host that is away
    (recorded, not among the live hosts) stays untouched until the host is back.
    """
    if not topology_by_node:
        raise PlacementError("no hosts to place on")
    kept = dict(keep or {})
    away = {b.host for b in kept.values()} - set(topology_by_node)
    planner = _Planner(topology_by_node, away)
    for b in kept.values():
        planner.hold(b)
    head = next(iter(topology_by_node))

    def single(
        role: Role, part: SequencerSpec | SnapshotSpec | CommitterSpec | StandbySpec
    ) -> GroupPlacement:
        running = kept.get((role, 0))
        if running is not None:  # never moved: the sequencer is never restarted by a deploy
            return GroupPlacement(role, (running,))
        slot = (part.host or head, part.numa_node)
        planner.check_slot(slot, part.cpus, role)
        bundle = planner.take(
            role, role, 0, slot, part.cpus, part.pin, part.realtime, part.huge_pages
        )
        return GroupPlacement(role, (bundle,))

    core = [single("sequencer", spec.sequencer), single("snapshot", spec.snapshot)]
    standby = spec.sequencer.standby
    if standby is not None:  # the sequencer's host is lost with it: the standby may not share it
        if standby.host == (spec.sequencer.host or head):
            raise PlacementError("sequencer.standby: must be on another host than the sequencer's")
        core.append(single("standby", standby))
    groups = [
        GroupPlacement(
            g.name,
            tuple(
                _replica_bundles(planner, g, {i: b for (n, i), b in kept.items() if n == g.name})
            ),
        )
        for g in spec.replica_groups
    ]
    committer = single("committer", spec.committer)  # last: it takes what the hot path left
    frozen = set(kept.values())
    return [_scaled(g, planner, frozen) for g in [*core, committer, *groups]]


def _replica_bundles(
    planner: _Planner, group: ReplicaGroupSpec, running: Mapping[int, BundlePlacement]
) -> list[BundlePlacement]:
    """The group's bundles: the running ones that its targets still cover (lowest index first),
    then new ones, with the lowest free indices, for the targets left."""
    slots = planner.slots(group)
    if group.replicas_per_numa_node is not None:
        if group.replicas_per_numa_node and not slots and not planner.away:
            raise PlacementError(f"replica group {group.name!r}: no host has its NUMA nodes")
        targets = [s for s in slots for _ in range(group.replicas_per_numa_node)]
    else:
        count = group.replicas or 0
        if count and not slots:
            raise PlacementError(f"replica group {group.name!r}: no host has its NUMA nodes")
        # spread across hosts first: (a,0), (b,0), (a,1), (b,1), ...
        hosts = list(dict.fromkeys(h for h, _ in slots))
        numas = sorted({n for _, n in slots})
        spread = [(h, n) for n in numas for h in hosts if (h, n) in slots]
        targets = [spread[i % len(spread)] for i in range(count)]
    for slot in targets:
        planner.check_slot(slot, group.cpus_per_replica, f"replica group {group.name!r}")
    wanted = Counter(targets)
    out: list[BundlePlacement] = []
    for _, b in sorted(running.items()):
        slot = (b.host, b.numa_node)
        if wanted[slot] > 0:
            wanted[slot] -= 1
            out.append(b)
        elif b.host in planner.away and (group.hosts is None or b.host in group.hosts):
            out.append(b)
    used = {b.index for b in out}
    free = (i for i in itertools.count() if i not in used)
    for slot in targets:
        if wanted[slot] > 0:
            wanted[slot] -= 1
            out.append(
                planner.take(
                    "replica",
                    group.name,
                    next(free),
                    slot,
                    group.cpus_per_replica,
                    group.pin,
                    group.realtime,
                    group.huge_pages,
                )
            )
    return sorted(out, key=lambda b: b.index)


class _Planner:
    """Per (host, NUMA node) core usage while a plan is built."""

    def __init__(self, topology_by_node: Mapping[str, Topology], away: set[str]) -> None:
        self.topologies = topology_by_node
        #: hosts of running actors that are not among the live hosts now
        self.away = away
        self.usage: dict[tuple[str, int], dict[int, int]] = {}
        self.reserved: set[tuple[str, int]] = set()  # (host, cpu) of sequencer/snapshot
        self.sequencer_cores: set[tuple[str, int]] = set()
        self.requested: dict[tuple[str, int], int] = {}

    def cpus_of(self, slot: tuple[str, int]) -> tuple[int, ...]:
        host, numa = slot
        return self.topologies[host].node(numa).cpus

    def check_slot(self, slot: tuple[str, int], cpus: int, what: str) -> None:
        host, numa = slot
        if host not in self.topologies:
            raise PlacementError(f"{what}: unknown host {host!r} (have {list(self.topologies)})")
        if numa not in self.topologies[host].node_ids:
            raise PlacementError(f"{what}: host {host!r} has no NUMA node {numa}")
        if cpus > len(self.cpus_of(slot)):
            raise PlacementError(
                f"{what}: {cpus} cpus requested, NUMA node {numa} of {host!r} has "
                f"{len(self.cpus_of(slot))}"
            )

    def hold(self, b: BundlePlacement) -> None:
        """A running actor's bundle: its cores count as used (on a live host that has them)."""
        slot = (b.host, b.numa_node)
        host = self.topologies.get(b.host)
        if host is None or b.numa_node not in host.node_ids:
            return
        usage = self.usage.setdefault(slot, dict.fromkeys(self.cpus_of(slot), 0))
        for c in b.cpus:
            if c in usage:
                usage[c] += 1
        if b.role in ("sequencer", "snapshot", "standby"):
            self.reserved.update((b.host, c) for c in b.cpus)
        if b.role in ("sequencer", "standby"):
            self.sequencer_cores.update((b.host, c) for c in b.cpus)
        self.requested[slot] = self.requested.get(slot, 0) + len(b.cpus)

    def slots(self, group: ReplicaGroupSpec) -> list[tuple[str, int]]:
        hosts = list(group.hosts) if group.hosts is not None else list(self.topologies)
        hosts = [h for h in hosts if h not in self.away]
        for host in hosts:
            if host not in self.topologies:
                raise PlacementError(
                    f"replica group {group.name!r}: unknown host {host!r} "
                    f"(have {list(self.topologies)})"
                )
        wanted = group.numa_nodes
        return [
            (host, numa)
            for host in hosts
            for numa in self.topologies[host].node_ids
            if wanted is None or numa in wanted
        ]

    def take(
        self,
        role: Role,
        group: str,
        index: int,
        slot: tuple[str, int],
        k: int,
        pin: bool,
        realtime: bool,
        huge_pages: bool = False,
    ) -> BundlePlacement:
        host, numa = slot
        usage = self.usage.setdefault(slot, dict.fromkeys(self.cpus_of(slot), 0))
        if role == "replica":

            def key(cpu: int) -> tuple[int, int, int]:
                return (usage[cpu], (host, cpu) in self.reserved, cpu)
        elif role == "committer":

            def key(cpu: int) -> tuple[int, int, int]:
                return (usage[cpu], (host, cpu) in self.sequencer_cores, -cpu)
        else:

            def key(cpu: int) -> tuple[int, int, int]:
                return (usage[cpu], 0, -cpu)

        chosen = sorted(sorted(usage, key=key)[:k])
        shared = any(usage[c] for c in chosen)
        for c in chosen:
            usage[c] += 1
            if role in ("sequencer", "snapshot", "standby"):
                self.reserved.add((host, c))
            if role in ("sequencer", "standby"):
                self.sequencer_cores.add((host, c))
        self.requested[slot] = self.requested.get(slot, 0) + k
        return BundlePlacement(
            role,
            group,
            index,
            host,
            numa,
            tuple(chosen),
            float(k),
            shared,
            pin,
            realtime,
            huge_pages,
        )


def _scaled(
    group: GroupPlacement, planner: _Planner, frozen: set[BundlePlacement]
) -> GroupPlacement:
    """Scale requests down on oversubscribed NUMA nodes and mark every new bundle there shared
    (a running one, in ``frozen``, keeps what Ray reserved for it: groups are immutable)."""
    out = []
    for b in group.bundles:
        if b in frozen:
            out.append(b)
            continue
        slot = (b.host, b.numa_node)
        capacity = len(planner.cpus_of(slot))
        demand = planner.requested[slot]
        if demand > capacity:
            r = math.floor(len(b.cpus) * capacity * _GRANULARITY / demand) / _GRANULARITY
            b = replace(b, request=r, shared=True)
        out.append(b)
    return GroupPlacement(group.name, tuple(out))


# --- Ray side ----------------------------------------------------------------------------------


def create_placement_groups(
    plan: Sequence[GroupPlacement],
    *,
    name_prefix: str = "raydex",
    lifetime: str | None = None,
    timeout_s: float = 60.0,
) -> list[tuple[GroupPlacement, PlacementGroup]]:
    """Create one placement group per planned group and wait until Ray has reserved them all.

    Groups are named ``<name_prefix>-<group>`` (``lifetime="detached"`` to outlive the caller).
    Placement groups are immutable: to scale a group live, create a group for the added bundles
    (``GroupPlacement`` with just those) rather than replacing the old one, whose removal would kill
    its actors. On timeout every group created by this call is removed and ``PlacementError``
    names the group that did not fit.
    """
    from ray.util.placement_group import placement_group

    created: list[tuple[GroupPlacement, PlacementGroup]] = []
    for group in plan:
        if not group.bundles:
            continue
        pg = placement_group(
            bundles=[b.bundle() for b in group.bundles],
            strategy="PACK",
            name=f"{name_prefix}-{group.name}",
            lifetime=lifetime,
            bundle_label_selector=[b.label_selector() for b in group.bundles],
        )
        created.append((group, pg))
    for group, pg in created:
        if not pg.wait(timeout_seconds=timeout_s):
            remove_placement_groups(pg for _, pg in created)
            wanted = [(b.host, numa_resource(b.numa_node), b.request) for b in group.bundles]
            raise PlacementError(
                f"placement group {name_prefix}-{group.name} not placed within {timeout_s}s; "
                f"bundles (host, resource, amount): {wanted}"
            )
    return created


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """One live Ray node as read on the node itself: its id, IP, labels (``raydex node-args``),
    NUMA topology, and whether its Ray runs with token authentication."""

    node_id: str
    ip: str
    labels: dict[str, str]
    topology: Topology
    ray_auth: bool


class HostIdentityError(PlacementError):
    """Two live Ray nodes carry one host label: placement by host would merge them."""


def discover_nodes(timeout_s: float = 60.0) -> list[NodeFacts]:
    """Every live node's facts, read on that node by a zero-CPU task (in parallel); a node that
    does not answer within ``timeout_s`` is a ``PlacementError`` naming it. A node Ray listed
    alive that died meanwhile (a host just killed: Ray notices after missing its heartbeats, and
    its probe then cannot be scheduled) is left out, as it would have been a moment later."""
    import ray
    from ray.exceptions import NodeDiedError, TaskUnschedulableError, WorkerCrashedError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0)(_read_this_node)
    alive = [n for n in ray.nodes() if n["Alive"]]  # type: ignore[no-untyped-call]
    refs = [
        probe.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        ).remote()
        for node in alive
    ]
    _, late = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    if late:
        slow = [
            f"{n['NodeManagerAddress']} ({n.get('Labels', {}).get(HOST_LABEL, 'no host label')})"
            for n, r in zip(alive, refs, strict=True)
            if r in set(late)
        ]
        raise PlacementError(
            f"Ray nodes {', '.join(slow)} did not run a probe within {timeout_s:g}s (a host "
            "that just died stays listed for ~30 s): try again once `ray status` settles"
        )
    found: list[NodeFacts] = []
    gone: list[tuple[str, Exception]] = []
    for node, ref in zip(alive, refs, strict=True):
        try:
            labels, topology, auth = ray.get(ref)
        except (TaskUnschedulableError, NodeDiedError, WorkerCrashedError) as exc:
            gone.append((node["NodeID"], exc))
            continue
        found.append(NodeFacts(node["NodeID"], node["NodeManagerAddress"], labels, topology, auth))
    if gone:  # left out only if Ray now lists them dead; another failure is raised as it is
        still = {n["NodeID"] for n in ray.nodes() if n["Alive"]}  # type: ignore[no-untyped-call]
        for node_id, failure in gone:
            if node_id in still:
                raise failure
    return found


def topologies_of(nodes: Sequence[NodeFacts]) -> dict[str, Topology]:
    """The hosts' topologies keyed by host label, head first, then by label: the order
    ``placement_for`` expects. Only nodes started with ``raydex node-args`` (they carry the
    ``raydex.io/host`` label) count. Two nodes with one label are a ``HostIdentityError`` naming
    both and ``raydex node-args --host`` (hosts with the same hostname merge otherwise)."""
    by_host: dict[str, list[NodeFacts]] = {}
    for n in nodes:
        if HOST_LABEL in n.labels:
            by_host.setdefault(n.labels[HOST_LABEL], []).append(n)
    for host, same in sorted(by_host.items()):
        if len(same) > 1:
            each = ", ".join(f"node {n.node_id[:12]} at {n.ip}" for n in same)
            raise HostIdentityError(
                f"{len(same)} Ray nodes carry the host label {host!r} ({each}): raydex places "
                "by host label, so they would be taken for one host. Start Ray on each host with "
                "a label of its own: `ray start ... $(raydex node-args --host <unique name>)` "
                "(the default label is the hostname, which these hosts share)"
            )
    found = sorted(
        (same[0] for same in by_host.values()),
        key=lambda n: (n.labels.get(ROLE_LABEL) != "head", n.labels[HOST_LABEL]),
    )
    return {n.labels[HOST_LABEL]: n.topology for n in found}


def discover_topologies(timeout_s: float = 60.0) -> dict[str, Topology]:
    """Each live host's ``Topology`` (``discover_nodes`` then ``topologies_of``)."""
    return topologies_of(discover_nodes(timeout_s))


def _read_this_node() -> tuple[dict[str, str], Topology, bool]:
    import os

    import ray

    # Annotated Dict[str, List[str]] in Ray 2.60, but the values are the label strings.
    labels: dict[str, Any] = dict(ray.get_runtime_context().get_node_labels())
    # this node's mode, as its raylet (which started this worker) runs it; an older Ray without
    # the call: the environment the raylet passed down says it
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled

        auth = is_token_auth_enabled()
    except ImportError:  # pragma: no cover
        auth = os.environ.get("RAY_AUTH_MODE", "").lower() == "token"
    return {k: str(v) for k, v in labels.items()}, read_topology(), auth


def remove_placement_groups(pgs: Any) -> None:
    """Remove placement groups (and so kill the actors in them)."""
    from ray.util import remove_placement_group

    for pg in pgs:
        remove_placement_group(pg)


def actor_options(bundle: BundlePlacement, pg: PlacementGroup, index: int) -> dict[str, Any]:
    """``.options(**...)`` for the actor filling bundle ``index`` of ``pg``, planned as ``bundle``.

    The actor asks for the bundle's CPU and ``numa<N>`` amounts, so it can only run in that bundle.
    """
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {
        "num_cpus": bundle.request,
        "resources": {numa_resource(bundle.numa_node): bundle.request},
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=index
        ),
    }
