"""Placement groups put every actor where the deploy spec says, on a simulated cluster and here.

The 3-node test runs ``ray.cluster_utils.Cluster`` in a child process (this file run as a script):
a ``Cluster`` and the session's ``ray.init`` cannot live in one process, and a child keeps the test
independent of fixture order. The child gets its own ``TMPDIR``, so the cluster's sessions and its
``ray_current_cluster`` address file never meet another Ray on the machine; it shuts the cluster
down in ``finally``, Ray's reaper kills the nodes if the child dies, and the parent kills the
child's whole process group if it overruns. The child prints one JSON line for the parent to check.

The plan itself (``placement_for``) is pure: its tests at the top need no Ray and carry no
``integration`` mark.

The pinning test uses the shared session Ray (``ray_session``), which advertises this machine's
real NUMA topology: actors in their bundles pin all their threads to the planned cores.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import ray
import ray.cloudpickle
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from raydex.cluster.control.deploy import DeployRefused, check_ray_auth
from raydex.cluster.control.placement import (
    BundlePlacement,
    GroupPlacement,
    HostIdentityError,
    NodeFacts,
    PlacementError,
    actor_options,
    create_placement_groups,
    discover_topologies,
    pin_bundle,
    placement_for,
    remove_placement_groups,
    topologies_of,
)
from raydex.cluster.control.spec import DeploySpec, load_spec
from raydex.cluster.pinning import PinReport, thread_ids
from raydex.cluster.topology import HOST_LABEL, ROLE_LABEL, NumaNode, Topology, read_topology

if __name__ != "__main__":
    # Ray workers cannot import this test module: ship the actor class by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]

REPO = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT_S = 240
READY_TIMEOUT_S = 60.0


def two_numa(cpus_per_node: int) -> Topology:
    """A host with two NUMA nodes of ``cpus_per_node`` CPUs each."""
    n = cpus_per_node
    return Topology(
        (
            NumaNode(0, tuple(range(n)), (10, 21)),
            NumaNode(1, tuple(range(n, 2 * n)), (21, 10)),
        )
    )


# Three hosts, head first: a small head and two bigger workers.
HOSTS = {"host-a": two_numa(1), "host-b": two_numa(2), "host-c": two_numa(2)}

SPEC: dict[str, Any] = {
    "chain_id": 1,
    "sequencer": {"wal_dir": "/tmp/unused-wal", "numa_node": 0},
    "snapshot": {"dir": "/tmp/unused-snapshots", "numa_node": 1},
    "markets": [
        {"market_index": 0, "symbol": "ETH", "price_decimals": 2, "size_decimals": 4,
         "initial_mark": "3300.00"},
    ],
    "replica_groups": [
        {"name": "public", "replicas_per_numa_node": 1, "hosts": ["host-b", "host-c"]},
        {"name": "edge", "replicas": 1, "hosts": ["host-c"], "numa_nodes": [1]},
    ],
}  # fmt: skip

# The cluster scenario's spec: the committer on a worker (host-a's two single-core NUMA nodes
# hold the sequencer and the snapshot holder), beside host-b's NUMA node 0 replica.
CLUSTER_SPEC: dict[str, Any] = {**SPEC, "committer": {"host": "host-b", "numa_node": 0}}

# One more replica on host-c's NUMA node 1, which the plan above already fills.
EXTRA = {"name": "extra", "replicas": 1, "hosts": ["host-c"], "numa_nodes": [1]}
OVERFLOW: dict[str, Any] = {**SPEC, "replica_groups": [EXTRA]}


# --- the pure plan -------------------------------------------------------------------------------


def spec_with(groups: list[dict[str, Any]], **core: Any) -> DeploySpec:
    tree = {**SPEC, "replica_groups": groups}
    for part, extra in core.items():
        tree[part] = {**tree.get(part, {}), **extra}
    return load_spec(yaml.safe_dump(tree))


def check_invariants(plan: list[GroupPlacement], hosts: dict[str, Topology]) -> None:
    bundles = [b for g in plan for b in g.bundles]
    # Ray accounts resources in fixed-point units of 1e-4: summed as floats, requests on that
    # grid can pass the capacity by a rounding error (12 x 0.25 + ... = 3.0000000000000004)
    demand: dict[tuple[str, int], int] = {}
    for b in bundles:
        assert set(b.cpus) <= set(hosts[b.host].node(b.numa_node).cpus)
        assert abs(round(b.request * 10_000) - b.request * 10_000) < 1e-6  # Ray's 1e-4 steps
        key = (b.host, b.numa_node)
        demand[key] = demand.get(key, 0) + round(b.request * 10_000)
    for (host, numa), total in demand.items():
        assert total <= len(hosts[host].node(numa).cpus) * 10_000
        here = [b for b in bundles if (b.host, b.numa_node) == (host, numa)]
        if not any(b.shared for b in here):
            used = [c for b in here for c in b.cpus]
            assert len(used) == len(set(used)), "cores of a NUMA node that fits are disjoint"


def test_on_a_roomy_host_nobody_shares_a_core_and_the_sequencer_takes_the_top_ones() -> None:
    hosts = {"big": two_numa(8)}
    plan = placement_for(spec_with([{"name": "r", "replicas_per_numa_node": 2}]), hosts)
    check_invariants(plan, hosts)
    by_group = {g.name: g.bundles for g in plan}
    (seq,) = by_group["sequencer"]
    assert (seq.host, seq.numa_node, seq.cpus, seq.request) == ("big", 0, (7,), 1.0)
    assert by_group["snapshot"][0].cpus == (15,)  # SPEC puts it on NUMA node 1
    (committer,) = by_group["committer"]
    assert (committer.numa_node, committer.cpus, committer.request) == (0, (6,), 1.0)
    assert [(b.numa_node, b.cpus) for b in by_group["r"]] == [
        (0, (0,)),
        (0, (1,)),
        (1, (8,)),
        (1, (9,)),
    ]
    assert not any(b.shared for g in plan for b in g.bundles)


def repo_spec_with_replicas(count: int | None) -> DeploySpec:
    """The repository's raydex.yaml; ``count`` replaces its one replica per NUMA node."""
    tree = yaml.safe_load((REPO / "raydex.yaml").read_text())
    if count is not None:
        (group,) = tree["replica_groups"]
        group.pop("replicas_per_numa_node", None)
        group["replicas"] = count
    return load_spec(yaml.safe_dump(tree))


