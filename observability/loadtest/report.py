"""The loadtest's report: one JSON document, its Markdown rendering and PNG plots, in one folder.

Inputs are what a run measured (``GroupData`` per replica group: the client's ``Recorder`` and
``BookWatch``, the replicas' histogram snapshots) plus run facts; ``build_report`` turns them into
plain data. JSON keys (the contract ``--json-out`` promises):

- ``achieved_tps`` (answered), ``goodput_tps`` (sequenced: past the overload door and the
  dry-run), ``errors_by_code`` (name -> count, excluding what the workload provokes on
  purpose, which is under ``intended_rejections_by_code``), ``error_rate``;
- ``freshness_engine_to_client_us``, ``freshness_replica_to_client_us``, ``apply_us``,
  ``dry_run_us``, ``request_latency_us``, ``admitted_latency_us`` (the sequenced txs'): each
  ``{count, p50, p90, p99, p999, max}`` in µs;
- ``apply_steps_us``: ``{decode, cache_update, fanout}`` of the same shape; ``apply_cpu_us``:
  the apply on the replica thread's CPU clock (``apply_us`` less the time the thread waited off
  the CPU while the kernel ran another process on its core);
- ``lifecycle_us``: per tx type name, planned-send -> confirmed (the reply follows the block);
- ``gc``: per replica, collections and pause percentiles per generation;
- ``latency_drift``: per group, the answered txs' latency in the window's first and last span
  (a minute each when the window is >= 3 minutes, else a third of it) and the last/first ratio
  of p50 and p99 (a soak's "no drift"); ``memory_mib``: each deployment process's resident
  memory over the window (start, end, peak, growth; a soak's "RSS flat");
- ``wal_sync_us``: the sequencer's WAL sync per block, ``wal_handoff_us``: from that sync's
  return to the sequencer's loop publishing (same shape); ``wal_segments``: the
  segments its process started, ``{preallocated, appended}`` (``sequencer.wal_preallocate``);
- ``committer``: when the window ended, how many blocks the commitments (``behind_blocks``)
  and the signature audit (``audit_behind_blocks``) were behind the sequencer's seq, the
  seconds until both reached it (``caught_up_s``, None: not within a minute), its rebuilds from
  a snapshot and the audit's counters (``audit_skipped_blocks``: passed unaudited);
- ``hosts`` (``--address`` runs): per host label, the replica endpoints its lanes talked to,
  ``lanes``, ``txs`` answered, ``accepted`` and ``accepted_per_s``, ``p50_us``/``p99_us``, and
  the non-200 answers (``errors``); empty on the embedded local Ray;
- ``groups``: the same keys per replica group, and ``ab_diff_pct`` (B relative to A, in %) for
  A/B runs; ``targets``: each goal (docs/performance.md), the measured value and whether it is met;
- ``refusals_by_code``: txs answered without an outcome from the sequencer, by code name, each
  ``{count, with_retry_after}`` (the header is read by impolite lanes only);
- ``overload`` (``--impolite`` runs): the capacity the run is read against, goodput and its share
  of it, the admitted txs' latency from their planned send, the refusals by code, the txs without
  an answer, and the issue's four overload goals as ``targets`` rows (``OVERLOAD_TARGETS``).

Percentiles come from merged HDR-style histograms (observability/hist.py), never from averaging
percentiles. ``pct_diff(a, b)`` is ``(b - a) / a * 100`` (None when ``a`` is 0).

Cost: building is milliseconds; the plots about a second (matplotlib, Agg backend, no display).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..hist import Histogram
from .ledger import format_ledger
from .loadgen import INTENDED_CODES, BookWatch, Recorder, code_name

__all__ = [
    "OVERLOAD_ADMITTED_P99_MS",
    "OVERLOAD_GOODPUT_SHARE",
    "TARGETS",
    "GroupData",
    "build_report",
    "draw_ledger",
    "hist_from",
    "latency_drift",
    "overload_lines",
    "overload_report",
    "pct_diff",
    "render_markdown",
    "write_ledger_plot",
    "write_plots",
    "write_report",
]

#: (key path, comparison, target, label): the goals for this machine (docs/performance.md).
TARGETS: tuple[tuple[str, str, float, str], ...] = (
    ("achieved_tps", ">=", 5000.0, "sustained signed TPS end to end"),
    ("error_rate_pct", "<", 0.1, "errors not caused by the workload (%)"),
    ("apply_us.p99", "<=", 250.0, "hot-path apply per block p99 (µs)"),
    ("freshness_engine_to_client_us.p99", "<=", 10_000.0, "freshness engine→client p99 (µs)"),
    ("dry_run_us.p99", "<=", 1000.0, "dry-run p99 (µs)"),
    ("nonce_gaps", "<=", 0.0, "gaps in the begin_nonce chain"),
)

STEPS = ("decode", "cache_update", "fanout")

#: The overload goals of an impolite run at twice the capacity (issue 38): goodput share of the
#: capacity, admitted txs' latency p99 (ms), refusals that are not 23000 with Retry-After, txs
#: without an answer.
OVERLOAD_GOODPUT_SHARE = 0.90
OVERLOAD_ADMITTED_P99_MS = 500.0
#: what a client gets when no answer came: recorded under these code names (loadgen.py)
UNANSWERED = ("NO_REPLY", "CLIENT_ERROR")


def hist_from(snapshots: Sequence[Mapping[Any, int]]) -> Histogram:
    """Merge histogram snapshots (bucket -> count; keys may be strings after JSON/Ray)."""
    h = Histogram()
    for snap in snapshots:
        fixed = {int(k): int(v) for k, v in snap.items()}
        h.merge(fixed)
        if fixed:
            h.max = max(h.max, max(fixed))
    return h


def pct_diff(a: float, b: float) -> float | None:
    """B relative to A in percent; None when A is 0."""
    if not a:
        return None
    return round((b - a) / a * 100.0, 1)


@dataclasses.dataclass
class GroupData:
    """One replica group's raw measurements."""

    name: str
    settings: str
    recorder: Recorder
    books: BookWatch
    #: per replica: its ``loadtest_stats()`` (histogram snapshots, gc, flight dumps)
    replicas: dict[str, dict[str, Any]]
    elapsed_s: float

    def hist(self, key: str) -> Histogram:
        return hist_from([r.get("hists", {}).get(key, {}) for r in self.replicas.values()])


