"""The deployed stack's metrics reach the node's Prometheus endpoint as ``ray_raydex_*`` series.

Deploys sequencer, snapshot holder, committer and one replica (group ``metrics``, so its series
are told apart from other tests' replicas) on the session's Ray, trades a little over real HTTP
and WebSocket, then scrapes ``http://127.0.0.1:<MetricsExportPort>/metrics`` until every expected
series is there (Recorders flush every 2 s; Ray's agent exports every ~10 s). The session's Ray
runs with the dashboard, for the state API: each actor's repr as Ray recorded it is checked there.

Also: a histogram's exported ``_count`` and buckets equal what was observed, exactly, however
many samples a flush carries (an actor records them through the real Recorder and RaySink);
every series carries the deployment (the Ray namespace), every counter of the catalog is on
the endpoint right after the deploy, before any traffic, every metric a query of
``observability/grafana_dashboard.json`` reads is one the endpoint exports (both parsed), and each
actor's live line (seq, lag, state hash) reaches its log file, which the dashboard's Actors page
links, as Ray's log API serves it."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import ray

from raydex.actors.local import Trader
from raydex.actors.runtime import LIVE_HINT, LIVE_LOG_PREFIX
from raydex.cluster import hugepages
from raydex.cluster.control import deploy as dep
from raydex.cluster.control.spec import load_spec
from raydex.cluster.topology import Topology
from raydex.codecs import tx_to_json_str
from raydex.observability.metrics import CATALOG

pytestmark = pytest.mark.integration

NS = "raydex-metrics-it"
WAIT = 30.0
SCRAPE_S = 60.0
GROUP = 'group="metrics"'

_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")


def spec_text(tmp: Path, http: int, data: int) -> str:
    return f"""
chain_id: 304
ports: {{http: {http}, data: {data}}}
sequencer: {{wal_dir: {tmp}/wal, block_interval_ms: 1.0, wal_fsync: block, cpus: 1}}
snapshot: {{dir: {tmp}/snap, every_blocks: 5, every_seconds: 1.0, cpus: 1}}
markets:
  - {{market_index: 0, symbol: ETH, price_decimals: 2, size_decimals: 4, initial_mark: "3000.00",
     taker_fee: 200, liquidation_fee: 5000, max_price_deviation: 5000}}
replica_groups:
  - {{name: metrics, replicas: 1, cpus_per_replica: 1}}
