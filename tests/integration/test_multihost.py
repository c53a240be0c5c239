"""raydex on three hosts, done again and again: a Ray cluster of network namespaces on this machine.

The cluster (``tests/kit/netns.py``): host-a runs the Ray head, host-b and host-c workers, each
started as the README says, ``ray start ... --node-ip-address=<its IP> $(raydex node-args --host
<label>)``, all with this run's Ray token. Every ``raydex`` command runs on host-a by path, as an
operator's would; the test process reaches the replicas over the bridge. In order, on one cluster:

1. ``raydex deploy``: sequencer, holder, committer on host-a, one replica per NUMA node on host-b
   and host-c; signed orders sent to host-b and host-c trade with each other, and both hosts show
   the same trades; ``raydex status`` exits 0 and every follower's state hash agrees.
2. ``replicas_per_numa_node`` 1 -> 2 -> 1 -> 2 -> 1: each step adds or removes replicas on both
   hosts and no running replica moves (its host, cores, index and process stay).
3. host-c's processes killed: ``raydex status`` exits 4 naming it (how long it took is printed);
   a Ray node started with host-b's label is refused by ``raydex deploy`` naming ``raydex
   node-args --host``; host-c started again: its replica comes back, status exits 0.
4. ``raydex down``: no placement group left; ``raydex deploy`` again: healthy, trades, hashes agree.

It skips, saying why, only where network namespaces cannot be created (not root, no iproute2).
Bounded: one Ray cluster for the module, every loop has a deadline, and ``NetnsCluster.close``
stops every process of every namespace by PID (never ``ray stop``), then deletes the network.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
import yaml
from kit.netns import NetnsCluster, make_root, unavailable

from raydex.actors.local import Trader
from raydex.codecs import tx_to_json_str

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "tests" / "kit" / "cluster_probe.py"
HTTP = 8080
GROUP = "public"
T = TypeVar("T")


#: the last verdict ``healthy`` saw, for a failure's message
LAST: dict[str, Any] = {}


def until(what: str, check: Callable[[], T | None], seconds: float = 120.0) -> T:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(1.0)
    raise AssertionError(f"not within {seconds:g}s: {what} (last verdict: {LAST})")


@pytest.fixture(scope="module")
def cluster() -> Iterator[NetnsCluster]:
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"no multi-host cluster on this machine: {reason}")
    c = NetnsCluster(make_root())
    started = time.monotonic()
    try:
        c.create_network()
        for label in c.labels:
            c.start_ray(label)
        print(f"\nmultihost: 3 Ray hosts up in {time.monotonic() - started:.1f} s", file=sys.stderr)
        yield c
    finally:
        c.close()
        print(f"multihost: the module took {time.monotonic() - started:.1f} s", file=sys.stderr)
        import shutil

        shutil.rmtree(c.root, ignore_errors=True)


def write_spec(c: NetnsCluster, per_numa: int) -> Path:
    """The repository's raydex.yaml with this cluster's folders, one market, and the replicas on
    the two workers; realtime off (the machine is shared)."""
    tree = yaml.safe_load((REPO / "raydex.yaml").read_text())
    tree["sequencer"].update(wal_dir=str(c.root / "state" / "wal"), oracle_interval_ms=0,
                             journal_realtime=False)  # fmt: skip
    tree["snapshot"].update(dir=str(c.root / "state" / "snapshots"), every_blocks=20)
    tree["markets"] = tree["markets"][:1]
    (group,) = tree["replica_groups"]
    group.update(replicas_per_numa_node=per_numa, hosts=["host-b", "host-c"], realtime=False)
    path = c.root / f"raydex-{per_numa}.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def deploy(c: NetnsCluster, per_numa: int) -> str:
    return c.raydex("deploy", str(write_spec(c, per_numa)), "--address", c.address).stdout


def status(c: NetnsCluster) -> tuple[int, dict[str, Any]]:
    done = c.raydex("status", "--json", "--address", c.address, check=False)
    assert done.returncode in (0, 3, 4), done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout)


def replicas(st: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: a for n, a in st["actors"].items() if n.startswith("raydex-replica-")}


def where(st: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...], int]]:
    """replica -> (host, pinned cores, pid)."""
    hosts = st["health"]["actors"]
    return {n: (hosts[n]["host"], tuple(a["placement"]["cpus"]), a["pid"])
            for n, a in replicas(st).items()}  # fmt: skip


def healthy(c: NetnsCluster) -> dict[str, Any] | None:
    """``raydex status`` when it exits 0 with every replica at the sequencer's seq, hashed."""
    code, st = status(c)
    LAST.update(code=code, line=st["health"]["line"])
    seq = st["actors"].get("raydex-sequencer", {}).get("seq", -1)
    reps = replicas(st).values()
    caught_up = all(r.get("seq", -1) >= seq and r.get("state_hash_seq") == r.get("seq")
                    for r in reps)  # fmt: skip
    return st if code == 0 and reps and caught_up else None