def _group_report(g: GroupData) -> dict[str, Any]:
    rec = g.recorder
    real = rec.errors(intended=False)
    n_real = sum(real.values())
    return {
        "settings": g.settings,
        "sent": rec.sent,
        "answered": rec.done,
        "accepted": rec.codes.get(200, 0),
        "achieved_tps": round(rec.done / g.elapsed_s, 1) if g.elapsed_s else 0.0,
        "goodput_tps": round(rec.committed / g.elapsed_s, 1) if g.elapsed_s else 0.0,
        "errors_by_code": real,
        "intended_rejections_by_code": rec.errors(intended=True),
        "errors_by_cause": rec.errors_by_cause(),
        "committed_txs": rec.committed,
        "nonce_resyncs": rec.resyncs,
        "invalid_nonce_at_engine": rec.nonce_at_engine,
        "resigned_txs": rec.resigned,
        "error_rate_pct": round(100.0 * n_real / rec.done, 3) if rec.done else 0.0,
        "requests_by_path": dict(rec.by_path),
        "refusals_by_code": {
            code_name(c): {"count": n, "with_retry_after": rec.refusals_retry_after.get(c, 0)}
            for c, n in sorted(rec.refusals.items())
        },
        "connections_opened": rec.connections,
        "connection_waits": rec.connection_waits,
        "request_latency_us": rec.latency.summary_us(),
        "admitted_latency_us": rec.admitted.summary_us(),
        "send_lag_us": rec.send_lag.summary_us(),
        "lifecycle_us": {k: h.summary_us() for k, h in sorted(rec.by_type.items())},
        **g.books.summary(),
        "apply_us": g.hist("apply").summary_us(),
        "apply_cpu_us": g.hist("apply_cpu").summary_us(),
        "apply_steps_us": {s: g.hist(s).summary_us() for s in STEPS},
        "dry_run_us": g.hist("dry_run").summary_us(),
        "gc": {name: r.get("gc", {}) for name, r in g.replicas.items()},
        "native": {name: r.get("native", {}) for name, r in g.replicas.items()},
        "heap": {name: r.get("heap") for name, r in g.replicas.items()},
        "flight_dumps": [d for r in g.replicas.values() for d in r.get("flight_dumps", [])],
        "slow_events": sum(int(r.get("slow_events", 0)) for r in g.replicas.values()),
        # every replica applies every block: the group saw the most any of its replicas saw
        "liquidations": max(
            (int(r.get("liquidations", 0)) for r in g.replicas.values()), default=0
        ),
        "replicas": sorted(g.replicas),
    }


def _merged(groups: Sequence[GroupData]) -> dict[str, Any]:
    rec = Recorder("all")
    books = BookWatch()
    for g in groups:
        r = g.recorder
        rec.latency.merge(r.latency)
        rec.admitted.merge(r.admitted)
        rec.send_lag.merge(r.send_lag)
        for k, h in r.by_type.items():
            rec.by_type.setdefault(k, Histogram()).merge(h)
        rec.codes.update(r.codes)
        rec.follow_on.update(r.follow_on)
        rec.by_path.update(r.by_path)
        rec.sent += r.sent
        rec.done += r.done
        rec.committed += r.committed
        rec.resyncs += r.resyncs
        rec.resigned += r.resigned
        rec.nonce_at_engine += r.nonce_at_engine
        rec.refusals.update(r.refusals)
        rec.refusals_retry_after.update(r.refusals_retry_after)
        rec.connections += r.connections
        rec.connection_waits += r.connection_waits
        books.engine.merge(g.books.engine)
        books.replica.merge(g.books.replica)
        books.updates += g.books.updates
        books.gaps += g.books.gaps
    reps = {k: v for g in groups for k, v in g.replicas.items()}
    elapsed = max((g.elapsed_s for g in groups), default=0.0)
    return _group_report(GroupData("all", "", rec, books, reps, elapsed))


def _get(d: Mapping[str, Any], path: str) -> Any:
    cur: Any = d
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


#: metrics compared between A/B groups (key path, lower is better?)
AB_METRICS: tuple[tuple[str, bool], ...] = (
    ("achieved_tps", False),
    ("request_latency_us.p50", True),
    ("request_latency_us.p99", True),
    ("freshness_engine_to_client_us.p50", True),
    ("freshness_engine_to_client_us.p99", True),
    ("freshness_replica_to_client_us.p99", True),
    ("apply_us.p50", True),
    ("apply_us.p99", True),
    ("dry_run_us.p99", True),
    ("gc_collections", True),
    ("gc_pause_us.p99", True),
)


