"""The Recorder counts on the hot path and exports only deltas; outside Ray it is local-only.

Every flush here goes to a ``LocalSink``, the backend the Recorder uses whenever the process is
not connected to Ray (the integration test scrapes the Ray one)."""

from __future__ import annotations

import asyncio
import bisect
import gc
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from raydex.actors.local import Trader, new_exchange
from raydex.actors.runtime import LIVE_HINT, LIVE_LOG_PREFIX, ActorRuntime, live_line
from raydex.actors.sequencer.service import SequencerConfig, SequencerService
from raydex.codecs import tx_to_json_str, tx_type_of
from raydex.observability.hist import Histogram
from raydex.observability.metrics import (
    CATALOG,
    COUNT_BUCKETS,
    SECONDS_BUCKETS,
    LocalSink,
    Recorder,
)


def recorder() -> tuple[Recorder, LocalSink]:
    sink = LocalSink()
    return Recorder("replica", "r0", group="api", sink=sink), sink


def ray_bucket(seconds: float) -> int:
    """Index of the Prometheus bucket (``le`` inclusive) holding ``seconds``."""
    return bisect.bisect_left(SECONDS_BUCKETS, seconds)


# ---- counters and gauges -------------------------------------------------------------------------


def test_a_count_is_exported_as_the_increments_since_the_previous_flush() -> None:
    rec, sink = recorder()
    hits = rec.count("raydex_cache_hits_total")
    hits.n += 3
    rec.flush()
    assert sink.value("raydex_cache_hits_total") == 3
    rec.flush()
    assert sink.value("raydex_cache_hits_total") == 3
    hits.n += 2
    rec.flush()
    assert sink.value("raydex_cache_hits_total") == 5


def test_a_flush_with_nothing_new_makes_no_counter_calls() -> None:
    rec, sink = recorder()
    hits = rec.count("raydex_cache_hits_total")
    hits.n += 1
    rec.flush()
    calls = sink.calls
    rec.flush()
    assert sink.calls == calls


def test_a_running_total_that_restarts_from_zero_counts_from_its_new_value() -> None:
    rec, sink = recorder()
    total = [10]
    rec.counter_fn("raydex_blocks_total", lambda: total[0])
    rec.flush()
    total[0] = 4  # the owner was rebuilt
    rec.flush()
    assert sink.value("raydex_blocks_total") == 14


def test_every_series_carries_role_name_and_group() -> None:
    rec, sink = recorder()
    rec.count("raydex_cache_hits_total").n += 1
    rec.flush()
    assert sink.value("raydex_cache_hits_total", role="replica", name="r0", group="api") == 1
    assert sink.value("raydex_cache_hits_total", group="other") == 0


def test_a_gauge_is_sampled_at_every_flush() -> None:
    rec, sink = recorder()
    depth = [7]
    rec.gauge("raydex_ws_queue_depth_messages", lambda: depth[0])
    rec.flush()
    assert sink.value("raydex_ws_queue_depth_messages") == 7
    depth[0] = 2
    rec.flush()
    assert sink.value("raydex_ws_queue_depth_messages") == 2


def test_a_source_that_raises_is_skipped_and_the_others_still_export() -> None:
    rec, sink = recorder()

    def broken() -> float:
        raise RuntimeError("owner not built yet")

    rec.gauge("raydex_ws_connections", broken)
    rec.count("raydex_cache_hits_total").n += 1
    rec.flush()
    assert rec.source_errors == 1
    assert sink.value("raydex_cache_hits_total") == 1


def test_names_outside_the_catalog_or_with_the_wrong_kind_or_tags_are_refused() -> None:
    rec, _ = recorder()
    with pytest.raises(KeyError):
        rec.count("raydex_not_a_metric_total")
    with pytest.raises(ValueError, match="is a histogram"):
        rec.count("raydex_apply_seconds")
    with pytest.raises(ValueError, match="takes tags"):
        rec.histogram("raydex_gc_pause_seconds")
    with pytest.raises(ValueError, match="takes tags"):
        rec.count("raydex_cache_hits_total", account="12")


# ---- histograms ----------------------------------------------------------------------------------


def test_histogram_samples_land_in_the_prometheus_bucket_of_their_value() -> None:
    rec, sink = recorder()
    h = rec.histogram("raydex_apply_seconds")
    samples_ns = [12_000, 95_000, 95_000, 180_000, 2_500_000, 40_000_000_000]
    for v in samples_ns:
        h.record(v)
    rec.flush()
    got = sink.histogram("raydex_apply_seconds")
    expected = [0] * (len(SECONDS_BUCKETS) + 1)
    for v in samples_ns:
        expected[ray_bucket(v / 1e9)] += 1
    assert got.buckets == expected
    assert got.count == len(samples_ns)
    assert got.sum == pytest.approx(sum(samples_ns) / 1e9, rel=0.01)