@pytest.mark.parametrize(
    ("replicas", "request_each", "cores"),
    [
        # the shipped spec: sequencer, holder, committer and the one NUMA node's replica, four
        # cores asked of two; the committer, planned last, takes the core the replica does not
        (None, 0.5, {("sequencer", 0): (1,), ("snapshot", 0): (0,), ("committer", 0): (1,),
                     ("public", 0): (0,)}),
        # two replicas, five cores asked of two: one replica per core, and the committer joins
        # the holder, not the sequencer
        (2, 0.4, {("sequencer", 0): (1,), ("snapshot", 0): (0,), ("committer", 0): (0,),
                  ("public", 0): (0,), ("public", 1): (1,)}),
    ],
    ids=["one-per-numa-node", "two-replicas"],
)  # fmt: skip
def test_on_a_two_core_laptop_bundles_share_cores_and_scale_their_requests_down(
    replicas: int | None, request_each: float, cores: dict[tuple[str, int], tuple[int, ...]]
) -> None:
    hosts = {"laptop": Topology.single([0, 1])}
    plan = placement_for(repo_spec_with_replicas(replicas), hosts)
    check_invariants(plan, hosts)
    bundles = [b for g in plan for b in g.bundles]
    assert len(bundles) == len(cores)
    assert all(b.shared and b.request == request_each for b in bundles)
    assert sum(b.request for b in bundles) == 2.0
    assert {(g.name, b.index): b.cpus for g in plan for b in g.bundles} == cores


