"""raydex on three hosts, done again and again: a Ray cluster of network namespaces on this machine.

The cluster (``tests/kit/netns.py``): host-a runs the Ray head, host-b and host-c workers, each
started as the README says, ``ray start ... --node-ip-address=<its IP> $(raydex node-args --host
<label>)``, all with this run's Ray token. Every ``raydex`` command runs on host-a by path, as an
operator's would; the test process reaches the replicas over the bridge. In order, on one cluster:

1. ``raydex deploy``: sequencer, holder, committer on host-a, one replica per NUMA node on host-b
   and host-c; signed orders sent to host-b and host-c trade with each other, and both hosts show
   the same trades; ``raydex status`` exits 0 and every follower's state hash agrees. ``raydex
   loadtest --address`` from host-a (no replica there) drives both replica hosts, per host.
2. ``replicas_per_numa_node`` 1 -> 2 -> 1 -> 2 -> 1: each step adds or removes replicas on both
   hosts and no running replica moves (its host, cores, index and process stay).
3. host-c's processes killed: ``raydex status`` exits 4 naming it (how long it took is printed);
   a Ray node started with host-b's label is refused by ``raydex deploy`` naming ``raydex
   node-args --host``; host-c started again: its replica comes back, status exits 0.
4. ``raydex down``: no placement group left; ``raydex deploy`` again: healthy, trades, hashes agree.

It skips, saying why, only where network namespaces cannot be created (not root, no iproute2).
Bounded: one Ray cluster for the module, every loop has a deadline, and ``NetnsCluster.close``
stops every process of every namespace by PID (never ``ray stop``), then deletes the network.
The cluster and the raydex helpers are kits (``tests/kit/netns.py``, ``tests/kit/multihost.py``)
for other multi-host tests to start their own.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator

import pytest
from kit.multihost import (
    deploy,
    fund,
    healthy,
    next_nonce,
    probe,
    raydex_groups,
    replicas,
    status,
    trade_across,
    until,
    where,
    write_spec,
)
from kit.netns import NetnsCluster, netns_cluster, unavailable

from raydex.actors.local import Trader

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster() -> Iterator[NetnsCluster]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"no multi-host cluster on this machine: {reason}")
    with netns_cluster() as c:
        yield c


@pytest.fixture(scope="module")
def traders(cluster: NetnsCluster) -> tuple[Trader, Trader]:
    out = deploy(cluster, 1)
    assert "raydex-replica-public-0" in out and "raydex-replica-public-1" in out, out
    maker, taker = Trader(1), Trader(2)
    assert set(fund(cluster, (maker, taker))) == {200}
    return maker, taker


def test_a_deploy_on_three_hosts_trades_through_both_replica_hosts_and_agrees(
    cluster: NetnsCluster, traders: tuple[Trader, Trader]
) -> None:
    st = until("a healthy deployment", lambda: healthy(cluster))
    placed = {n: a["host"] for n, a in st["health"]["actors"].items()}
    assert placed["raydex-sequencer"] == placed["raydex-committer"] == "host-a"
    assert sorted(h for n, h in placed.items() if n.startswith("raydex-replica-")) == [
        "host-b", "host-c"]  # fmt: skip
    assert trade_across(cluster, *traders) >= 3
    st = until("every replica caught up after the trades", lambda: healthy(cluster))
    hashes = {a["state_hash"] for a in replicas(st).values()}
    assert len(hashes) == 1 and not any(s["diverged"] for s in st["state"])


def test_a_loadtest_run_where_no_replica_is_drives_the_replicas_of_every_host(
    cluster: NetnsCluster, traders: tuple[Trader, Trader]
) -> None:
    """``raydex loadtest --address`` on host-a, which runs no replica: its lanes go to the
    replicas of host-b and host-c (their node IPs) and the report says what each host served."""
    report = cluster.root / "loadtest.json"
    cluster.raydex(
        "loadtest", "--address", cluster.address, "--spec", str(write_spec(cluster, 1)),
        "--seconds", "3", "--tps", "40", "--accounts", "20", "--markets", "1", "--clients", "4",
        "--out", str(cluster.root / "loadtest"), "--json-out", str(report), "--quiet",
        "--generator-cpus", "any",
    )  # fmt: skip
    r = json.loads(report.read_text())
    hosts = r["hosts"]
    assert sorted(hosts) == ["host-b", "host-c"], hosts
    for label, h in hosts.items():
        assert h["endpoints"] == [f"{cluster.hosts[label].ip}:{h['endpoints'][0].split(':')[1]}"]
        assert h["accepted"] > 0, (label, h)
    assert r["replica_state_hashes_equal"] is True
    assert "## Per host" in (cluster.root / "loadtest" / "report.md").read_text()
    left = [g for g in probe(cluster, "groups") if g["name"].startswith("raydex-loadtest-")]
    assert left == []  # its own deployment torn down, placement groups included


def test_scaling_per_numa_node_on_two_hosts_twice_never_moves_a_running_replica(
    cluster: NetnsCluster, traders: tuple[Trader, Trader]
) -> None:
    first = where(until("healthy", lambda: healthy(cluster)))
    for count in (2, 1, 2, 1):
        out = deploy(cluster, count)
        st = until(f"healthy at {count} per NUMA node", lambda: healthy(cluster))
        now = where(st)
        per_host = sorted(h for h, _, _ in now.values())
        assert per_host == ["host-b"] * count + ["host-c"] * count, (out, now)
        for name, placed in first.items():
            assert now[name] == placed, f"{name} moved or restarted: {first[name]} -> {now[name]}"
    assert set(where(st)) == set(first)  # scaled down to the replicas it started with
    assert len(raydex_groups(cluster)) == len(first) + 3


def test_a_dead_host_is_an_alarm_a_duplicate_label_is_refused_and_the_host_comes_back(
    cluster: NetnsCluster, traders: tuple[Trader, Trader]
) -> None:
    before = where(until("healthy", lambda: healthy(cluster)))
    (on_c,) = [n for n, (h, _, _) in before.items() if h == "host-c"]
    killed = cluster.kill_host("host-c")
    t0 = time.monotonic()
    code, st = status(cluster)
    took = time.monotonic() - t0
    print(f"\nmultihost: raydex status with host-c dead ({killed} processes killed) answered "
          f"in {took:.1f} s, exit {code}", file=sys.stderr)  # fmt: skip
    assert code == 4, st["health"]
    assert st["health"]["actors"][on_c]["state"] in ("unreachable", "host down", "restarting")

    # a second Ray node labelled host-b (two hosts sharing a hostname, no --host): refused
    try:
        cluster.start_ray("host-c", as_host="host-b")
        refused = cluster.raydex("deploy", str(write_spec(cluster, 1)), "--address",
                                 cluster.address, check=False)  # fmt: skip
        assert refused.returncode == 1, (refused.stdout, refused.stderr[-3000:])
        assert "raydex node-args --host" in refused.stderr and "'host-b'" in refused.stderr
    finally:
        cluster.kill_host("host-c")

    cluster.start_ray("host-c")
    st = until("host-c's replica back and the deployment healthy", lambda: healthy(cluster), 240)
    now = where(st)
    assert now[on_c][0] == "host-c" and now[on_c][2] != before[on_c][2]  # a new process there
    others = {n: p for n, p in before.items() if n != on_c}
    assert {n: now[n] for n in others} == others


def test_down_leaves_no_placement_group_and_a_new_deploy_is_healthy_and_trades(
    cluster: NetnsCluster, traders: tuple[Trader, Trader]
) -> None:
    out = cluster.raydex("down", "--address", cluster.address).stdout
    assert out.startswith("stopped: raydex-committer, raydex-monitor"), out
    assert raydex_groups(cluster) == []
    code, st = status(cluster)
    assert code == 0 and st["health"]["actors"] == {}  # nothing deployed: nothing down

    deploy(cluster, 1)  # the WAL and snapshots are kept: the exchange resumes where it was
    until("healthy again", lambda: healthy(cluster))
    maker, taker = traders
    maker.nonce = taker.nonce = 0
    for t in (maker, taker):  # the accounts' nonces survived the redeploy: ask the sequencer
        t.nonce = next_nonce(cluster, t)
    assert trade_across(cluster, maker, taker, rounds=1) >= 1
    st = until("caught up", lambda: healthy(cluster))
    assert len({a["state_hash"] for a in replicas(st).values()}) == 1
    assert len(raydex_groups(cluster)) == 5
