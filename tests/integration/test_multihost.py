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
4. ``raydex down``: no placement group left; ``raydex deploy`` again, on the same log, of step 5's
   spec: healthy, trades, hashes agree.
5. A standby (issue 37): the primary sequencer on host-b, its standby on host-c, the arbiter,
   holder and committer on host-a, replicas on host-a and host-c. Under signed load, in order:
   host-c's processes killed (the standby lost): the primary goes on, degraded to local
   durability, status exits 4 naming replication; host-c back: the standby restarts on its own
   log, catches up, status 0. The link host-b <-> host-c cut (blackhole routes both ways): the
   primary degrades only once the arbiter recorded the standby out of sync; the link back, the
   standby catches up. host-b's processes killed (the primary's host lost): the standby takes
   over (epoch 2), every acknowledged tx is executed on the replicas, their state hashes agree,
   every tx in flight got an answer whose outcome its hash tells; host-b back: the old primary
   refuses to sequence (fenced, epoch still 2) and ``raydex deploy`` makes it the standby, in
   sync (status 0). Durations are printed (figures, never bounds).

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
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from kit.multihost import (
    Sent,
    SignedLoad,
    caught_up,
    deploy,
    fund,
    healthy,
    lookup,
    next_nonce,
    primary,
    probe,
    raydex_groups,
    replicas,
    standby_spec,
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
    """The redeploy is step 5's (``standby_spec``: the sequencer moves to host-b, a standby on
    host-c, replicas on host-a and host-c) on the same folders: the exchange resumes where it
    was, its WAL now followed by a standby, and the module spends no other deploy on it."""
    out = cluster.raydex("down", "--address", cluster.address).stdout
    assert out.startswith("stopped: raydex-committer, raydex-monitor"), out
    assert raydex_groups(cluster) == []
    code, st = status(cluster)
    assert code == 0 and st["health"]["actors"] == {}  # nothing deployed: nothing down

    t0 = time.monotonic()
    # the WAL and snapshots are kept: the exchange resumes where it was
    cluster.raydex("deploy", str(standby_spec(cluster)), "--address", cluster.address)
    until("healthy again", lambda: healthy(cluster), 240)
    say(f"deploy with a standby on the kept log, healthy: {time.monotonic() - t0:.1f} s")
    maker, taker = traders
    maker.nonce = taker.nonce = 0
    for t in (maker, taker):  # the accounts' nonces survived the redeploy: ask the sequencer
        t.nonce = next_nonce(cluster, t, via="host-a")
    assert trade_across(cluster, maker, taker, rounds=1, via=("host-a", "host-c")) >= 1
    st = until("caught up", lambda: healthy(cluster))
    assert len({a["state_hash"] for a in replicas(st).values()}) == 1
    assert len(raydex_groups(cluster)) == 6  # the standby's too


# ---- a standby on another host: losing it, the link, and the primary's host (issue 37) ---------


def say(what: str) -> None:
    print(f"\nhost-loss: {what}", file=sys.stderr)


@pytest.fixture(scope="module")
def standby_traders(cluster: NetnsCluster, traders: tuple[Trader, Trader]) -> tuple[Trader, Trader]:
    """The module's traders on ``standby_spec``'s deployment: step 4 deployed it; run alone
    (``-k``), this deploys it (``raydex down`` first: the sequencer moves)."""
    if status(cluster)[1]["health"].get("replication") is None:
        cluster.raydex("down", "--address", cluster.address)
        cluster.raydex("deploy", str(standby_spec(cluster)), "--address", cluster.address)
    until("the deployment with a standby healthy", lambda: healthy(cluster), 240)
    for t in traders:
        t.nonce = next_nonce(cluster, t, via="host-a")
    return traders


def replication(st: dict[str, Any]) -> dict[str, Any]:
    rep: dict[str, Any] = st["health"]["replication"] or {}
    return rep


def degraded(cluster: NetnsCluster) -> dict[str, Any] | None:
    """``raydex status`` when it exits 4 because the primary degraded to local durability."""
    code, st = status(cluster)
    return st if code == 4 and replication(st).get("degraded") else None


def load_on(traders: tuple[Trader, Trader], *ips: str) -> SignedLoad:
    """The maker through the first IP, the taker through the last."""
    maker, taker = traders
    return SignedLoad([(maker, ips[0], True), (taker, ips[-1], False)])


def only_refusals(load: SignedLoad) -> None:
    """Every tx answered 200, or 23000 (the replica's overload door while the primary waited for
    its standby: refused before anything was sent, the nonce unused)."""
    assert {s.code for s in load.sent} <= {200, 23000}, Counter(s.code for s in load.sent)


def goes_on(load: SignedLoad, more: int = 20) -> None:
    n = len(load.acked())
    try:
        until(f"{more} more txs acknowledged", lambda: len(load.acked()) >= n + more, 90)
    except AssertionError as exc:
        answers = Counter((s.code, s.error[:120]) for s in load.sent)
        raise AssertionError(f"{exc}; answers so far: {answers}") from None


def test_e_the_standby_lost_the_primary_goes_on_degraded_and_the_standby_catches_up_back(
    cluster: NetnsCluster, standby_traders: tuple[Trader, Trader]
) -> None:
    st = until("healthy", lambda: healthy(cluster))
    placed = {n: a["host"] for n, a in st["health"]["actors"].items()}
    assert (placed["raydex-sequencer"], placed["raydex-standby"]) == ("host-b", "host-c")
    assert placed["raydex-snapshot"] == placed["raydex-committer"] == placed["arbiter"] == "host-a"
    rep = replication(st)
    assert (rep["primary"], rep["standby"], rep["epoch"]) == ("raydex-sequencer", "raydex-standby",
                                                               1)  # fmt: skip
    assert rep["durability"] == "replicated" and rep["in_sync"] and rep["arbiter_in_sync"]
    a = cluster.hosts["host-a"].ip
    with load_on(standby_traders, a) as load:
        goes_on(load)
        # every tx so far acknowledged with the standby's ack (the primary is in sync)
        assert status(cluster)[1]["health"]["replication"]["in_sync"]
        killed = cluster.kill_host("host-c")
        t0 = time.monotonic()
        st = until("the primary degraded to local durability", lambda: degraded(cluster))
        to_alarm = time.monotonic() - t0
        problems = st["health"]["problems"]
        assert any(p.startswith("replication DEGRADED: the primary raydex-sequencer")
                   for p in problems), problems  # fmt: skip
        assert st["actors"]["arbiter"]["in_sync"] is False  # the standby may not take over
        goes_on(load)  # acknowledged on host-b's own log meanwhile
    cluster.start_ray("host-c")
    t1 = time.monotonic()
    st = until("the standby back and in sync", lambda: healthy(cluster), 240)
    rep = replication(st)
    assert rep["standby"] == "raydex-standby" and rep["in_sync"] and not rep["degraded"]
    assert st["actors"]["raydex-standby"]["durable_seq"] == st["actors"]["raydex-sequencer"]["seq"]
    only_refusals(load)
    back = time.monotonic() - t1
    say(f"standby lost ({killed} processes): status exit 4 naming replication after "
        f"{to_alarm:.1f} s; host-c back to healthy (in sync) in {back:.1f} s")  # fmt: skip


def cut(cluster: NetnsCluster, a: str, b: str, on: bool) -> None:
    """Drop every packet between hosts ``a`` and ``b`` (a blackhole route on each side), or
    let them through again."""
    verb = "add" if on else "del"
    for here, there in ((a, b), (b, a)):
        ip = cluster.hosts[there].ip
        cluster.run(here, ["ip", "route", verb, "blackhole", f"{ip}/32"])


def test_f_a_cut_link_degrades_the_primary_after_the_arbiter_and_the_standby_catches_up(
    cluster: NetnsCluster, standby_traders: tuple[Trader, Trader]
) -> None:
    until("healthy", lambda: healthy(cluster))
    before = status(cluster)[1]["actors"]["raydex-sequencer"]["replication"]["degradations"]
    with load_on(standby_traders, cluster.hosts["host-a"].ip) as load:
        goes_on(load)
        cut(cluster, "host-b", "host-c", True)
        t0 = time.monotonic()
        try:
            st = until("the primary degraded", lambda: degraded(cluster))
            to_degraded = time.monotonic() - t0
            # degraded only after the arbiter recorded the standby out of sync
            assert st["actors"]["arbiter"]["in_sync"] is False
            rep = st["actors"]["raydex-sequencer"]["replication"]
            assert rep["degradations"] == before + 1
            goes_on(load)
        finally:
            cut(cluster, "host-b", "host-c", False)
        t1 = time.monotonic()
    st = until("the standby caught up after the link came back", lambda: healthy(cluster), 180)
    assert replication(st)["in_sync"] and st["actors"]["arbiter"]["in_sync"] is True
    only_refusals(load)
    say(f"link cut: degraded after {to_degraded:.1f} s (the arbiter first), cut for "
        f"{t1 - t0:.1f} s, in sync again {time.monotonic() - t1:.1f} s after")  # fmt: skip


def test_g_the_primarys_host_lost_the_standby_takes_over_with_every_acknowledged_tx(
    cluster: NetnsCluster, standby_traders: tuple[Trader, Trader]
) -> None:
    until("healthy", lambda: healthy(cluster))
    a, c = cluster.hosts["host-a"].ip, cluster.hosts["host-c"].ip
    with load_on(standby_traders, a, c) as load:
        goes_on(load, 50)
        killed = cluster.kill_host("host-b")
        t_kill = time.monotonic()

        def first_after() -> Sent | None:
            return next((s for s in load.acked() if s.sent > t_kill), None)

        first = until("a tx sent after the kill acknowledged", first_after, 120)
        goes_on(load)
    takeover = first.answered - t_kill

    def taken_over() -> dict[str, Any] | None:
        code, st = status(cluster)
        ok = code == 4 and primary(st) == "raydex-standby" and caught_up(st)
        return st if ok else None

    st = until("the standby the primary, the replicas caught up", taken_over, 120)
    new = st["actors"]["raydex-standby"]
    assert (new["role"], new["epoch"]) == ("primary", 2)
    assert len({r["state_hash"] for r in replicas(st).values()}) == 1
    assert not any(s["diverged"] for s in st["state"])
    # every acknowledged tx is executed in the new primary's state (as its replicas hold it;
    # executed: in a block, whatever its own outcome there)
    acked = [s.tx_hash for s in load.acked()]
    executed = lookup(a, acked)
    lost = [h for h, got in executed.items() if got is None]
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged txs not executed: {lost[:5]}"
    # every tx in flight got an answer; its hash tells whether it executed
    others = [s for s in load.sent if s.code != 200]
    assert all(s.code is not None for s in others), [s.error for s in others][:5]
    outcome = lookup(a, [s.tx_hash for s in others])
    # a refusal is final, but the same tx sent again (same nonce, same bytes) may have executed
    # under another answer: acknowledged, or 21822 (in flight at the kill, then refused as a
    # used nonce when sent again)
    again = set(acked)
    maybe = {s.tx_hash for s in others if s.code == 21822}
    refused_but_executed = [
        s
        for s in others
        if s.code != 21822 and outcome[s.tx_hash] is not None and s.tx_hash not in again | maybe
    ]
    assert not refused_but_executed, refused_but_executed[:5]
    codes = Counter(s.code for s in others)
    unknown = [s for s in others if s.code == 21822 and s.tx_hash not in again]
    found = sum(outcome[s.tx_hash] is not None for s in unknown)
    say(f"primary host lost ({killed} processes): takeover (kill -> first tx acknowledged by "
        f"the new primary) {takeover:.2f} s, its promotion {new.get('takeover_s')} s; "
        f"{len(acked)} acknowledged, 0 lost; not acknowledged: {dict(codes)}; of the "
        f"{len(unknown)} answered 21822 and never sent again, "
        f"{found} executed (per their hash)")  # fmt: skip

    # host-b back: Ray restarts the old primary there on its old log; it may not sequence
    cluster.start_ray("host-b")
    t1 = time.monotonic()

    def fenced() -> dict[str, Any] | None:
        code, st = status(cluster)
        old = st["health"]["actors"].get("raydex-sequencer", {})
        return st if code == 4 and old.get("state") == "fenced" else None

    st = until("the old primary back and fenced", fenced, 240)
    assert "fenced" in st["actors"]["raydex-sequencer"]["refused"]
    arbiter = st["actors"]["arbiter"]
    assert (arbiter["epoch"], arbiter["primary"]) == (2, "raydex-standby")
    to_fenced = time.monotonic() - t1
    cluster.raydex("deploy", str(standby_spec(cluster)), "--address", cluster.address)
    st = until("the old primary's slot a standby in sync", lambda: healthy(cluster), 240)
    rep = replication(st)
    assert (rep["primary"], rep["standby"], rep["epoch"]) == ("raydex-standby", "raydex-sequencer",
                                                               2)  # fmt: skip
    assert rep["in_sync"] and st["actors"]["raydex-sequencer"]["role"] == "standby"
    maker, taker = standby_traders
    for t in standby_traders:
        t.nonce = next_nonce(cluster, t, via="host-a")
    assert trade_across(cluster, maker, taker, rounds=1, via=("host-a", "host-c")) >= 1
    say(f"host-b back: the old primary fenced after {to_fenced:.1f} s; redeployed as the "
        f"standby, in sync {time.monotonic() - t1 - to_fenced:.1f} s after")  # fmt: skip