def test_a_total_replica_count_spreads_over_hosts_before_numa_nodes() -> None:
    hosts = {"a": two_numa(4), "b": two_numa(4)}
    plan = placement_for(spec_with([{"name": "r", "replicas": 3}]), hosts)
    replicas = next(g for g in plan if g.name == "r").bundles
    assert [(b.host, b.numa_node) for b in replicas] == [("a", 0), ("b", 0), ("a", 1)]


def test_replicas_avoid_the_sequencer_cores_while_others_are_free() -> None:
    hosts = {"h": Topology.single(range(5))}
    plan = placement_for(
        spec_with([{"name": "r", "replicas": 2}], snapshot={"numa_node": 0}), hosts
    )
    cores = {(g.name, b.index): b.cpus for g in plan for b in g.bundles}
    assert cores == {
        ("sequencer", 0): (4,),
        ("snapshot", 0): (3,),
        ("committer", 0): (2,),
        ("r", 0): (0,),
        ("r", 1): (1,),
    }


@pytest.mark.parametrize(
    ("groups", "core", "message"),
    [
        ([{"name": "r", "replicas": 1, "hosts": ["nowhere"]}], {}, "unknown host 'nowhere'"),
        ([], {"sequencer": {"host": "ghost"}}, "sequencer: unknown host 'ghost'"),
        ([], {"snapshot": {"numa_node": 5}}, "snapshot: host 'host-a' has no NUMA node 5"),
        ([], {"committer": {"host": "ghost"}}, "committer: unknown host 'ghost'"),
        ([{"name": "r", "replicas": 1, "cpus_per_replica": 3}], {}, "3 cpus requested"),
        ([{"name": "r", "replicas": 1, "numa_nodes": [7]}], {}, "no host has its NUMA nodes"),
    ],
)
def test_a_spec_the_hosts_cannot_hold_is_a_placement_error_naming_the_part(
    groups: list[dict[str, Any]], core: dict[str, Any], message: str
) -> None:
    with pytest.raises(PlacementError, match=re.escape(message)):
        placement_for(spec_with(groups, **core), HOSTS)


def replica_slots(plan: list[GroupPlacement], group: str) -> Counter[tuple[str, int]]:
    return Counter((b.host, b.numa_node) for g in plan if g.name == group for b in g.bundles)


def test_scaling_a_per_numa_count_on_two_hosts_never_moves_a_running_replica() -> None:
    """Issue 35: raising replicas_per_numa_node renumbered replicas across hosts. With the
    running bundles kept, each step adds or removes replicas per (host, NUMA node) only; a
    replica that stays keeps its host, NUMA node, cores and index; the lowest indices stay."""
    hosts = {"a": two_numa(8), "b": two_numa(8)}  # room for 3 per node beside the core roles
    running: dict[tuple[str, int], BundlePlacement] = {}
    first: set[int] = set()
    for count in (1, 2, 1, 2, 3, 1):
        spec = spec_with([{"name": "r", "replicas_per_numa_node": count}])
        plan = placement_for(spec, hosts, keep=running)
        check_invariants(plan, hosts)
        now = {(b.group, b.index): b for g in plan for b in g.bundles}
        assert all(now[k] == b for k, b in running.items() if k in now), "a replica moved"
        assert replica_slots(plan, "r") == {(h, n): count for h in hosts for n in (0, 1)}
        if not first:
            first = {i for g, i in now if g == "r"}
        running = now
    assert {i for g, i in running if g == "r"} == first  # scaling down drops the newest