def test_a_cumulative_histogram_is_exported_once_per_sample() -> None:
    rec, sink = recorder()
    h = Histogram()  # owned by the service, also read by its status page
    rec.histogram("raydex_block_seconds", h)
    h.record(1_000_000)
    rec.flush()
    h.record(1_000_000)
    h.record(3_000_000)
    rec.flush()
    rec.flush()
    got = sink.histogram("raydex_block_seconds")
    assert got.count == 3
    assert got.sum == pytest.approx(0.005, rel=0.01)


def test_a_histogram_reset_by_its_owner_exports_its_new_samples() -> None:
    rec, sink = recorder()
    h = rec.histogram("raydex_block_seconds")
    h.record(1_000_000)
    h.record(1_000_000)
    rec.flush()
    h.reset()
    h.record(1_000_000)
    rec.flush()
    # its series restart from zero, as a restarted process's would (a counter reset to PromQL)
    assert sink.histogram("raydex_block_seconds").count == 1


def test_samples_at_a_bucket_boundary_stay_in_that_bucket() -> None:
    rec, sink = recorder()
    h = rec.histogram("raydex_block_size_txs")
    sizes = (1, 2, 2, 5, 5, 5, 3, 100, 200, 20_000)  # exact in the local histogram below 256
    for v in sizes:
        h.record(v)
    rec.flush()
    got = sink.histogram("raydex_block_size_txs")
    want = [0] * (len(COUNT_BUCKETS) + 1)
    for v in sizes:
        want[bisect.bisect_left(COUNT_BUCKETS, v)] += 1
    assert got.buckets == want
    assert got.sum == pytest.approx(sum(sizes), rel=0.01)


def test_every_sample_is_exported_however_many_arrive_between_flushes() -> None:
    """Counts are exact at any rate: no budget, no down-sampling (Ray's export gets the same
    totals; tests/integration/test_metrics_scrape.py scrapes them)."""
    rec, sink = recorder()
    fast = rec.histogram("raydex_dry_run_seconds")
    slow = rec.histogram("raydex_apply_seconds")
    for i in range(100_000):
        fast.record(25_000 + i % 7)  # ~25 us
    for _ in range(3_001):
        slow.record(2_000_000)  # 2 ms
    rec.flush()
    got = sink.histogram("raydex_dry_run_seconds")
    assert got.count == sum(got.buckets) == 100_000
    assert got.buckets[ray_bucket(25e-6)] == 100_000
    assert sink.histogram("raydex_apply_seconds").count == 3_001
    for _ in range(5):
        fast.record(20_000)
    rec.flush()
    rec.flush()  # the same totals again: nothing counted twice
    assert sink.histogram("raydex_dry_run_seconds").count == 100_005


def test_a_flush_sets_a_histograms_running_totals_so_a_lost_flush_loses_nothing() -> None:
    rec, sink = recorder()
    h = rec.histogram("raydex_dry_run_seconds")
    for i in range(100):
        h.record(20_000 + 1000 * (i % 3))
    rec.flush()
    first = sink.histogram("raydex_dry_run_seconds")
    assert first.count == 100
    assert first.sum == pytest.approx(sum(20_000 + 1000 * (i % 3) for i in range(100)) / 1e9, 0.01)
    sink.histograms.clear()  # as if the next flush's calls were lost on the way
    h.record(30_000)
    rec.flush()
    assert sink.histogram("raydex_dry_run_seconds").count == 101


def test_a_histogram_without_new_samples_is_exported_again_only_after_its_refresh_period() -> None:
    """Ray drops a gauge left unset for ~30 s: a quiet histogram is set again, but not at every
    flush."""
    for refresh_s, again in ((3600.0, False), (0.0, True)):
        sink = LocalSink()
        rec = Recorder("replica", "r0", sink=sink, hist_refresh_s=refresh_s)
        rec.histogram("raydex_apply_seconds").record(100_000)
        rec.flush()
        sink.histograms.clear()
        rec.flush()
        assert bool(sink.histograms) is again
        if again:
            assert sink.histogram("raydex_apply_seconds").count == 1


def test_a_histogram_without_samples_exports_nothing() -> None:
    rec, sink = recorder()
    rec.histogram("raydex_apply_seconds")
    rec.flush()
    assert not sink.histograms


