"""``make demo``: the whole exchange on an embedded local Ray under a 20-second loadtest, reported.

::

    raydex demo ─► observability.loadtest.run(...)   (isolated namespace, free ports, own Ray)
        plan + sign ─► deploy (sequencer, snapshot holder, committer, N instrumented replicas)
        ─► open-loop REST / REST batch / WS load + order_book watchers ─► report folder
        ─► teardown (also on Ctrl-C)

The demo is a loadtest with demo-sized defaults (``DEMO_TPS`` planned tx/s, ``--traders``
accounts); its summary adds what a first-time user checks: txs accepted, rejections by code,
freshness, block time, apply time per replica group, whether every replica ended on the same
state hash, and the CPU ledger (µs of CPU per committed tx, by role). The full Markdown/JSON/PNG
report is in the printed folder.
"""

from __future__ import annotations

import json
from typing import Any

from .ledger import format_ledger
from .run import LoadtestOptions
from .run import run as run_loadtest

#: planned tx/s of the demo: near what the stack sustains end to end on a 2-core machine today
DEMO_TPS = 300.0


def run(
    spec_path: str = "raydex.yaml", seconds: float = 20.0, traders: int = 24, replicas: int = 2,
    json_out: bool = False, tps: float = DEMO_TPS, out_dir: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Run the demo loadtest; print its summary (or one JSON object); return the summary."""
    report = run_loadtest(
        LoadtestOptions(
            tps=tps, seconds=seconds, accounts=max(traders, 6), replicas=replicas, clients=4,
            spec_path=spec_path, out_dir=out_dir, quiet=json_out,
        )
    )  # fmt: skip
    summary = demo_summary(report)
    print(json.dumps(summary, default=str) if json_out else format_report(summary))
    return summary


def demo_summary(r: dict[str, Any]) -> dict[str, Any]:
    """The demo's view of a loadtest report."""
    return {
        "boot_s": r["run"]["boot_s"],
        "seconds": r["run"]["elapsed_s"],
        "txs_sent": r["sent"],
        "accepted": r["accepted"],
        "rejected_by_code": {**r["errors_by_code"], **r["intended_rejections_by_code"]},
        "achieved_tps": r["achieved_tps"],
        "requests_by_path": r["requests_by_path"],
        "request_latency_us": r["request_latency_us"],
        "updates": r["updates"],
        "nonce_gaps": r["nonce_gaps"],
        "freshness_engine_to_client_us": r["freshness_engine_to_client_us"],
        "freshness_replica_to_client_us": r["freshness_replica_to_client_us"],
        "block_time_us": r["block_time_us"],
        "block_txs": r["block_txs"],
        "apply_us": r["apply_us"],
        "dry_run_us": r["dry_run_us"],
        "sequencer_seq": r["sequencer_seq"],
        "replica_state_hashes_equal": r["replica_state_hashes_equal"],
        "replicas": r["replicas"],
        "cpu_us_per_tx": r.get("cpu_us_per_tx", {}),
        "cpu_ledger": r.get("cpu_ledger", {}),
        "report_dir": r["run"]["out_dir"],
    }


def format_report(r: dict[str, Any]) -> str:
    def pct(h: dict[str, Any]) -> str:
        return (
            f"p50 {h.get('p50', 0):,.0f} µs  p99 {h.get('p99', 0):,.0f} µs  (n={h.get('count', 0)})"
        )

    lines = [
        "raydex demo: embedded Ray, sequencer + snapshot holder + committer + "
        f"{len(r['replicas'])} API replicas (boot {r['boot_s']} s)",
        f"  txs sent       {r['txs_sent']:>8,} in {r['seconds']} s = {r['achieved_tps']:,} tx/s "
        f"(REST, REST batch, WS: {r['requests_by_path']})",
        f"  accepted       {r['accepted']:>8,}",
        f"  rejected       {sum(r['rejected_by_code'].values()):>8,}  {r['rejected_by_code']}",
        f"  latency from planned send  {pct(r['request_latency_us'])}",
        f"  freshness engine→client    {pct(r['freshness_engine_to_client_us'])}",
        f"  freshness replica→client   {pct(r['freshness_replica_to_client_us'])}",
        f"  order_book updates {r['updates']:,}, nonce gaps {r['nonce_gaps']}",
        f"  block time     {pct(r['block_time_us'])}",
        f"  txs per block  p50 {r['block_txs'].get('p50', 0)}  p99 {r['block_txs'].get('p99', 0)}",
        f"  apply/block    {pct(r['apply_us'])}",
        f"  dry-run        {pct(r['dry_run_us'])}",
        f"  final seq {r['sequencer_seq']}; replicas agree on the state hash: "
        f"{r['replica_state_hashes_equal']}",
    ]
    led = r.get("cpu_ledger") or {}
    if led:
        lines += [
            f"  CPU ledger: µs of CPU per committed tx over the {led['window_s']:.0f} s window "
            f"({led['committed_txs']:,} txs; machine {led['machine_busy_pct']}% busy):",
            *(f"    {line}" for line in format_ledger(led)),
            "    (unattributed: CPU no live process accounts for; other processes: not the "
            "deployment; hypervisor steal and irq + softirq: the last lines, in the rows or in "
            "unattributed)",
        ]
    lines.append(
        f"  full report (Markdown, JSON, plots, CPU ledger, flight recorder dumps): "
        f"{r['report_dir']}"
    )
    return "\n".join(lines)