def test_a_total_count_keeps_its_running_replicas_and_adds_with_free_indices() -> None:
    hosts = {"a": two_numa(4), "b": two_numa(4)}
    plan = placement_for(spec_with([{"name": "r", "replicas": 3}]), hosts)
    running = {(b.group, b.index): b for g in plan for b in g.bundles}
    plan = placement_for(spec_with([{"name": "r", "replicas": 2}]), hosts, keep=running)
    kept = {(b.index, b.host, b.numa_node) for g in plan if g.name == "r" for b in g.bundles}
    assert kept == {(0, "a", 0), (1, "b", 0)}  # the third, (a, 1), goes
    running = {(b.group, b.index): b for g in plan for b in g.bundles}
    plan = placement_for(spec_with([{"name": "r", "replicas": 4}]), hosts, keep=running)
    grown = {(b.index, b.host, b.numa_node) for g in plan if g.name == "r" for b in g.bundles}
    assert grown == {(0, "a", 0), (1, "b", 0), (2, "a", 1), (3, "b", 1)}


def test_replicas_on_a_host_that_is_away_stay_planned_as_they_were() -> None:
    hosts = {"a": two_numa(4), "b": two_numa(4)}
    spec = spec_with([{"name": "r", "replicas_per_numa_node": 1}])
    running = {(b.group, b.index): b for g in placement_for(spec, hosts) for b in g.bundles}
    plan = placement_for(spec, {"a": hosts["a"]}, keep=running)  # b is down
    now = {(b.group, b.index): b for g in plan for b in g.bundles}
    assert now == running


def facts(node_id: str, host: str, role: str = "worker", auth: bool = True) -> NodeFacts:
    labels = {HOST_LABEL: host, ROLE_LABEL: role}
    return NodeFacts(node_id, f"10.0.0.{len(node_id)}", labels, two_numa(2), auth)


def test_two_nodes_with_one_host_label_are_refused_naming_raydex_node_args_host() -> None:
    nodes = [facts("n1", "h", "head"), facts("n22", "h")]
    with pytest.raises(HostIdentityError, match=r"raydex node-args --host"):
        topologies_of(nodes)
    found = topologies_of([facts("n22", "b"), facts("n1", "a", "head"), facts("n333", "c")])
    assert list(found) == ["a", "b", "c"]  # head first


def test_a_public_data_plane_is_refused_while_rays_own_authentication_is_off() -> None:
    spec = spec_with([])
    nodes = [facts("n1", "a", "head"), facts("n22", "b", auth=False)]
    check_ray_auth(spec, "127.0.0.1", nodes)  # loopback: only this host's users reach it
    check_ray_auth(spec, "0.0.0.0", [facts("n1", "a", "head")])  # token auth everywhere
    with pytest.raises(DeployRefused, match=r"token authentication is off on b\b") as refused:
        check_ray_auth(spec, "0.0.0.0", nodes)
    assert "allow_unauthenticated_ray: true" in str(refused.value)
    assert "RAY_AUTH_MODE=token" in str(refused.value)
    allowed = dataclasses.replace(spec, allow_unauthenticated_ray=True)
    check_ray_auth(allowed, "0.0.0.0", nodes)


@settings(deadline=None, max_examples=60)
@given(
    cpus_per_node=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    groups=st.lists(
        st.tuples(st.booleans(), st.integers(0, 4), st.integers(1, 2)), min_size=0, max_size=3
    ),
)
def test_every_plan_keeps_cores_on_their_node_and_requests_within_capacity(
    cpus_per_node: list[int], groups: list[tuple[bool, int, int]]
) -> None:
    first = 0
    nodes = []
    for i, n in enumerate(cpus_per_node):
        nodes.append(NumaNode(i, tuple(range(first, first + n)), tuple(10 for _ in cpus_per_node)))
        first += n
    hosts = {"h1": Topology(tuple(nodes)), "h2": Topology(tuple(nodes))}
    spec_groups = [
        {
            "name": f"g{i}",
            ("replicas_per_numa_node" if per_node else "replicas"): count,
            "cpus_per_replica": min(k, min(cpus_per_node)),
        }
        for i, (per_node, count, k) in enumerate(groups)
    ]
    plan = placement_for(
        spec_with(spec_groups, sequencer={"numa_node": 0}, snapshot={"numa_node": 0}), hosts
    )
    check_invariants(plan, hosts)