def test_a_family_keeps_one_series_per_label_value() -> None:
    rec, sink = recorder()
    seq = rec.histogram_family("raydex_tx_lifecycle_seconds", "tx_type", stage="sequenced")
    seq.get("create_order").record(2_000_000)
    seq.get("create_order").record(2_000_000)
    seq.get("cancel_order").record(1_000_000)
    rec.flush()
    assert sink.histogram("raydex_tx_lifecycle_seconds", tx_type="create_order").count == 2
    assert sink.histogram("raydex_tx_lifecycle_seconds", tx_type="cancel_order").count == 1
    assert sink.histogram("raydex_tx_lifecycle_seconds", stage="sequenced").count == 3


def test_seconds_buckets_span_ten_microseconds_to_ten_seconds_finely() -> None:
    b = SECONDS_BUCKETS
    assert b[0] == pytest.approx(1e-5) and b[-1] == pytest.approx(10.0)
    assert all(hi / lo <= 1.67 for lo, hi in itertools.pairwise(b))


def test_every_catalog_name_follows_prometheus_conventions() -> None:
    units = ("_seconds", "_total", "_txs", "_blocks", "_messages", "_info", "_seq", "_connections")
    units += ("_epoch",)  # the sequencer's epoch (actors/sequencer/arbiter.py)
    # the monitor's gauges are a verdict, states and a count over a sliding minute: no unit, as
    # Prometheus's own ``up`` (cluster/control/monitor.py)
    unitless = {"raydex_health", "raydex_host_up", "raydex_actor_state",
                "raydex_actor_restarts_last_minute"}  # fmt: skip
    for name, d in CATALOG.items():
        assert name.startswith("raydex_") and (name.endswith(units) or name in unitless), name
        assert name not in unitless or d.kind == "gauge", name
        assert (d.kind == "counter") == name.endswith("_total"), name
        assert "account" not in d.tags


# ---- outside Ray ---------------------------------------------------------------------------------