"""


@pytest.fixture(scope="module")
def replica_port(
    ray_session: None,
    tmp_path_factory: pytest.TempPathFactory,
    session_topology: Topology,
    session_host: str,
) -> Iterator[int]:
    tmp = tmp_path_factory.mktemp("metrics")
    spec = load_spec(spec_text(tmp, dep.free_port(), dep.free_port(pair=True)))
    dep.deploy(spec, namespace=NS, topologies={session_host: session_topology})
    try:
        status = dep.status(NS)
        yield int(status["raydex-replica-metrics-0"]["direct_port"])
    finally:
        dep.down(NS)


def trade_a_little(port: int, traders: list[Trader]) -> None:
    seq = ray.get_actor(dep.SEQUENCER, namespace=NS)
    ops: list[Any] = [op for t in traders for op in t.setup(10**12)]
    outs: list[Any] = ray.get(seq.operator.remote(ops), timeout=WAIT)
    assert {o.code for o in outs} == {200}
    base = f"http://127.0.0.1:{port}/api/v1"
    alice, bob = traders

    async def run() -> None:
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(f"http://127.0.0.1:{port}/stream")
            await ws.send_json({"type": "subscribe", "channel": "order_book/0"})
            for i in range(6):
                t, side = (alice, 1) if i % 2 else (bob, 0)
                tx = t.order(300_000 + 100 * (i % 3), 5, side)
                form = {"tx_type": "14", "tx_info": tx_to_json_str(tx)}
                async with http.post(f"{base}/sendTx", data=form) as r:
                    body = await r.json()
                    assert body["code"] == 200, body
            for path in ("orderBooks", "orderBookOrders?market_id=0", "blocks"):
                async with http.get(f"{base}/{path}") as r:
                    assert r.status == 200, await r.text()
            await ws.close()

    asyncio.run(asyncio.wait_for(run(), WAIT))


def scrape(port: int) -> list[tuple[str, str, float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text: str = r.read().decode()
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m and m["name"].startswith("ray_raydex_"):
            out.append((m["name"], m["labels"] or "", float(m["value"])))
    return out


#: (series name, a label fragment it must carry, value must be > 0)
EXPECTED: tuple[tuple[str, str, bool], ...] = (
    ("ray_raydex_blocks_total", 'role="sequencer"', True),
    ("ray_raydex_block_seconds_count", 'role="sequencer"', True),
    ("ray_raydex_block_close_seconds_bucket", 'le="0.001"', False),
    ("ray_raydex_block_size_txs_sum", 'role="sequencer"', True),
    ("ray_raydex_wal_fsync_seconds_count", 'role="sequencer"', True),
    ("ray_raydex_wal_handoff_seconds_count", 'role="sequencer"', True),
    ("ray_raydex_block_seq", 'role="sequencer"', True),
    ("ray_raydex_block_seq", 'role="committer"', True),
    ("ray_raydex_snapshot_build_seconds_count", 'role="snapshot"', True),
    ("ray_raydex_apply_seconds_count", GROUP, True),
    ("ray_raydex_apply_cpu_seconds_count", GROUP, True),
    # the replica says it runs its C loops (make builds them here)
    ("ray_raydex_replica_native_info", 'block_decode="true"', True),
    ("ray_raydex_replica_native_info", 'cache_loop="true"', True),
    ("ray_raydex_replica_native_info", 'book_json="true"', True),
    ("ray_raydex_blocks_total", GROUP, True),
    ("ray_raydex_block_seq", GROUP, True),
    ("ray_raydex_book_publish_delay_seconds_count", GROUP, True),
    ("ray_raydex_dry_run_seconds_count", GROUP, True),
    ("ray_raydex_tx_lifecycle_seconds_count", 'stage="sequenced",tx_type="create_order"', True),
    ("ray_raydex_tx_lifecycle_seconds_count", 'stage="confirmed",tx_type="create_order"', True),
    ("ray_raydex_cache_hits_total", GROUP, True),
    ("ray_raydex_cache_fallbacks_total", GROUP, True),
    ("ray_raydex_ws_connections", GROUP, False),
    ("ray_raydex_ws_queue_depth_messages", GROUP, False),
    ("ray_raydex_replica_lag_blocks", GROUP, False),
    ("ray_raydex_gc_collections_total", 'gen="0"', True),
    ("ray_raydex_gc_pause_seconds_count", 'gen="0"', True),
    ("ray_raydex_placement_info", GROUP, True),
    ("ray_raydex_placement_info", 'role="committer"', True),
)


def missing(series: list[tuple[str, str, float]]) -> list[str]:
    out = []
    for name, fragment, positive in EXPECTED:
        values = [v for n, labels, v in series if n == name and fragment in labels]
        if not values or (positive and sum(values) <= 0):
            out.append(f"{name}{{{fragment}}}")
    return out


DASHBOARD = Path(__file__).parents[2] / "observability" / "grafana_dashboard.json"
#: counters that stay 0 in a calm run: they must be exported anyway (a panel shows 0, not no data)
ZERO_COUNTERS = (
    "ray_raydex_ws_conflations_total",
    "ray_raydex_ws_slow_disconnects_total",
    "ray_raydex_loop_restarts_total",
)


def grafana_metric_names() -> set[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for v in board["templating"]["list"]:
        if isinstance(v.get("query"), dict):
            exprs.append(v["query"]["query"])
    assert exprs
    return {n for e in exprs for n in re.findall(r"\bray_raydex_[a-z_]+", e)}


def metrics_port() -> int:
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    (node,) = [n for n in nodes if n["Alive"]]
    return int(node["MetricsExportPort"])


def test_every_counter_is_on_the_endpoint_right_after_the_deploy_before_any_traffic(
    replica_port: int,
) -> None:
    """A rate panel reads 0, not "no data", from the first scrape: conflations, slow-consumer
    disconnects, dropped samples, loop restarts, audit failures and the rest included."""
    counters = {f"ray_{n}" for n, d in CATALOG.items() if d.kind == "counter"}
    deadline = time.monotonic() + SCRAPE_S
    lacking = sorted(counters)
    while time.monotonic() < deadline:
        ours = {n for n, labels, _ in scrape(metrics_port()) if f'deployment="{NS}"' in labels}
        lacking = sorted(counters - ours)
        if not lacking:
            break
        time.sleep(1.0)
    assert not lacking, f"counters not exported after {SCRAPE_S:.0f} s: {lacking}"


def test_the_stacks_metrics_appear_on_the_nodes_prometheus_endpoint(replica_port: int) -> None:
    trade_a_little(replica_port, [Trader(1), Trader(2)])
    port = metrics_port()
    deadline = time.monotonic() + SCRAPE_S
    lacking: list[str] = ["(not scraped yet)"]
    while time.monotonic() < deadline:
        series = scrape(port)
        names = {n for n, _, _ in series}
        lacking = missing(series) + [z for z in ZERO_COUNTERS if z not in names]
        lacking += sorted(grafana_metric_names() - names)
        if not lacking:
            break
        time.sleep(1.0)
    assert not lacking, f"missing after {SCRAPE_S:.0f} s: {lacking}"
    placement = [labels for n, labels, _ in series if n == "ray_raydex_placement_info"]
    assert any('numa_node="' in p and 'policy="' in p for p in placement)
    assert not any("account" in labels for _, labels, _ in series)
    ours = [(n, labels) for n, labels, _ in series if f'deployment="{NS}"' in labels]
    assert {n for n, _ in ours} >= {n for n, _, _ in EXPECTED}, [
        x for x in series if "block_seq" in x[0]
    ]
    assert not [x for x in series if 'deployment="' not in x[1]], "a series without deployment"
    # actors are named by their Ray names, whatever the role
    assert {'name="raydex-sequencer"', 'name="raydex-snapshot"', 'name="raydex-committer"'} <= {
        f'name="{m}"' for _, labels in ours for m in re.findall(r'name="([^"]+)"', labels)
    }


def test_each_actor_says_what_it_is_in_rays_state_api_and_live_in_its_status(
    replica_port: int,
) -> None:
    """Ray records ``repr()`` when ``__init__`` returns: role, deployment/name, configured ports,
    the planned placement and where the live figures are (``live=log``). ``status()["repr"]`` is
    the same ``__repr__`` now: seq, lag, hash; and each actor writes it to its ``.out`` log.

    The log is read from the session's log folder (``worker-<id>-<job>-<pid>.out``, the file the
    dashboard's actor Log tab serves): Ray's log API goes through the node's dashboard agent,
    which cannot start when another Ray on this host holds the agent's fixed default port."""
    from ray.util.state import list_actors

    # this session's Ray by its address: other Rays may run on the host (autodetection refuses)
    gcs = ray.get_runtime_context().gcs_address
    listed = list_actors(address=gcs, filters=[("ray_namespace", "=", NS)], detail=True, limit=1000)
    found = {a.name: a.repr_name for a in listed if a.state == "ALIVE"}
    pids = {a.name: a.pid for a in listed if a.state == "ALIVE"}
    needs = {a.name: a.required_resources for a in listed if a.state == "ALIVE"}
    roles = {
        dep.SEQUENCER: "sequencer",
        dep.SNAPSHOT: "snapshot",
        dep.COMMITTER: "committer",
        "raydex-replica-metrics-0": "replica",
    }
    for name, role in roles.items():
        text = found[name]
        assert text.startswith(f"{role} {NS}/{name} "), text
        assert re.search(r" node=\S+ ", text) and " cpus=" in text and " policy=" in text, text
        assert text.endswith(f" {LIVE_HINT}") and " seq=" not in text, text
    for name in (dep.SEQUENCER, dep.COMMITTER):  # pinned to planned cores, the committer too
        assert re.search(r" numa=\d+ cpus=\d", found[name]), found[name]
    # every actor, the committer included, asks Ray for CPU of its own placement group's bundle
    # (the Actors page's "Required resources"; a token amount on this oversubscribed host)
    for name in roles:
        assert any(k.startswith("CPU_group_") and v > 0 for k, v in needs[name].items()), needs
    assert " data=" in found[dep.SEQUENCER] and " port=" in found["raydex-replica-metrics-0"]
    assert " group=metrics " in found["raydex-replica-metrics-0"]
    live = dep.status(NS)
    for name in roles:
        assert live[name]["repr"].startswith(f"{roles[name]} {NS}/{name} ")
    # every planned actor put its heap on huge pages (raydex.yaml's default): its arenas before
    # the boot, glibc's through the runtime_env deploy gave it (read at the worker's start)
    for name in roles:
        heap = live[name]["placement"]["huge_pages"]
        assert heap["glibc"] and heap["thp"] == hugepages.thp_mode(), (name, heap)
        assert heap["arenas"] is hugepages.AVAILABLE, (name, heap)
        if hugepages.AVAILABLE:  # installed by the worker's py_executable, before Ray's imports
            assert heap["arenas_in_use"] > 0 and heap["at_start"], (name, heap)
        if hugepages.AVAILABLE and heap["thp"] in ("always", "madvise"):
            assert heap["huge_page_bytes"] > 0 and " pages=2M" in live[name]["repr"], name
    replica = live["raydex-replica-metrics-0"]
    seq, digest = replica["state_hash_seq"], replica["state_hash"]
    assert f" seq={replica['seq']} lag=" in replica["repr"]
    assert f" hash={digest[:8]}@{seq} " in replica["repr"]
    assert " state=serving " in replica["repr"] and " direct=" in replica["repr"]

    logs = Path(ray._private.worker.global_worker.node.get_logs_dir_path())

    def live_lines(name: str) -> list[str]:
        (out,) = logs.glob(f"worker-*-{pids[name]}.out")
        return [ln for ln in out.read_text().splitlines() if ln.startswith(f"{LIVE_LOG_PREFIX} ")]

    # every actor's log has its live line; the replica's catches up with the seq seen above
    deadline = time.monotonic() + 2 * SCRAPE_S
    while True:
        lines = {name: live_lines(name) for name in roles}
        last = lines["raydex-replica-metrics-0"][-1:] or [""]
        m = re.search(r" seq=(\d+) lag=\d+ ", last[0])
        if all(lines.values()) and m and int(m[1]) >= replica["seq"]:
            break
        assert time.monotonic() < deadline, f"no fresh live lines: {lines}"
        time.sleep(1.0)
    for name, role in roles.items():
        assert f" {role} {NS}/{name} " in lines[name][-1], lines[name]
        assert LIVE_HINT not in lines[name][-1]
    assert re.search(r" hash=[0-9a-f]{8}@\d+ ", last[0]), last
    assert " seq=" in lines[dep.SEQUENCER][-1] and " chain=" in lines[dep.COMMITTER][-1]


