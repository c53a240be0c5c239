"""`raydex demo` runs the whole stack on its own embedded Ray, drives signed load through REST and
WebSocket, and reports; run as a user would, in a child process (it owns its Ray)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_demo_trades_through_rest_and_websocket_and_every_replica_agrees() -> None:
    raydex = Path(sys.executable).with_name("raydex")
    proc = subprocess.run(
        [str(raydex), "demo", "--seconds", "3", "--traders", "6", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "RAY_DEDUP_LOGS": "0"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["accepted"] > 0
    assert set(report["requests_by_path"]) == {"rest", "rest_batch", "ws"}
    assert report["updates"] > 0 and report["nonce_gaps"] == 0
    assert report["freshness_engine_to_client_us"]["count"] > 0
    assert report["replica_state_hashes_equal"] is True
    assert len(report["replicas"]) == 2
    # the CPU ledger: every deployment role, the generator and Ray, adding up to the total
    ledger = report["cpu_us_per_tx"]
    assert {"sequencer", "snapshot holder", "committer", "loadgen", "unattributed"} <= set(ledger)
    assert sum(1 for role in ledger if role.startswith("replica ")) == 2
    assert any(role.startswith("ray ") for role in ledger)
    parts = sum(v for k, v in ledger.items() if k != "total")
    assert abs(parts - ledger["total"]) <= 0.1 * len(ledger)
