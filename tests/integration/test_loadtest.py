"""`raydex loadtest` brings up its own isolated stack on its own embedded Ray, drives open-loop
signed load, tears down, and leaves the three report forms in one folder; run as a user would, in
a child process (it owns its Ray)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_short_loadtest_writes_markdown_json_and_plots(tmp_path: Path) -> None:
    raydex = Path(sys.executable).with_name("raydex")
    out = tmp_path / "report"
    json_out = tmp_path / "loadtest.json"
    proc = subprocess.run(
        [str(raydex), "loadtest", "--seconds", "5", "--tps", "100", "--accounts", "40",
         "--replicas", "1", "--clients", "2", "--out", str(out), "--json-out", str(json_out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "RAY_DEDUP_LOGS": "0"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "achieved" in proc.stdout or "# raydex loadtest report" in proc.stdout
    assert "tx/s" in proc.stderr  # the progress lines
    report = json.loads(json_out.read_text())
    assert json.loads((out / "report.json").read_text())["achieved_tps"] == report["achieved_tps"]
    assert (out / "report.md").read_text().startswith("# raydex loadtest report")
    for png in ("latency_over_time.png", "cdf.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert report["achieved_tps"] > 0
    assert isinstance(report["errors_by_code"], dict)
    for key in ("freshness_engine_to_client_us", "apply_us", "dry_run_us"):
        assert {"p50", "p99", "p999"} <= set(report[key]), key
        assert report[key]["count"] > 0, key
    assert {"CREATE_ORDER", "CANCEL_ORDER"} <= set(report["lifecycle_us"])
    assert report["gc"] and set(report["groups"]) == {"main"}
    assert set(report["apply_steps_us"]) == {"decode", "cache_update", "fanout"}
    # the same applies on the thread's CPU clock, measured inside their wall interval
    cpu, wall = report["apply_cpu_us"], report["apply_us"]
    assert cpu["count"] == wall["count"] and cpu["max"] <= wall["max"]
    assert report["nonce_gaps"] == 0 and report["replica_state_hashes_equal"] is True
    # which of the apply's C paths ran (make builds them all here)
    (native,) = report["native"].values()
    assert native == {"block_decode": True, "cache_loop": True, "book_json": True}
    assert (
        "applied with: block_decode C, book_json C, cache_loop C."
        in (out / "report.md").read_text()
    )
    # each replica's ledger against its budget, in the JSON and the markdown
    (name, ledger), *_ = report["replica_ledgers"].items()
    assert 0 < ledger["entries"] <= ledger["max_entries"] == 500_000 and ledger["dropped"] == 0
    assert f"Replica `{name}`'s per-account ledger at the end" in (out / "report.md").read_text()
    # each process's memory per third of the window
    assert len(report["memory_mib"]["replica main-0"]["growth_by_third_mib"]) == 3
    assert set(report["requests_by_path"]) == {"rest", "rest_batch", "ws"}
    # the committer once the window ended: it reached the sequencer's seq, every block audited
    com = report["committer"]
    assert com["caught_up_s"] is not None and com["sequencer_seq"] > 0
    assert com["audit_audited_blocks"] > 0 and com["audit_skipped_blocks"] == 0
    assert com["audit_failed_txs"] == 0 and com["resyncs"] == 0
    assert "## Committer" in (out / "report.md").read_text()
    # OTel spans of sampled txs, from the client and from the replica that served them
    spans = [
        json.loads(line) for p in out.glob("spans-*.jsonl") for line in p.read_text().splitlines()
    ]
    names = {s["name"] for s in spans}
    assert {"client.send", "replica.sendTx"} <= names or {
        "client.send",
        "replica.sendTxBatch",
    } <= names
    assert "replica.dry_run" in names  # the replica's steps under the traced request
    # the CPU ledger: table, stacked bars, per-role µs per committed tx adding up to the total
    led = report["cpu_ledger"]
    assert led["committed_txs"] == report["committed_txs"] > 0
    per = report["cpu_us_per_tx"]
    assert {"sequencer", "snapshot holder", "committer", "replica main-0", "loadgen"} <= set(per)
    assert sum(v for k, v in per.items() if k != "total") == pytest.approx(per["total"], abs=2)
    assert all(led["by_role"][r]["pids"] for r in ("sequencer", "replica main-0", "loadgen"))
    assert "## CPU ledger" in (out / "report.md").read_text()
    assert (out / "cpu_ledger.png").read_bytes()[:4] == b"\x89PNG"
    causes = report["errors_by_cause"]
    for code, n in report["errors_by_code"].items():  # every error is a cause or a follow-on
        assert causes["root"].get(code, 0) + causes["follow_on"].get(code, 0) == n
    assert "Traceback" not in proc.stderr