@ray.remote(num_cpus=0)
class _Observer:
    """Records samples into a real Recorder (the RaySink: this is a Ray worker) and flushes."""

    def __init__(self, deployment: str) -> None:
        from raydex.observability.metrics import Recorder

        self.rec = Recorder("replica", "observer", group="exact", deployment=deployment)
        self.hist = self.rec.histogram("raydex_dry_run_seconds")

    def record(self, values_ns: list[int]) -> int:
        for v in values_ns:
            self.hist.record(v)
        return self.rec.flush()


def test_a_histograms_exported_count_and_buckets_equal_what_was_observed(
    ray_session: None,
) -> None:
    """Many more samples per flush than Ray's own histogram could take one call at a time (the
    old export down-sampled past 600 and undercounted ``_count``): every one is counted."""
    deployment = "raydex-exact-count-it"
    observer = _Observer.remote(deployment)
    # 40,000 at ~25 us, 9,000 at ~2.5 ms, 1,000 at ~0.65 s; then 7 more in a second flush
    first = [25_000 + i % 11 for i in range(40_000)] + [2_500_000] * 9_000 + [650_000_000] * 1_000
    ray.get(observer.record.remote(first), timeout=WAIT)
    ray.get(observer.record.remote([25_000] * 7), timeout=WAIT)
    want = {"_count": 50_007.0, '_bucket{le="3e-05"}': 40_007.0, '_bucket{le="0.003"}': 49_007.0,
            '_bucket{le="0.7"}': 50_007.0, '_bucket{le="+Inf"}': 50_007.0,
            '_bucket{le="2e-05"}': 0.0}  # fmt: skip
    deadline = time.monotonic() + SCRAPE_S
    got: dict[str, float] = {}
    while time.monotonic() < deadline:
        got = {}
        for name, labels, value in scrape(metrics_port()):
            if f'deployment="{deployment}"' not in labels:
                continue
            le = re.search(r'(?:^|,)le="([^"]+)"', labels)
            key = name.removeprefix("ray_raydex_dry_run_seconds")
            got[key + (f'{{le="{le[1]}"}}' if le else "")] = value
        if all(got.get(k) == v for k, v in want.items()):
            break
        time.sleep(1.0)
    assert {k: got.get(k) for k in want} == want
    # _sum in seconds, exact to the local histogram's precision (< 1%)
    total = (sum(first) + 7 * 25_000) / 1e9
    assert got["_sum"] == pytest.approx(total, rel=0.01)
    # every boundary is exported, cumulative and never decreasing
    les = sorted((float(k[12:-2]), v) for k, v in got.items() if k.startswith("_bucket"))
    assert len(les) == len(CATALOG["raydex_dry_run_seconds"].boundaries) + 1
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(les))
    ray.kill(observer)


def test_grafana_install_puts_the_dashboard_where_rays_grafana_provisioning_reads(
    ray_session: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from raydex.cluster.cli.commands import main

    node = ray._private.worker.global_worker.node
    session = Path(node.get_session_dir_path())
    provider = session / "metrics/grafana/provisioning/dashboards/default.yml"
    folder = session / "metrics/grafana/dashboards"
    assert f"path: {folder}" in provider.read_text()  # Ray's file provider reads this folder
    assert main(["grafana", "install", "--session-dir", str(session)]) == 0
    installed = folder / "raydex_grafana_dashboard.json"
    assert json.loads(installed.read_text()) == json.loads(DASHBOARD.read_text())
    assert str(installed) in capsys.readouterr().out
    assert (folder / "default_grafana_dashboard.json").exists()  # beside Ray's own