def groups(c: NetnsCluster) -> list[dict[str, str]]:
    out = c.run(c.labels[0], [sys.executable, str(PROBE), c.address, "groups"]).stdout
    found: list[dict[str, str]] = json.loads(out.strip().splitlines()[-1])
    return found


async def send(http: aiohttp.ClientSession, ip: str, tx: Any) -> dict[str, Any]:
    form = {"tx_type": "14", "tx_info": tx_to_json_str(tx)}
    async with http.post(f"http://{ip}:{HTTP}/api/v1/sendTx", data=form) as r:
        body: dict[str, Any] = await r.json()
        return body


async def recent(http: aiohttp.ClientSession, ip: str) -> list[dict[str, Any]]:
    async with http.get(f"http://{ip}:{HTTP}/api/v1/recentTrades?market_id=0&limit=100") as r:
        assert r.status == 200, await r.text()
        body: dict[str, Any] = await r.json()
        return list(body["trades"])


def trade_across(c: NetnsCluster, maker: Trader, taker: Trader, rounds: int = 3) -> int:
    """``rounds`` times: the maker's ask through host-b, the taker's crossing bid through
    host-c. Both hosts then list the same trades (waited for: each applies the blocks itself);
    returns how many trades they list."""
    b, cc = c.hosts["host-b"].ip, c.hosts["host-c"].ip

    async def go() -> int:
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            for _ in range(rounds):
                ask = await send(http, b, maker.order(330000, 100, is_ask=1))
                assert ask["code"] == 200, ask
                bid = await send(http, cc, taker.order(330000, 100, is_ask=0))
                assert bid["code"] == 200, bid
            for _ in range(60):
                on_b, on_c = await recent(http, b), await recent(http, cc)
                if on_b == on_c and len(on_b) >= rounds:
                    return len(on_b)
                await asyncio.sleep(0.5)
            raise AssertionError(f"host-b and host-c list different trades: {on_b} / {on_c}")

    return asyncio.run(go())


@pytest.fixture(scope="module")
def traders(cluster: NetnsCluster) -> tuple[Trader, Trader]:
    out = deploy(cluster, 1)
    assert "raydex-replica-public-0" in out and "raydex-replica-public-1" in out, out
    maker, taker = Trader(1), Trader(2)
    entries = [[t.account, t.api_key, t.pub.hex(), 10**12] for t in (maker, taker)]
    argv = [sys.executable, str(PROBE), cluster.address, "fund", json.dumps(entries)]
    codes = json.loads(cluster.run(cluster.labels[0], argv).stdout.strip().splitlines()[-1])
    assert set(codes) == {200}, codes
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
    assert groups_of_deployment(cluster) == len(first) + 3


def groups_of_deployment(c: NetnsCluster) -> int:
    return sum(1 for g in groups(c) if g["name"].startswith("raydex:"))


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
    twin = cluster.hosts["host-c"]
    cluster.hosts["host-c"] = type(twin)("host-b", twin.netns, twin.ip, twin.temp_dir, twin.log)
    try:
        cluster.start_ray("host-c")
        refused = cluster.raydex("deploy", str(write_spec(cluster, 1)), "--address",
                                 cluster.address, check=False)  # fmt: skip
        assert refused.returncode == 1, (refused.stdout, refused.stderr[-3000:])
        assert "raydex node-args --host" in refused.stderr and "'host-b'" in refused.stderr
    finally:
        cluster.kill_host("host-c")
        cluster.hosts["host-c"] = twin

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
    assert [g for g in groups(cluster) if g["name"].startswith("raydex:")] == []
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
    assert groups_of_deployment(cluster) == 5


def next_nonce(c: NetnsCluster, t: Trader) -> int:
    async def go() -> int:
        url = (f"http://{c.hosts['host-b'].ip}:{HTTP}/api/v1/nextNonce"
               f"?account_index={t.account}&api_key_index={t.api_key}")  # fmt: skip
        async with aiohttp.ClientSession() as http, http.get(url) as r:
            body: dict[str, Any] = await r.json()
            return int(body["nonce"])

    return asyncio.run(go())