@ray.remote(num_cpus=0)
class Probe:
    """Stands in for an actor of the stack: says where it runs, and pins itself."""

    def where(self) -> dict[str, Any]:
        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "labels": ctx.get_node_labels()}

    def pin(self, bundle: BundlePlacement) -> tuple[PinReport, dict[int, list[int]]]:
        report = pin_bundle(bundle, ray.get_runtime_context().get_node_id())
        return report, {tid: sorted(os.sched_getaffinity(tid)) for tid in thread_ids()}


def _cluster_scenario() -> dict[str, Any]:
    """Child process: start the 3-node cluster, place the spec, report where actors landed."""
    from ray.cluster_utils import Cluster

    cluster = Cluster()
    try:
        for i, (host, topo) in enumerate(HOSTS.items()):
            cluster.add_node(
                num_cpus=topo.cpu_count,
                resources={k: float(v) for k, v in topo.resources().items()},
                labels={HOST_LABEL: host, ROLE_LABEL: "head" if i == 0 else "worker"},
                include_dashboard=False,
            )
        ray.init(address=cluster.address, log_to_driver=False)
        discovered = discover_topologies(timeout_s=READY_TIMEOUT_S)
        plan = placement_for(load_spec(yaml.safe_dump(CLUSTER_SPEC)), HOSTS)
        groups = create_placement_groups(plan, timeout_s=READY_TIMEOUT_S)
        landed = []
        for group, pg in groups:
            for i, bundle in enumerate(group.bundles):
                probe = Probe.options(**actor_options(bundle, pg, i)).remote()  # type: ignore[attr-defined]
                where = ray.get(probe.where.remote(), timeout=READY_TIMEOUT_S)
                landed.append({"planned": _plain(bundle), **where})
        overflow_plan = placement_for(load_spec(yaml.safe_dump(OVERFLOW)), HOSTS)
        extra = [g for g in overflow_plan if g.name == "extra"]
        try:
            create_placement_groups(extra, name_prefix="overflow", timeout_s=5.0)
            overflow_error = ""
        except PlacementError as exc:
            overflow_error = str(exc)
        left = [
            t["name"] for t in ray.util.placement_group_table().values() if t["state"] != "REMOVED"
        ]
        remove_placement_groups(pg for _, pg in groups)
        return {
            "landed": landed,
            "overflow_error": overflow_error,
            "live_groups": left,
            "discovered": {h: t == read_topology() for h, t in discovered.items()},
        }
    finally:
        ray.shutdown()
        cluster.shutdown()  # type: ignore[no-untyped-call]


def _plain(bundle: BundlePlacement) -> dict[str, Any]:
    return {
        "group": bundle.group,
        "index": bundle.index,
        "host": bundle.host,
        "numa_node": bundle.numa_node,
        "cpus": list(bundle.cpus),
        "shared": bundle.shared,
        "bundle": bundle.bundle(),
    }