def _gc_totals(rep: dict[str, Any]) -> tuple[int, dict[str, float]]:
    total = 0
    snaps = []
    for g in rep.get("gc", {}).values():
        for gen in ("gen0", "gen1", "gen2"):
            total += int(g.get(gen, {}).get("collections", 0))
        snaps.append(g.get("pause_hist", {}))
    return total, hist_from(snaps).summary_us()


def _segments(seg: Mapping[str, int]) -> str:
    """``1 preallocated, 0 appended``: the WAL segments the sequencer started in the run's
    process (``sequencer.wal_preallocate``; an appended one where no prepared one was ready)."""
    return f"{seg.get('preallocated', 0)} preallocated, {seg.get('appended', 0)} appended"


def committer_line(c: Mapping[str, Any]) -> str:
    """The committer when the window ended (``committer`` in report.json): behind by how much,
    and how long it took to catch up once the load stopped."""
    if not c:
        return "- not measured"
    caught = c.get("caught_up_s")
    took = f"caught up {caught} s after the window" if caught is not None else "NOT caught up"
    audit = ""
    if c.get("audit_behind_blocks") is not None:
        audit = (f"; its signature audit {c['audit_behind_blocks']} behind, "
                 f"{c.get('audit_skipped_blocks', 0)} blocks skipped unaudited")  # fmt: skip
    return (f"- at the window's end the commitments were {c.get('behind_blocks')} blocks behind "
            f"the sequencer (seq {c.get('sequencer_seq')}){audit}; {took}; "
            f"{c.get('resyncs', 0)} rebuilds from a snapshot")  # fmt: skip