def test_importing_metrics_does_not_import_ray() -> None:
    code = (
        "import sys, raydex.observability.metrics as m; "
        "assert 'ray' not in sys.modules; "
        "r = m.Recorder('replica', 'x'); r.count('raydex_cache_hits_total').n += 1; r.flush(); "
        "assert isinstance(r.sink, m.LocalSink) and 'ray' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_outside_a_connected_ray_the_default_sink_is_local() -> None:
    # A fresh interpreter: this test process may hold the integration tests' session Ray.
    code = (
        "from raydex.observability.metrics import LocalSink, default_sink; "
        "import sys; sys.exit(0 if isinstance(default_sink(), LocalSink) else 1)"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_the_flush_task_exports_periodically_and_once_more_when_stopped() -> None:
    rec, sink = recorder()
    hits = rec.count("raydex_cache_hits_total")

    async def run() -> None:
        rec.start(0.01)
        hits.n += 1
        for _ in range(200):
            if rec.flushes >= 2:
                break
            await asyncio.sleep(0.01)
        hits.n += 1
        await rec.stop()

    asyncio.run(run())
    assert rec.flushes >= 3
    assert sink.value("raydex_cache_hits_total") == 2


# ---- wired into the services ---------------------------------------------------------------------


def test_the_sequencer_service_registers_its_block_metrics(tmp_path: Path) -> None:
    svc = SequencerService(SequencerConfig(str(tmp_path / "wal"), str(tmp_path / "snap")))
    sink = LocalSink()
    svc.metrics._sink = sink
    svc.block_time.record(1_200_000)
    svc.block_txs.record(40)
    svc.blocks = 1
    svc.metrics.flush()
    assert sink.histogram("raydex_block_seconds", role="sequencer").count == 1
    assert sink.histogram("raydex_block_size_txs").sum == pytest.approx(40)
    assert sink.value("raydex_blocks_total") == 1
    assert sink.value("raydex_block_seq") == 0
    # which signature backend runs is exported and in status (never the pure one silently)
    assert sink.value("raydex_signing_info", backend="c", accelerated="true") == 1
    assert svc.status()["signatures"] == "c"


def test_rest_reads_count_cache_hits_and_remote_reads_count_fallbacks() -> None:
    trader = Trader(1)

    async def run() -> tuple[int, int, int]:
        ex = new_exchange([trader])
        replica = ex.serve()
        server = TestServer(replica.app, host="127.0.0.1", port=0)
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as http:
                for path in ("orderBooks", "orderBookOrders?market_id=0", "blocks"):
                    async with http.get(server.make_url(f"/api/v1/{path}")) as r:
                        assert r.status == 200
                tx = trader.order(price=300_000, size=10, is_ask=0)
                form = {"tx_type": str(tx_type_of(type(tx))), "tx_info": tx_to_json_str(tx)}
                async with http.post(server.make_url("/api/v1/sendTx"), data=form) as r:
                    assert (await r.json())["code"] == 200
        finally:
            await server.close()
        c = replica.counters
        return c.cache_hits, c.cache_fallbacks, c.dry_run.total

    hits, fallbacks, dry_runs = asyncio.run(asyncio.wait_for(run(), 30))
    assert (hits, fallbacks, dry_runs) == (2, 1, 1)


def test_an_actor_runtime_adds_gc_and_placement_series_and_starts_flushing() -> None:
    rec, sink = recorder()
    runtime = ActorRuntime()

    async def run() -> None:
        runtime.before_boot()
        runtime.after_boot(rec)
        gc.collect(0)
        await rec.stop()
        runtime.monitor.uninstall()

    asyncio.run(run())
    assert sink.value("raydex_placement_info", policy="unpinned", cpus="any") == 1
    assert sink.value("raydex_gc_collections_total", gen="0") >= 1
    assert sink.histogram("raydex_gc_pause_seconds", gen="0").count >= 1
    assert runtime.status()["metrics"] == {"flushes": rec.flushes}


def test_an_actor_says_where_its_live_figures_are_and_writes_them_to_its_log(
    capsys: pytest.CaptureFixture[str],
) -> None:
    runtime = ActorRuntime()
    seq = [7]
    facts = {"group": "api", "port": 8080, "seq": 7, "lag": 0, "hash": "ab12cd34@7"}
    recorded = runtime.describe("replica", facts, fixed=True)
    assert recorded.startswith("replica group=api port=8080 node=") and recorded.endswith(
        f" {LIVE_HINT}"
    )
    assert " seq=" not in recorded and " hash=" not in recorded  # Ray would show them frozen

    async def run() -> None:
        runtime.before_boot()
        runtime.after_boot(live=lambda: runtime.describe("replica", {"seq": seq[0]}))
        await asyncio.sleep(0)  # the live loop writes its first line at once
        seq[0] = 8
        runtime.monitor.uninstall()

    asyncio.run(run())
    (line,) = capsys.readouterr().out.splitlines()
    assert re.fullmatch(
        rf"{LIVE_LOG_PREFIX} \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ replica seq=7 node=\S+ "
        r"numa=any cpus=any policy=unpinned pages=4k",
        line,
    ), line


def test_a_live_line_whose_describe_fails_says_so_instead_of_raising() -> None:
    def broken() -> str:
        raise RuntimeError("half-booted")

    assert live_line(broken).endswith("(describe failed: RuntimeError('half-booted'))")


# ---- the Grafana dashboard -----------------------------------------------------------------------

DASHBOARD = Path(__file__).parents[2] / "observability" / "grafana_dashboard.json"


def test_the_grafana_dashboard_only_queries_metrics_of_the_catalog() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] if p["type"] != "row" for t in p["targets"]]
    assert exprs and all(p.get("targets") for p in dash["panels"] if p["type"] != "row")
    used = {
        re.sub(r"_(bucket|sum|count)$", "", m).removeprefix("ray_")
        for e in exprs
        for m in re.findall(r"ray_raydex_\w+", e)
    }
    assert used <= set(CATALOG)
    topics = ("book_publish_delay", "dry_run", "tx_lifecycle", "block_seconds", "apply")
    for topic in (*topics, "ws_connections", "gc_pause", "block_seq"):
        assert any(topic in name for name in used), topic


def test_every_counter_exists_at_zero_from_the_start_with_the_deployment_label() -> None:
    sink = LocalSink()
    rec = Recorder("replica", "r0", group="api", sink=sink, deployment="prod")
    rec.counter_fn("raydex_ws_conflations_total", lambda: 0)
    rec.count("raydex_ws_slow_disconnects_total")

    async def run() -> None:
        rec.start(3600.0)  # announces; the first flush would come an hour later
        rec.count("raydex_loop_restarts_total", loop="late")  # registered after the start
        await rec.stop()

    asyncio.run(run())
    names = {name for name, _ in sink.counters}
    assert names == {
        "raydex_ws_conflations_total",
        "raydex_ws_slow_disconnects_total",
        "raydex_loop_restarts_total",
    }
    assert all(dict(kv)["deployment"] == "prod" for _, kv in sink.counters)
    assert all(v == 0 for v in sink.counters.values())