def run_cluster_child() -> dict[str, Any]:
    tmp = tempfile.mkdtemp(prefix="rdx")  # short: Ray's socket paths live under it
    env = {**os.environ, "TMPDIR": tmp, "RAY_ADDRESS": ""}
    proc = subprocess.Popen(
        [sys.executable, __file__],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"cluster child overran {CHILD_TIMEOUT_S}s; stderr tail:\n{err[-3000:]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert proc.returncode == 0, f"cluster child failed; stderr tail:\n{err[-3000:]}"
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def cluster_result() -> dict[str, Any]:
    return run_cluster_child()


@pytest.mark.integration
def test_every_actor_lands_on_the_host_the_spec_says_on_a_three_node_cluster(
    cluster_result: dict[str, Any],
) -> None:
    landed = cluster_result["landed"]
    where = {(x["planned"]["group"], x["planned"]["index"]): x for x in landed}
    assert {g for g, _ in where} == {"sequencer", "snapshot", "committer", "public", "edge"}
    for x in landed:
        assert x["labels"][HOST_LABEL] == x["planned"]["host"]
    assert where["sequencer", 0]["labels"][ROLE_LABEL] == "head"
    assert where["committer", 0]["labels"][HOST_LABEL] == "host-b"
    public = sorted((x["planned"]["host"], x["planned"]["numa_node"]) for x in landed
                    if x["planned"]["group"] == "public")  # fmt: skip
    assert public == [("host-b", 0), ("host-b", 1), ("host-c", 0), ("host-c", 1)]
    assert (where["edge", 0]["planned"]["host"], where["edge", 0]["planned"]["numa_node"]) == (
        "host-c",
        1,
    )


@pytest.mark.integration
def test_each_bundle_reserves_its_numa_node_and_gets_cores_of_its_own(
    cluster_result: dict[str, Any],
) -> None:
    for x in cluster_result["landed"]:
        p = x["planned"]
        numa = f"numa{p['numa_node']}"
        assert p["bundle"] == {"CPU": 1.0, numa: 1.0}
        assert set(p["cpus"]) <= set(HOSTS[p["host"]].node(p["numa_node"]).cpus)
        assert not p["shared"]
    # host-a: the sequencer and the snapshot holder sit on different NUMA nodes, apart.
    core = {x["planned"]["group"]: x["planned"] for x in cluster_result["landed"]}
    assert (core["sequencer"]["numa_node"], core["snapshot"]["numa_node"]) == (0, 1)


@pytest.mark.integration
def test_a_group_beyond_a_numa_nodes_cores_is_refused_and_leaves_no_group_behind(
    cluster_result: dict[str, Any],
) -> None:
    assert "overflow-extra not placed" in cluster_result["overflow_error"]
    assert not [n for n in cluster_result["live_groups"] if n.startswith("overflow")]


@pytest.mark.integration
def test_each_hosts_topology_is_discovered_on_that_host_head_first(
    cluster_result: dict[str, Any],
) -> None:
    # All three simulated hosts are this machine, so each read its /sys: this machine's topology.
    assert cluster_result["discovered"] == {"host-a": True, "host-b": True, "host-c": True}
    assert list(cluster_result["discovered"]) == ["host-a", "host-b", "host-c"]


@pytest.mark.integration
@pytest.mark.usefixtures("ray_session")
def test_actors_in_their_bundles_pin_every_thread_to_their_planned_cores(
    session_topology: Topology, session_host: str
) -> None:
    local = {
        **SPEC,
        "sequencer": {"wal_dir": "/tmp/unused-wal"},
        "snapshot": {"dir": "/tmp/unused-snapshots"},
        "replica_groups": [{"name": "r", "replicas": 2}],
    }
    spec = load_spec(yaml.safe_dump(local))
    plan = placement_for(spec, {session_host: session_topology})
    groups = create_placement_groups(plan, name_prefix="pin-test", timeout_s=READY_TIMEOUT_S)
    probes = []
    try:
        results = []
        for group, pg in groups:
            for i, bundle in enumerate(group.bundles):
                probe = Probe.options(**actor_options(bundle, pg, i)).remote()  # type: ignore[attr-defined]
                probes.append(probe)
                results.append((bundle, ray.get(probe.pin.remote(bundle), timeout=60)))
    finally:
        for probe in probes:
            ray.kill(probe)
        remove_placement_groups(pg for _, pg in groups)
    assert [b.group for b, _ in results] == ["sequencer", "snapshot", "committer", "r", "r"]
    for bundle, (report, affinity) in results:
        assert report.cpus == bundle.cpus and report.threads_pinned == len(affinity) > 1
        assert all(cpus == list(bundle.cpus) for cpus in affinity.values())


if __name__ == "__main__":
    print(json.dumps(_cluster_scenario()))