def build_report(
    groups: Sequence[GroupData], run: Mapping[str, Any], sequencer: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON report (see the module docstring for its keys)."""
    report: dict[str, Any] = {"run": dict(run)}
    report.update(_merged(groups))
    report["block_time_us"] = sequencer.get("block_time_us", {})
    report["block_txs"] = sequencer.get("block_txs", {})
    wal = sequencer.get("wal") or {}
    report["wal_sync_us"] = wal.get("sync_us", {})
    report["wal_handoff_us"] = wal.get("handoff_us", {})
    report["wal_segments"] = {k: wal.get(f"segments_{k}", 0) for k in ("preallocated", "appended")}
    report["sequencer_seq"] = sequencer.get("seq")
    per = {g.name: _group_report(g) for g in groups}
    for rep in per.values():
        rep["gc_collections"], rep["gc_pause_us"] = _gc_totals(rep)
    report["gc_collections"], report["gc_pause_us"] = _gc_totals(report)
    report["groups"] = per
    if len(groups) == 2:
        a, b = per[groups[0].name], per[groups[1].name]
        report["ab_diff_pct"] = {
            path: pct_diff(float(_get(a, path) or 0), float(_get(b, path) or 0))
            for path, _ in AB_METRICS
        }
        report["ab"] = {"a": groups[0].name, "b": groups[1].name}
    report["targets"] = [
        {
            "metric": path,
            "label": label,
            "target": f"{op} {target:g}",
            "measured": _get(report, path),
            "met": _met(_get(report, path), op, target),
        }
        for path, op, target, label in TARGETS
    ]
    if run.get("impolite"):
        report["overload"] = overload_report(report, run)
    report["timeline"] = {g.name: _timeline(g) for g in groups}
    report["latency_drift"] = {g.name: latency_drift(g.recorder.per_second) for g in groups}
    span_files = [Path(p) for p in run.get("spans_files", []) if Path(p).exists()]
    report["span_breakdown_us"] = span_breakdown(span_files) if span_files else {}
    return report


def overload_report(r: Mapping[str, Any], run: Mapping[str, Any]) -> dict[str, Any]:
    """An impolite run read against the issue's overload goals (``overload`` in report.json).

    Capacity is ``run["capacity"]`` (``--capacity``, e.g. a sweep's knee) or, absent, half the
    offered rate (the run is then read as the issue's "2x capacity"). A refusal is a tx answered
    without an outcome from the sequencer; those the workload provokes on purpose
    (``INTENDED_CODES``) and those never answered (``UNANSWERED``) are counted apart, every other
    one must be a 23000 whose answer carried ``Retry-After``."""
    offered = float(run.get("tps") or 0)
    given = run.get("capacity")
    capacity = float(given) if given else offered / 2
    goodput = float(r.get("goodput_tps") or 0)
    share = goodput / capacity if capacity else 0.0
    refusals: Mapping[str, Mapping[str, int]] = r.get("refusals_by_code") or {}
    intended = {code_name(c) for c in INTENDED_CODES}
    rate_limited = code_name(23000)
    unanswered = sum(int((r.get("errors_by_code") or {}).get(k, 0)) for k in UNANSWERED)
    load = {k: v for k, v in refusals.items() if k not in intended and k not in UNANSWERED}
    polite = sum(v["with_retry_after"] for k, v in load.items() if k == rate_limited)
    total = sum(v["count"] for v in load.values())
    other = total - polite
    p99_ms = float((r.get("admitted_latency_us") or {}).get("p99", 0)) / 1000
    p50_ms = float((r.get("admitted_latency_us") or {}).get("p50", 0)) / 1000
    return {
        "offered_tps": offered,
        "capacity_tps": capacity,
        "capacity_from": "--capacity" if given else "assumed: half the offered rate",
        "goodput_tps": goodput,
        "goodput_share_of_capacity": round(share, 3),
        "admitted_latency_ms": {"p50": round(p50_ms, 1), "p99": round(p99_ms, 1)},
        "refusals_by_code": {k: dict(v) for k, v in refusals.items()},
        "refusals": total,
        "refusals_not_23000_with_retry_after": other,
        "unanswered_txs": unanswered,
        "connections_opened": r.get("connections_opened", 0),
        # requests that waited for a connection (a lane at its cap): 0 when in flight was unbounded
        "connection_waits": r.get("connection_waits", 0),
        "targets": [
            {"label": "goodput vs capacity", "target": f">= {OVERLOAD_GOODPUT_SHARE:.0%}",
             "measured": f"{share:.1%} ({goodput:,.0f} of {capacity:,.0f} tx/s)",
             "met": share >= OVERLOAD_GOODPUT_SHARE},
            {"label": "admitted txs' latency p99 from the planned send",
             "target": f"<= {OVERLOAD_ADMITTED_P99_MS:g} ms", "measured": f"{p99_ms:,.1f} ms",
             "met": p99_ms <= OVERLOAD_ADMITTED_P99_MS},
            {"label": "every refusal a 23000 with Retry-After", "target": "0 others",
             "measured": f"{other:,} of {total:,} refusals", "met": other == 0},
            {"label": "txs without an answer", "target": "0", "measured": f"{unanswered:,}",
             "met": unanswered == 0},
        ],
    }  # fmt: skip


def overload_lines(o: Mapping[str, Any]) -> list[str]:
    """The Markdown section of ``overload_report``."""
    lines = [
        "## Overload (impolite clients: in flight unbounded)",
        "",
        f"Offered {o['offered_tps']:,.0f} tx/s against a capacity of {o['capacity_tps']:,.0f} "
        f"({o['capacity_from']}); goodput {o['goodput_tps']:,.0f} tx/s; admitted txs' latency "
        f"from the planned send p50 {o['admitted_latency_ms']['p50']} ms, p99 "
        f"{o['admitted_latency_ms']['p99']} ms; {o['connections_opened']:,} connections opened, "
        f"{o['connection_waits']:,} requests waited for one (0: in flight was unbounded).",
        "",
        "| target | wanted | measured | met |",
        "|---|---|---|---|",
    ]
    for t in o["targets"]:
        met = "yes" if t["met"] else "**no**"
        lines.append(f"| {t['label']} | {t['target']} | {t['measured']} | {met} |")
    lines += ["", "| refused with | txs | with Retry-After |", "|---|---:|---:|"]
    for code, v in o["refusals_by_code"].items():
        lines.append(f"| {code} | {v['count']:,} | {v['with_retry_after']:,} |")
    return lines


#: Stages of a sampled tx's trace (client span -> replica handler -> dry-run, submit), in order.
SPAN_STAGES = ("client_to_replica", "dry_run", "sequencer_and_apply", "replica_handler",
               "replica_to_client", "client_total")  # fmt: skip


def _ts_ns(text: str) -> int:
    from datetime import datetime

    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000


def span_breakdown(paths: Sequence[Path]) -> dict[str, dict[str, float]]:
    """Where a sampled tx's time goes, from the OTel span files (µs summaries per stage):
    planned send -> replica handler start (generator lag, network, the replica's event loop),
    dry-run, sequencer round trip + local apply (``replica.submit``), the whole handler, handler
    end -> answer read by the client, and the client's whole span."""
    traces: dict[str, list[dict[str, Any]]] = {}
    for p in paths:
        for line in Path(p).read_text().splitlines():
            span = json.loads(line)
            traces.setdefault(span["context"]["trace_id"], []).append(span)
    hists = {k: Histogram() for k in SPAN_STAGES}
    for spans in traces.values():
        by = {s["name"]: s for s in spans}
        client = by.get("client.send")
        handler = next((s for s in spans if s["name"].startswith("replica.send")), None)
        if client is None or handler is None:
            continue
        c0, c1 = _ts_ns(client["start_time"]), _ts_ns(client["end_time"])
        h0, h1 = _ts_ns(handler["start_time"]), _ts_ns(handler["end_time"])
        hists["client_to_replica"].record(max(0, h0 - c0))
        hists["replica_handler"].record(max(0, h1 - h0))
        hists["replica_to_client"].record(max(0, c1 - h1))
        hists["client_total"].record(max(0, c1 - c0))
        dry = [s for s in spans if s["name"] == "replica.dry_run"]
        hists["dry_run"].record(sum(_ts_ns(s["end_time"]) - _ts_ns(s["start_time"]) for s in dry))
        sub = by.get("replica.submit")
        if sub is not None:
            hists["sequencer_and_apply"].record(
                max(0, _ts_ns(sub["end_time"]) - _ts_ns(sub["start_time"]))
            )
    return {k: h.summary_us() for k, h in hists.items()}


def _met(value: Any, op: str, target: float) -> bool | None:
    if not isinstance(value, int | float):
        return None
    return {">=": value >= target, "<=": value <= target, "<": value < target}[op]


def latency_drift(per_second: Sequence[Histogram]) -> dict[str, Any]:
    """Latency of the txs answered in the window's first and last span (60 s each when the window
    is >= 180 s, else a third of it): ``{span_s, first, last, p50_ratio, p99_ratio}``, ratios
    last / first (None when a span answered nothing)."""
    n = len(per_second)
    span = 60 if n >= 180 else max(1, n // 3)
    first, last = Histogram(), Histogram()
    for h in per_second[:span]:
        first.merge(h)
    for h in per_second[max(span, n - span) :]:
        last.merge(h)
    a, b = first.summary_us(), last.summary_us()

    def ratio(q: str) -> float | None:
        return round(b[q] / a[q], 2) if a["count"] and b["count"] and a[q] else None

    return {"span_s": span, "first": a, "last": b,
            "p50_ratio": ratio("p50"), "p99_ratio": ratio("p99")}  # fmt: skip


def _timeline(g: GroupData) -> list[dict[str, float]]:
    """One row per second of the window, binned by when txs were *answered*: ``n`` answered,
    ``ok`` answered 200, latency percentiles (µs) of those answers, freshness p99."""
    out = []
    oks = g.recorder.ok_per_second
    for s, h in enumerate(g.recorder.per_second):
        row: dict[str, float] = {"second": s, "n": h.total, "ok": oks[s] if s < len(oks) else 0}
        row.update({k: v for k, v in h.summary_us().items() if k in ("p50", "p99", "p999")})
        if s < len(g.books.engine_per_second):
            row["freshness_p99"] = g.books.engine_per_second[s].summary_us()["p99"]
        out.append(row)
    return out


# ---- Markdown ----------------------------------------------------------------------------------


def _q(h: Mapping[str, Any] | None) -> str:
    if not h or not h.get("count"):
        return "-"
    return f"{h['p50']:,.0f} / {h['p99']:,.0f} / {h['p999']:,.0f}"


def render_markdown(r: Mapping[str, Any]) -> str:
    run = r["run"]
    lines = [
        "# raydex loadtest report",
        "",
        f"Target {run.get('tps')} tx/s for {run.get('seconds')} s, {run.get('accounts')} accounts, "
        f"{run.get('markets')} markets, {run.get('clients')} client lanes, groups: "
        + ", ".join(f"`{n}` ({g['settings'] or 'default'})" for n, g in r["groups"].items()),
        "",
        f"Boot {run.get('boot_s')} s; {run.get('planned_txs')} txs in {run.get('planned')} "
        f"requests signed before the window in "
        f"{run.get('sign_s')} s. Load generator CPU: {run.get('loadgen_cpu_pct_of_core')}% of one "
        f"core ({run.get('loadgen_cpu_pct_of_machine')}% of the machine's "
        f"{run.get('cpus')} cores); its event loop ran late by p50/p99 "
        f"{(run.get('loadgen_loop_lag_us') or {}).get('p50')} / "
        f"{(run.get('loadgen_loop_lag_us') or {}).get('p99')} µs (latencies from planned times "
        "include that).",
        "",
        "## Targets",
        "",
        "| target | wanted | measured | met |",
        "|---|---|---|---|",
    ]
    for t in r["targets"]:
        met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
        lines.append(f"| {t['label']} | {t['target']} | {t['measured']} | {met} |")
    if r.get("overload"):
        lines += ["", *overload_lines(r["overload"])]
    names = list(r["groups"])
    lines += ["", "## Per group (p50 / p99 / p99.9, µs)", "",
              "| metric | " + " | ".join(names) + (" | Δ B vs A |" if len(names) == 2 else " |"),
              "|---" * (len(names) + 1 + (len(names) == 2)) + "|"]  # fmt: skip
    rows = [
        ("achieved tx/s", "achieved_tps", False),
        ("goodput (sequenced tx/s)", "goodput_tps", False),
        ("errors (not intended)", "error_rate_pct", False),
        ("request latency from planned time", "request_latency_us", True),
        ("  of the txs sequenced", "admitted_latency_us", True),
        ("freshness engine→client", "freshness_engine_to_client_us", True),
        ("freshness replica→client", "freshness_replica_to_client_us", True),
        ("apply per block", "apply_us", True),
        ("  on the CPU", "apply_cpu_us", True),
        ("  decode", "apply_steps_us.decode", True),
        ("  cache update", "apply_steps_us.cache_update", True),
        ("  fan-out", "apply_steps_us.fanout", True),
        ("dry-run", "dry_run_us", True),
        ("GC collections", "gc_collections", False),
        ("GC pause", "gc_pause_us", True),
        ("order_book updates / nonce gaps", "updates", False),
    ]
    diffs = r.get("ab_diff_pct", {})
    for label, path, is_hist in rows:
        cells = []
        for n in names:
            v = _get(r["groups"][n], path)
            if path == "updates":
                v = f"{v} / {r['groups'][n]['nonce_gaps']}"
            cells.append(_q(v) if is_hist else str(v))
        extra = ""
        if len(names) == 2:
            d = diffs.get(f"{path}.p99" if is_hist else path)
            extra = f" | {d:+.1f}% |" if isinstance(d, float) else " | |"
        lines.append(f"| {label} | " + " | ".join(cells) + (extra or " |"))
    for n in names:
        for rep, native in sorted(r["groups"][n].get("native", {}).items()):
            loops = ", ".join(f"{k} {'C' if v else 'Python'}" for k, v in sorted(native.items()))
            lines.append(f"\nReplica `{rep}` applied with: {loops}.")
            heaps = r["groups"][n].get("heap", {})
            if rep not in heaps:  # a report from before the heap was recorded
                continue
            heap = heaps[rep]
            if heap is None:
                lines.append("Its heap: 4 KiB pages (`huge_pages: false`).")
            else:
                lines.append(
                    f"Its heap: arenas on huge pages {'yes' if heap['arenas'] else 'no'}, "
                    f"glibc's {'yes' if heap['glibc'] else 'no'} (THP {heap['thp']}, "
                    f"{heap['huge_page_bytes'] >> 20} MiB on huge pages)."
                )
    lines += _per_host(r.get("hosts") or {})
    lines += ["", "## Lifecycle per tx type (planned send → confirmed; p50 / p99 / p99.9, µs)", ""]
    for name, h in r["lifecycle_us"].items():
        lines.append(f"- `{name}`: {_q(h)} (n={h['count']})")
    led = r.get("cpu_ledger")
    if led:
        unattributed = led["by_role"].get("unattributed", {}).get("us_per_tx", 0)
        lines += ["", "## CPU ledger (µs of CPU per committed tx)", "",
                  f"{led['committed_txs']:,} txs committed in a {led['window_s']:.1f} s window "
                  f"({led['committed_tps']:,} tx/s); the machine was {led['machine_busy_pct']}% "
                  f"busy ({led['cores']} cores).", "", *format_ledger(led), "",
                  f"{led['note']} Unattributed here: {unattributed:,.1f} µs/tx."]  # fmt: skip
        top = led.get("top_other_processes") or []
        if top:
            lines.append("Busiest other processes: " + "; ".join(
                f"`{t['command'][:50]}` {t['cpu_s']:.2f} s" for t in top[:3]) + ".")  # fmt: skip
        lines += ["", "![CPU ledger](cpu_ledger.png)"]
    memory = r.get("memory_mib") or {}
    drift = r.get("latency_drift") or {}
    if memory or drift:
        lines += ["", "## Memory and drift over the window (a soak's checks)", ""]
    if memory:
        lines += ["| process | RSS start MiB | end MiB | peak MiB | growth MiB "
                  "| growth per third MiB |",
                  "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        for role, m in memory.items():
            thirds = " / ".join(f"{g:+,.1f}" for g in m.get("growth_by_third_mib", ()))
            lines.append(f"| {role} | {m['start_mib']:,.1f} | {m['end_mib']:,.1f} "
                         f"| {m['peak_mib']:,.1f} | {m['growth_mib']:+,.1f} "
                         f"| {thirds} |")  # fmt: skip
    for name, led in (r.get("replica_ledgers") or {}).items():
        lines += ["", f"Replica `{name}`'s per-account ledger at the end: {led['entries']:,} of "
                  f"{led['max_entries']:,} entries ({led['accounts']:,} accounts, "
                  f"{led['dropped']:,} logs dropped): a replica's RSS grows until it is "
                  "full."]  # fmt: skip
    for name, d in drift.items():
        lines += ["", f"Latency of the txs answered (group `{name}`), first {d['span_s']} s vs "
                  f"last {d['span_s']} s (p50 / p99 µs): {_q(d['first'])} vs {_q(d['last'])}; "
                  f"ratio last/first p50 {d['p50_ratio']}, p99 {d['p99_ratio']}."]  # fmt: skip
    profiles = r.get("profiles") or {}
    if profiles:
        lines += ["", "## Profiles (py-spy, speedscope JSON: https://www.speedscope.app)", ""]
        for role, pr in profiles.items():
            what = f"`{pr['file']}`" if pr.get("ok") else f"failed: {pr.get('error')}"
            lines.append(f"- {role}: {what}")
    causes = r.get("errors_by_cause") or {}
    lines += ["", "## Errors", "",
              f"- not intended: {r['errors_by_code'] or 'none'}",
              f"  - by cause: root {causes.get('root') or 'none'}; follow-on (an INVALID_NONCE "
              f"of a tx sent before its account's earlier rejection was known) "
              f"{causes.get('follow_on') or 'none'}",
              f"- INVALID_NONCE answered by the engine (the replica's dry-run had passed the tx):"
              f" {r.get('invalid_nonce_at_engine', 0)}",
              f"- nonce re-syncs from the server after a rejection: {r.get('nonce_resyncs', 0)}; "
              f"txs re-signed after them: {r.get('resigned_txs', 0)}",
              f"- provoked by the workload (cancel/modify of filled orders, IOC without liquidity,"
              f" margin): {r['intended_rejections_by_code'] or 'none'}",
              f"- requests by path: {r['requests_by_path']}",
              f"- liquidations seen in the blocks: {r.get('liquidations', 0)}",
              "", "## Sequencer", "",
              f"- block time p50/p99/p99.9 µs: {_q(r.get('block_time_us'))}; txs per block p50 "
              f"{r.get('block_txs', {}).get('p50')} p99 {r.get('block_txs', {}).get('p99')}",
              f"- WAL sync per block p50/p99/p99.9 µs: {_q(r.get('wal_sync_us'))}; segments "
              f"started {_segments(r.get('wal_segments') or {})}",
              f"- sync returned -> the loop publishing (its wake-up) p50/p99/p99.9 µs: "
              f"{_q(r.get('wal_handoff_us'))}",
              "", "## Committer", "", committer_line(r.get("committer") or {}),
              "", "## Where the time goes", ""]  # fmt: skip
    lines += _where(r)
    spans = r.get("span_breakdown_us") or {}
    if spans.get("client_total", {}).get("count"):
        lines += ["", "Sampled txs, traced across the client and the replica (OpenTelemetry; "
                  "p50 / p99 / p99.9 µs):", "", "| stage | µs |", "|---|---|"]  # fmt: skip
        labels = {
            "client_to_replica": "planned send → replica handler (generator lag, network, loop)",
            "dry_run": "dry-run",
            "sequencer_and_apply": "sequencer round trip + apply here",
            "replica_handler": "whole replica handler",
            "replica_to_client": "handler end → client has the answer",
            "client_total": "planned send → answered",
        }
        for k in SPAN_STAGES:
            lines.append(f"| {labels[k]} | {_q(spans.get(k))} |")
    dumps = r.get("flight_dumps", [])
    lines += ["", f"## Flight recorder ({r.get('slow_events', 0)} slow events, {len(dumps)} dumps)",
              "", "Open a dump in https://ui.perfetto.dev (or chrome://tracing).", ""]  # fmt: skip
    lines += [f"- `{d}`" for d in dumps[:20]]
    if run.get("spans_files"):
        lines += ["", "OpenTelemetry spans (sampled txs, JSON lines): "
                  + ", ".join(f"`{p}`" for p in run["spans_files"])]  # fmt: skip
    lines += ["", "## Plots", "", "![latency over time](latency_over_time.png)", "",
              "![CDFs](cdf.png)", ""]  # fmt: skip
    if len(names) == 2:
        lines += ["![A/B](ab.png)", ""]
    lines += ["## Closing note", "", *_closing(r)]
    return "\n".join(lines) + "\n"


def _per_host(hosts: Mapping[str, Any]) -> list[str]:
    """The outcomes per host whose replicas the lanes talked to (``run.per_host``)."""
    if not hosts:
        return []
    lines = ["", "## Per host (the replicas the lanes talked to)", "",
             "| host | endpoints | lanes | txs answered | accepted | accepted tx/s "
             "| latency p50 / p99 (µs) | non-200 |", "|---" * 8 + "|"]  # fmt: skip
    for label, h in hosts.items():
        errors = ", ".join(f"{k} {v}" for k, v in h.get("errors", {}).items()) or "none"
        lines.append(
            f"| {label} | {', '.join(h['endpoints'])} | {h['lanes']} | {h['txs']} "
            f"| {h['accepted']} | {h['accepted_per_s']} | {h['p50_us']} / {h['p99_us']} "
            f"| {errors} |"
        )
    return lines


def _where(r: Mapping[str, Any]) -> list[str]:
    steps = r.get("apply_steps_us", {})
    p99s = {s: (steps.get(s) or {}).get("p99", 0.0) for s in STEPS}
    top = max(p99s, key=lambda s: p99s[s]) if any(p99s.values()) else None
    out = [
        f"- apply per block p99 {(r.get('apply_us') or {}).get('p99')} µs; by step p99: "
        + ", ".join(f"{s} {v:,.0f} µs" for s, v in p99s.items())
        + (f" (largest: {top})" if top else "")
        + f"; on the replica thread's CPU p99 {(r.get('apply_cpu_us') or {}).get('p99')} µs "
        "(the rest of the wall time it waited off the CPU)",
        f"- request latency p99 {(r.get('request_latency_us') or {}).get('p99')} µs of which the "
        f"generator's own send lag p99 is {(r.get('send_lag_us') or {}).get('p99')} µs",
        f"- block time p99 {(r.get('block_time_us') or {}).get('p99')} µs (sequencer execute + "
        "WAL + publish)",
    ]
    return out


def _closing(r: Mapping[str, Any]) -> list[str]:
    run = r["run"]
    out = [
        f"Achieved {r['achieved_tps']} tx/s of the {run.get('tps')} planned "
        f"(target 5,000) with everything, load generator included, on {run.get('cpus')} cores."
    ]
    missed = [t for t in r["targets"] if t["met"] is False]
    for t in missed:
        out.append(f"- missed: {t['label']}: {t['measured']} (wanted {t['target']})")
    if any(t["metric"] == "achieved_tps" for t in missed):
        cpu = run.get("loadgen_cpu_pct_of_machine")
        out.append(
            f"  The generator itself used {cpu}% of the machine; the replicas, sequencer, snapshot "
            "holder and committer share the rest. What would close it: more txs per Python "
            "round trip (the replica handles a WebSocket's messages one at a time, so a WS "
            "client waits a whole block per tx; larger batches per request and per block), a "
            "cheaper dry-run and apply (see below), and the generator on another host."
        )
    spans = r.get("span_breakdown_us") or {}
    # the stages that do not overlap (the handler contains dry-run and submit)
    parts = ("client_to_replica", "dry_run", "sequencer_and_apply", "replica_to_client")
    stages = {k: (spans.get(k) or {}).get("p50", 0.0) for k in parts}
    if any(stages.values()):
        top = max(stages, key=lambda k: stages[k])
        total = spans["client_total"]["p50"]
        out.append(
            f"- sampled txs spend most of their median time in `{top}` "
            f"({stages[top]:,.0f} µs of {total:,.0f} µs)."
        )
    if any(t["metric"].startswith("apply_us") for t in missed):
        out.append(
            "  Apply: see the per-step table; the largest step is where to cut first "
            "(fan-out serializes per market per block; decode is the hot codec)."
        )
    if not missed:
        out.append("Every target met.")
    return out


# ---- plots -------------------------------------------------------------------------------------


def _cdf(h: Histogram) -> tuple[list[float], list[float]]:
    xs: list[float] = []
    ys: list[float] = []
    acc = 0
    for top in sorted(h.counts):
        acc += h.counts[top]
        xs.append(max(top, 1) / 1000.0)
        ys.append(acc / h.total)
    return xs, ys


def write_plots(groups: Sequence[GroupData], report: Mapping[str, Any], out: Path) -> list[Path]:
    """latency_over_time.png, cdf.png and (two groups) ab.png in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for g in groups:
        tl = report["timeline"][g.name]
        secs = [row["second"] for row in tl]
        for key, style in (("p50", ":"), ("p99", "-"), ("p999", "--")):
            axes[0].plot(secs, [row.get(key, 0) / 1000 for row in tl], style,
                         label=f"{g.name} {key}")  # fmt: skip
        axes[1].plot(secs, [row["n"] for row in tl], label=f"{g.name} answered")
        axes[1].plot(secs, [row.get("ok", 0) for row in tl], ":", label=f"{g.name} accepted")
    axes[0].set(title="request latency from planned time (by second answered)",
                xlabel="second of the run", ylabel="ms", yscale="symlog")  # fmt: skip
    axes[1].axhline(float(report["run"].get("tps") or 0), color="grey", lw=0.8, ls="--",
                    label="offered")  # fmt: skip
    axes[1].set(title="answered txs per second (by second answered)", xlabel="second of the run",
                ylabel="tx/s")  # fmt: skip
    for ax in axes:
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    written.append(out / "latency_over_time.png")
    fig.savefig(written[-1], dpi=90)
    plt.close(fig)

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for g in groups:
        for ax, h in zip(axes, (g.recorder.latency, g.books.engine, g.hist("apply")), strict=True):
            if h.total:
                ax.plot(*_cdf(h), label=g.name)
    for ax, title in zip(axes, ("request latency", "freshness engine→client", "apply per block"),
                         strict=True):  # fmt: skip
        ax.set(title=title, xlabel="µs", ylabel="fraction ≤ x", xscale="log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    written.append(out / "cdf.png")
    fig.savefig(written[-1], dpi=90)
    plt.close(fig)

    ledger = report.get("cpu_us_per_tx")
    if ledger:
        written.append(out / "cpu_ledger.png")
        write_ledger_plot([(f"{report['run'].get('tps'):g} tx/s offered", ledger)], written[-1])

    if len(groups) == 2:
        metrics = [m for m, _ in AB_METRICS]
        fig, axes = plt.subplots(2, (len(metrics) + 1) // 2, figsize=(18, 6))
        for ax, path in zip(axes.flat, metrics, strict=False):
            vals = [float(_get(report["groups"][g.name], path) or 0) for g in groups]
            ax.bar([g.name for g in groups], vals, color=["tab:blue", "tab:orange"])
            d = report.get("ab_diff_pct", {}).get(path)
            ax.set_title(f"{path}\n{'' if d is None else f'{d:+.1f}%'}", fontsize=8)
            ax.tick_params(labelsize=7)
        for ax in list(axes.flat)[len(metrics) :]:
            ax.axis("off")
        fig.tight_layout()
        written.append(out / "ab.png")
        fig.savefig(written[-1], dpi=90)
        plt.close(fig)
    return written


#: the budget: 5,000 tx/s on 2 cores is 400 µs of CPU per tx for everything
CPU_BUDGET_US = 400.0


def draw_ledger(ax: Any, bars: Sequence[tuple[str, Mapping[str, float]]]) -> None:
    """Stacked bars of µs of CPU per committed tx by role on ``ax`` (one bar per ``(label,
    us_per_tx)``), each topped by its total, with the 400 µs budget line."""
    import matplotlib.pyplot as plt

    roles: list[str] = []
    for _, led in bars:
        roles += [r for r in led if r != "total" and r not in roles]
    cmap = plt.get_cmap("tab20")
    bottoms = [0.0] * len(bars)
    labels = [label for label, _ in bars]
    for i, role in enumerate(roles):
        vals = [max(0.0, float(led.get(role, 0.0))) for _, led in bars]
        ax.bar(labels, vals, bottom=bottoms, label=role, color=cmap(i % 20), width=0.6)
        bottoms = [b + v for b, v in zip(bottoms, vals, strict=True)]
    for x, (_, led) in enumerate(bars):
        ax.text(x, bottoms[x], f"{float(led.get('total', 0)):,.0f}", ha="center", va="bottom")
    ax.axhline(CPU_BUDGET_US, color="red", ls="--", lw=1, label="budget (400 µs/tx)")
    ax.set(title="CPU per committed tx by role", ylabel="µs of CPU per tx")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.grid(alpha=0.3, axis="y")


def write_ledger_plot(bars: Sequence[tuple[str, Mapping[str, float]]], path: Path) -> Path:
    """``draw_ledger`` as its own PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(bars) + 4), 5))
    draw_ledger(ax, bars)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_report(
    groups: Sequence[GroupData], report: dict[str, Any], out: Path, json_out: Path | None
) -> dict[str, Path]:
    """Write report.json, report.md and the plots into ``out`` (and ``json_out`` if given)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "report.json", "markdown": out / "report.md"}
    text = json.dumps(report, indent=1, default=str)
    paths["json"].write_text(text)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(text)
        paths["json_out"] = json_out
    paths["markdown"].write_text(render_markdown(report))
    for p in write_plots(groups, report, out):
        paths[p.stem] = p
    return paths
