"""The loadtest report: histogram merging, percent differences, the JSON keys, Markdown and plots,
built from recorded values (no Ray)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from raydex.observability.hist import Histogram
from raydex.observability.loadtest.loadgen import BookWatch, Recorder
from raydex.observability.loadtest.report import (
    GroupData,
    build_report,
    committer_line,
    hist_from,
    overload_lines,
    overload_report,
    pct_diff,
    render_markdown,
    span_breakdown,
    write_report,
)

MS = 1_000_000


def _hist(values: list[int]) -> Histogram:
    h = Histogram()
    h.record_many(values)
    return h


def _book(kind: str, begin: int, nonce: int) -> dict[str, Any]:
    return {
        "type": f"{kind}/order_book",
        "channel": "order_book:0",
        "order_book": {"begin_nonce": begin, "nonce": nonce},
    }


def _group(name: str, latency_ms: int, apply_us: int, codes: tuple[int, ...]) -> GroupData:
    rec = Recorder(name)
    t0 = 0
    for i, code in enumerate(codes):
        planned = t0 + i * 10 * MS
        rec.sent_at(planned, planned, 1)
        rec.finished(planned, planned + latency_ms * MS, t0, ("CREATE_ORDER",), (code,))
    books = BookWatch()
    last: dict[str, int] = {}
    books.on_message(_book("subscribed", 0, 0), 0, 0, last)
    for n in range(1, 11):
        msg = _book("update", n - 1, n)
        msg.update(engine_ts_us=1_000_000 - latency_ms * 1000, replica_ts_us=1_000_000 - 500)
        books.on_message(msg, 1_000_000, 0, last)
    replica = {
        "hists": {
            "apply": _hist([apply_us * 1000] * 10).snapshot(),
            "decode": _hist([apply_us * 200] * 10).snapshot(),
            "cache_update": _hist([apply_us * 500] * 10).snapshot(),
            "fanout": _hist([apply_us * 300] * 10).snapshot(),
            "dry_run": _hist([50_000] * 10).snapshot(),
        },
        "gc": {
            "gen0": {"collections": 3},
            "gen1": {"collections": 1},
            "gen2": {"collections": 0},
            "pause_hist": _hist([100_000] * 4).snapshot(),
        },
        "slow_events": 0,
        "flight_dumps": [],
    }
    return GroupData(name, "pin:on", rec, books, {f"raydex-replica-{name}-0": replica}, 1.0)


def test_histogram_snapshots_merge_even_after_a_json_round_trip() -> None:
    a, b = _hist([1000] * 99), _hist([5_000_000])
    snaps = [json.loads(json.dumps(a.snapshot())), b.snapshot()]
    merged = hist_from(snaps)
    assert merged.total == 100
    assert merged.percentile(0.5) == pytest.approx(1000, rel=0.01)
    assert merged.percentile(1.0) == pytest.approx(5_000_000, rel=0.01)


def test_percent_difference_is_b_relative_to_a() -> None:
    assert pct_diff(200.0, 150.0) == -25.0
    assert pct_diff(100.0, 110.0) == 10.0
    assert pct_diff(0.0, 5.0) is None


def test_the_json_report_has_the_promised_keys_per_group_and_the_ab_difference() -> None:
    a = _group("pinned", latency_ms=2, apply_us=100, codes=(200,) * 99 + (21104,))
    b = _group("unpinned", latency_ms=3, apply_us=150, codes=(200,) * 100)
    sync = _hist([120_000] * 9 + [300_000]).summary_us()
    wal = {"sync_us": sync, "handoff_us": sync, "segments_preallocated": 1,
           "segments_appended": 0}  # fmt: skip
    r = build_report(
        [a, b], {"tps": 100, "seconds": 1}, {"block_time_us": {"p99": 900.0}, "wal": wal}
    )
    assert r["wal_sync_us"] == sync and r["wal_segments"] == {"preallocated": 1, "appended": 0}
    assert r["wal_handoff_us"] == sync
    assert "WAL sync per block p50/p99/p99.9 µs: 120 / 300 / 300; segments started 1 " \
        "preallocated, 0 appended" in render_markdown(r)  # fmt: skip
    for key in ("freshness_engine_to_client_us", "apply_us", "dry_run_us"):
        assert {"p50", "p99", "p999"} <= set(r[key])
    assert r["achieved_tps"] == 200.0
    assert r["errors_by_code"] == {"INVALID_NONCE": 1}
    assert r["error_rate_pct"] == 0.5
    assert set(r["lifecycle_us"]) == {"CREATE_ORDER"}
    assert set(r["groups"]) == {"pinned", "unpinned"}
    assert r["groups"]["pinned"]["apply_us"]["p99"] == pytest.approx(100, rel=0.01)
    assert r["ab_diff_pct"]["apply_us.p99"] == pytest.approx(50.0, abs=1.0)
    assert r["ab_diff_pct"]["request_latency_us.p99"] == pytest.approx(50.0, abs=1.0)
    assert r["gc_collections"] == 8 and r["groups"]["pinned"]["gc_collections"] == 4
    assert "gc" in r and r["nonce_gaps"] == 0 and r["updates"] == 20
    met = {t["metric"]: t["met"] for t in r["targets"]}
    assert met["achieved_tps"] is False and met["apply_us.p99"] is True
    assert met["nonce_gaps"] is True


def test_a_cluster_runs_report_has_a_row_per_host_and_a_local_one_none() -> None:
    report = build_report([_group("a", 2, 100, (200,) * 5)], {"tps": 1, "seconds": 1}, {})
    assert "## Per host" not in render_markdown(report)
    row = {"endpoints": ["10.0.0.3:8080"], "lanes": 4, "txs": 120, "accepted": 118,
           "accepted_per_s": 39.3, "p50_us": 900.0, "p99_us": 4100.0,
           "errors": {"INVALID_NONCE": 2}}  # fmt: skip
    md = render_markdown({**report, "hosts": {"host-b": row}})
    assert "## Per host" in md
    line = "| host-b | 10.0.0.3:8080 | 4 | 120 | 118 | 39.3 | 900.0 / 4100.0 | INVALID_NONCE 2 |"
    assert line in md


def test_a_broken_begin_nonce_chain_counts_a_gap() -> None:
    books = BookWatch()
    last: dict[str, int] = {}
    books.on_message(_book("subscribed", 0, 0), 0, 0, last)
    for begin, nonce in ((0, 1), (1, 2), (5, 6)):
        books.on_message(_book("update", begin, nonce), 0, 0, last)
    assert (books.updates, books.gaps) == (3, 1)


def test_markdown_json_and_plots_land_in_one_folder(tmp_path: Path) -> None:
    a = _group("a", 2, 100, (200,) * 50)
    b = _group("b", 4, 300, (200,) * 50)
    r = build_report([a, b], {"tps": 100, "seconds": 1, "cpus": 2}, {})
    paths = write_report([a, b], r, tmp_path / "out", tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["achieved_tps"] == r["achieved_tps"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Targets" in md and "| apply per block |" in md and "ab.png" in md
    for name in ("latency_over_time", "cdf", "ab"):
        png = paths[name]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert render_markdown(r).count("**no**") >= 1


def test_thecommitter_line_says_how_far_behind_it_was_and_whether_it_caught_up() -> None:
    behind = {"sequencer_seq": 900, "behind_blocks": 0, "audit_behind_blocks": 400,
              "caught_up_s": 1.5, "resyncs": 0, "audit_skipped_blocks": 0}  # fmt: skip
    line = committer_line(behind)
    assert "0 blocks behind the sequencer (seq 900)" in line
    assert "audit 400 behind, 0 blocks skipped" in line and "caught up 1.5 s after" in line
    assert "NOT caught up" in committer_line({**behind, "caught_up_s": None})
    assert committer_line({}) == "- not measured"
    report = build_report([_group("a", 2, 100, (200,) * 5)], {"tps": 1, "seconds": 1}, {})
    assert "## Committer" in render_markdown({**report, "committer": behind})


def _span(name: str, trace: str, start_us: int, end_us: int) -> str:
    def iso(us: int) -> str:
        return f"2026-12-02T15:00:{us // 1_000_000:02d}.{us % 1_000_000:06d}Z"

    return json.dumps({"name": name, "context": {"trace_id": trace},
                       "start_time": iso(start_us), "end_time": iso(end_us)})  # fmt: skip


def test_the_span_breakdown_splits_a_traced_tx_into_its_stages(tmp_path: Path) -> None:
    client = tmp_path / "spans-loadgen.jsonl"
    replica = tmp_path / "spans-raydex-replica-a-0.jsonl"
    client.write_text(_span("client.send", "t1", 0, 10_000) + "\n")
    replica.write_text("\n".join([
        _span("replica.sendTx", "t1", 1_000, 9_000),
        _span("replica.dry_run", "t1", 1_100, 1_300),
        _span("replica.submit", "t1", 1_400, 8_900),
        _span("replica.dry_run", "orphan", 0, 5),
    ]) + "\n")  # fmt: skip
    b = span_breakdown([client, replica])
    assert b["client_to_replica"]["p50"] == 1_000
    assert b["dry_run"]["p50"] == 200
    assert b["sequencer_and_apply"]["p50"] == 7_500
    assert b["replica_handler"]["p50"] == 8_000
    assert b["replica_to_client"]["p50"] == 1_000
    assert b["client_total"]["count"] == 1 and b["client_total"]["p50"] == 10_000


def test_latency_drift_compares_the_windows_first_and_last_span() -> None:
    from raydex.observability.loadtest.report import latency_drift

    # 10 minutes: spans of 60 s; latency doubles over the run
    seconds = [_hist([1_000_000 + 1_000 * s] * 10) for s in range(600)]
    d = latency_drift(seconds)
    assert d["span_s"] == 60
    assert d["first"]["count"] == d["last"]["count"] == 600
    assert 1.5 <= d["p50_ratio"] <= 1.7 and 1.5 <= d["p99_ratio"] <= 1.7
    # a short run: thirds; flat latency: ratio 1
    flat = latency_drift([_hist([2_000_000] * 5) for _ in range(30)])
    assert flat["span_s"] == 10 and flat["p50_ratio"] == 1.0
    # nothing answered at the end: no ratio rather than a made-up one
    assert latency_drift([_hist([1_000])] * 10 + [Histogram()] * 20)["p99_ratio"] is None


def test_an_impolite_run_is_read_against_the_four_overload_goals() -> None:
    """Capacity given or, absent, half the offered rate; a refusal is a tx without an outcome
    from the sequencer: those the workload provokes and those never answered are counted apart,
    every other one must be a 23000 with Retry-After."""
    good = {
        "goodput_tps": 4_600.0,
        "admitted_latency_us": {"p50": 9_000.0, "p99": 420_000.0},
        "refusals_by_code": {
            "RATE_LIMITED": {"count": 5_000, "with_retry_after": 5_000},
            "NOT_ACTIVE_LIMIT_ORDER": {"count": 3, "with_retry_after": 0},
        },
        "errors_by_code": {"RATE_LIMITED": 5_000},
        "connections_opened": 40,
    }
    o = overload_report(good, {"tps": 10_000, "capacity": None})
    assert (o["capacity_tps"], o["capacity_from"]) == (5_000, "assumed: half the offered rate")
    assert o["goodput_share_of_capacity"] == 0.92 and o["admitted_latency_ms"]["p99"] == 420.0
    assert [t["met"] for t in o["targets"]] == [True, True, True, True]
    bad = {
        **good,
        "refusals_by_code": {
            "RATE_LIMITED": {"count": 5_000, "with_retry_after": 4_990},
            "INVALID_NONCE": {"count": 7, "with_retry_after": 0},
            "NO_REPLY": {"count": 2, "with_retry_after": 0},
        },
        "errors_by_code": {"RATE_LIMITED": 5_000, "INVALID_NONCE": 7, "NO_REPLY": 2},
    }
    o = overload_report(bad, {"tps": 10_000, "capacity": 6_000})
    assert o["capacity_from"] == "--capacity" and o["goodput_share_of_capacity"] == 0.767
    assert (o["refusals"], o["refusals_not_23000_with_retry_after"], o["unanswered_txs"]) == (
        5_007, 17, 2)  # fmt: skip
    assert [t["met"] for t in o["targets"]] == [False, True, False, False]
    text = "\n".join(overload_lines(o))
    row = "| every refusal a 23000 with Retry-After | 0 others | 17 of 5,007 refusals | **no** |"
    assert row in text
    assert "| INVALID_NONCE | 7 | 0 |" in text
