"""``raydex loadtest --sweep RATES``: a capacity sweep, one full loadtest per offered rate.

::

    parse_rates("1000,2000" | "1000:5000:1000")  ─►  for each rate: run(opts, tps=rate,
        out=<out>/tps-<rate>)  (own Ray, own deployment, torn down)  ─►  SweepPoint
    ─►  find_knee(points)  ─►  <out>/sweep.json, sweep.md, sweep.png

**The knee.** Points are taken in offered order; a point is *keeping up* when it achieves at
least ``KEEP_UP`` (95%) of what was offered, its unintended errors stay under ``MAX_ERROR_PCT``
(1%) and its p99 latency from the planned send is within ``LATENCY_FACTOR`` (10x) of the first
point's p99 (and under ``LATENCY_CEILING_MS``). The knee is the last point of the run of keeping-up
points that starts at the first one: past it the stack no longer absorbs the load (the open-loop
queue grows, latency explodes, or errors appear). ``None`` when even the first rate is past it.
The sweep's capacity is the highest achieved rate of any point.

Each point is an isolated loadtest in a child process (its own embedded Ray, deployment and
signing); a sweep of N rates of S seconds costs N x (boot + signing the plan + S + drain). Run on a
quiet machine: the points are compared with each other.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "KEEP_UP",
    "LATENCY_CEILING_MS",
    "LATENCY_FACTOR",
    "MAX_ERROR_PCT",
    "SweepPoint",
    "find_knee",
    "knee_sentence",
    "loadtest_argv",
    "parse_rates",
    "point_of",
    "render_sweep",
    "run_sweep",
    "sweep",
    "sweep_report",
    "write_sweep_plot",
]

KEEP_UP = 0.95
MAX_ERROR_PCT = 1.0
LATENCY_FACTOR = 10.0
LATENCY_CEILING_MS = 1_000.0
MAX_POINTS = 20


def parse_rates(text: str) -> tuple[float, ...]:
    """``"1000,2000,3000"``, a range ``"1000:5000:1000"`` (start:stop:step, stop included), or
    both joined by commas -> the distinct rates, ascending. ValueError says what is wrong."""
    rates: set[float] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        if ":" in part:
            bits = part.split(":")
            if len(bits) != 3:
                raise ValueError(f"--sweep: a range is START:STOP:STEP, got {part!r}")
            start, stop, step = (_rate(b, part) for b in bits)
            if stop < start:
                raise ValueError(f"--sweep: range {part!r} ends before it starts")
            n = int((stop - start) / step + 1e-9) + 1
            if n > MAX_POINTS:
                raise ValueError(f"--sweep: range {part!r} has {n} points (at most {MAX_POINTS})")
            rates.update(start + i * step for i in range(n))
        else:
            rates.add(_rate(part, part))
    if not rates:
        raise ValueError("--sweep: no rates given (e.g. 1000,2000,3000 or 1000:5000:1000)")
    if len(rates) > MAX_POINTS:
        raise ValueError(f"--sweep: {len(rates)} rates (at most {MAX_POINTS})")
    return tuple(sorted(rates))


def _rate(text: str, part: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"--sweep: {text!r} in {part!r} is not a number") from None
    if not v > 0 or v != v or v == float("inf"):
        raise ValueError(f"--sweep: rates must be > 0, got {text!r}")
    return v


@dataclasses.dataclass(frozen=True, slots=True)
class SweepPoint:
    offered: float
    achieved: float
    p50_ms: float
    p99_ms: float
    error_pct: float  # errors not intended by the workload, % of answered txs
    goodput: float = 0.0  # sequenced tx/s (past the overload door and the dry-run)
    admitted_p99_ms: float = 0.0  # p99 latency of the sequenced txs
    overload_pct: float = 0.0  # txs refused at the door (23000), % of answered txs
    cpu_us_per_tx: float | None = None
    ledger: Mapping[str, float] | None = None
    report_dir: str = ""

    def keeps_up(self, first_p99_ms: float) -> bool:
        return (
            self.achieved >= KEEP_UP * self.offered
            and self.error_pct < MAX_ERROR_PCT
            and self.p99_ms <= min(LATENCY_CEILING_MS, LATENCY_FACTOR * max(first_p99_ms, 1.0))
        )


def point_of(report: Mapping[str, Any]) -> SweepPoint:
    """A loadtest report (``run.run``'s JSON) as a sweep point."""
    lat = report.get("request_latency_us") or {}
    led = report.get("cpu_us_per_tx")
    answered = int(report.get("answered", 0))
    refused = int((report.get("errors_by_code") or {}).get("RATE_LIMITED", 0))
    return SweepPoint(
        offered=float(report["run"]["tps"]),
        achieved=float(report.get("achieved_tps", 0.0)),
        p50_ms=float(lat.get("p50", 0.0)) / 1000,
        p99_ms=float(lat.get("p99", 0.0)) / 1000,
        error_pct=float(report.get("error_rate_pct", 0.0)),
        goodput=float(report.get("goodput_tps", 0.0)),
        admitted_p99_ms=float((report.get("admitted_latency_us") or {}).get("p99", 0.0)) / 1000,
        overload_pct=round(100.0 * refused / answered, 3) if answered else 0.0,
        cpu_us_per_tx=float(led["total"]) if led else None,
        ledger=dict(led) if led else None,
        report_dir=str(report["run"].get("out_dir", "")),
    )


def find_knee(points: Sequence[SweepPoint]) -> SweepPoint | None:
    """The last point of the keeping-up run that starts at the lowest offered rate (module
    docstring); None if the lowest rate is already past the knee."""
    ordered = sorted(points, key=lambda p: p.offered)
    if not ordered:
        return None
    first = ordered[0].p99_ms
    knee = None
    for p in ordered:
        if not p.keeps_up(first):
            break
        knee = p
    return knee


def sweep_report(points: Sequence[SweepPoint]) -> dict[str, Any]:
    """The JSON document of a sweep."""
    ordered = sorted(points, key=lambda p: p.offered)
    knee = find_knee(ordered)
    beyond = next((p for p in ordered if knee is None or p.offered > knee.offered), None)
    return {
        "points": [dataclasses.asdict(p) for p in ordered],
        "knee": None if knee is None else dataclasses.asdict(knee),
        "past_knee": None if beyond is None else dataclasses.asdict(beyond),
        "capacity_tps": max((p.achieved for p in ordered), default=0.0),
        "rule": {"keep_up": KEEP_UP, "max_error_pct": MAX_ERROR_PCT,
                 "latency_factor": LATENCY_FACTOR, "latency_ceiling_ms": LATENCY_CEILING_MS},
    }  # fmt: skip


def knee_sentence(doc: Mapping[str, Any]) -> str:
    knee, past = doc.get("knee"), doc.get("past_knee")
    if knee is None:
        head = "No knee inside the sweep: even the lowest offered rate was past it"
    else:
        head = (
            f"Knee at {knee['offered']:,.0f} tx/s offered: achieved {knee['achieved']:,.0f} "
            f"tx/s, p99 {knee['p99_ms']:,.1f} ms"
        )
        if knee.get("cpu_us_per_tx"):
            head += f", {knee['cpu_us_per_tx']:,.0f} µs of CPU per tx"
    if past is not None:
        head += (
            f". Past it, at {past['offered']:,.0f} offered: achieved {past['achieved']:,.0f} "
            f"({100 * past['achieved'] / past['offered']:.0f}%), p99 {past['p99_ms']:,.0f} ms, "
            f"errors {past['error_pct']:.2f}%"
        )
    elif knee is not None:
        head += " (the highest rate of the sweep: the knee may lie beyond it)"
    return head + f". Capacity seen: {doc['capacity_tps']:,.0f} tx/s."


def render_sweep(doc: Mapping[str, Any]) -> str:
    rule = doc["rule"]
    lines = [
        "# raydex capacity sweep",
        "",
        knee_sentence(doc),
        "",
        f"A point keeps up when it achieves >= {rule['keep_up']:.0%} of the offered rate, its "
        f"unintended errors stay < {rule['max_error_pct']}% and its p99 is within "
        f"{rule['latency_factor']:g}x the first point's (and <= {rule['latency_ceiling_ms']:g} "
        "ms); the knee is the last point of the keeping-up run from the lowest rate.",
        "",
        "| offered tx/s | achieved tx/s | p50 ms | p99 ms | errors % | goodput tx/s | "
        "sequenced p99 ms | refused 23000 % | CPU µs/tx | report |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for p in doc["points"]:
        cpu = "-" if p["cpu_us_per_tx"] is None else f"{p['cpu_us_per_tx']:,.0f}"
        lines.append(
            f"| {p['offered']:,.0f} | {p['achieved']:,.1f} | {p['p50_ms']:,.1f} | "
            f"{p['p99_ms']:,.1f} | {p['error_pct']:.3f} | {p.get('goodput', 0.0):,.1f} | "
            f"{p.get('admitted_p99_ms', 0.0):,.1f} | {p.get('overload_pct', 0.0):.2f} | {cpu} | "
            f"`{p['report_dir']}` |"
        )
    lines += ["", "![sweep](sweep.png)", ""]
    return "\n".join(lines)


def write_sweep_plot(doc: Mapping[str, Any], path: Path) -> Path:
    """Achieved vs offered, p50/p99 latency vs achieved, and the CPU ledger per offered rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .report import draw_ledger

    pts = doc["points"]
    off = [p["offered"] for p in pts]
    ach = [p["achieved"] for p in pts]
    fig, axes = plt.subplots(1, 3, figsize=(19, 5))
    ax = axes[0]
    ax.plot(off, ach, "o-", label="achieved")
    ax.plot(off, off, ":", color="grey", label="offered (y = x)")
    knee = doc.get("knee")
    if knee is not None:
        ax.plot([knee["offered"]], [knee["achieved"]], "r*", ms=14, label="knee")
    ax.set(title="achieved vs offered", xlabel="offered tx/s", ylabel="achieved tx/s")
    ax = axes[1]
    ax.plot(ach, [p["p50_ms"] for p in pts], "o:", label="p50")
    ax.plot(ach, [p["p99_ms"] for p in pts], "o-", label="p99")
    for p in pts:
        ax.annotate(f"{p['offered']:,.0f}", (p["achieved"], p["p99_ms"]), fontsize=7)
    if knee is not None:
        ax.plot([knee["achieved"]], [knee["p99_ms"]], "r*", ms=14, label="knee")
    ax.set(title="latency from planned send vs achieved (labels: offered)",
           xlabel="achieved tx/s", ylabel="ms", yscale="log")  # fmt: skip
    for a in axes[:2]:
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    bars = [(f"{p['offered']:,.0f}", p["ledger"]) for p in pts if p.get("ledger")]
    if bars:
        draw_ledger(axes[2], bars)
        axes[2].set_xlabel("offered tx/s")
    else:
        axes[2].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def run_sweep(
    rates: Sequence[float],
    out: Path,
    run_one: Callable[[float, Path], Mapping[str, Any]],
    say: Callable[[str], None] = lambda s: None,
) -> dict[str, Any]:
    """One loadtest per rate (``run_one(rate, folder)`` returns its report), then the sweep's
    JSON, Markdown and PNG in ``out``; returns the JSON document (with ``files``)."""
    out.mkdir(parents=True, exist_ok=True)
    points = []
    for rate in rates:
        t = time.monotonic()
        rep = run_one(rate, out / f"tps-{rate:g}")
        points.append(point_of(rep))
        p = points[-1]
        say(f"sweep: {rate:,.0f} tx/s offered -> {p.achieved:,.1f} achieved, p99 "
            f"{p.p99_ms:,.1f} ms ({time.monotonic() - t:.0f} s)")  # fmt: skip
    doc = sweep_report(points)
    files = {"json": out / "sweep.json", "markdown": out / "sweep.md", "png": out / "sweep.png"}
    files["json"].write_text(json.dumps(doc, indent=1))
    files["markdown"].write_text(render_sweep(doc))
    write_sweep_plot(doc, files["png"])
    doc["files"] = {k: str(v) for k, v in files.items()}
    return doc


def loadtest_argv(opts: Any) -> list[str]:
    """``raydex loadtest`` arguments that reproduce ``opts`` (a ``LoadtestOptions``, no A/B)."""
    argv = ["loadtest", "--tps", f"{opts.tps:g}", "--seconds", f"{opts.seconds:g}",
            "--accounts", str(opts.accounts), "--markets", str(opts.markets),
            "--clients", str(opts.clients), "--spec", opts.spec_path,
            "--sample-every", str(opts.sample_every), "--seed", str(opts.seed),
            "--generator-cpus", opts.generator_cpus]  # fmt: skip
    if opts.replicas is not None:
        argv += ["--replicas", str(opts.replicas)]
    for flag, value in (("--out", opts.out_dir), ("--json-out", opts.json_out),
                        ("--address", opts.address)):  # fmt: skip
        if value is not None:
            argv += [flag, str(value)]
    for flag, on in (("--quiet", opts.quiet), ("--profile", opts.profile),
                     ("--no-resync", not opts.resync)):  # fmt: skip
        if on:
            argv.append(flag)
    return argv


def sweep(opts: Any, rates: Sequence[float]) -> dict[str, Any]:
    """``raydex loadtest --sweep``: ``opts`` (a ``LoadtestOptions``) at every rate of ``rates``,
    each point a ``raydex loadtest`` in a child process (its own embedded Ray: a second
    ``ray.init`` in one process after a shutdown is not reliable); the points' reports go to
    ``<out>/tps-<rate>/``, the sweep's files to ``<out>``."""
    import subprocess
    import sys

    from .run import OptionError, check_options

    if opts.ab is not None:
        raise OptionError("--sweep and --ab do not combine (sweep one configuration at a time)")
    for rate in rates:
        check_options(dataclasses.replace(opts, tps=rate))
    out = Path(opts.out_dir or f"loadtest-out/sweep-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    entry = "import sys; from raydex.cluster.cli import main; sys.exit(main(sys.argv[1:]))"

    def one(rate: float, folder: Path) -> Mapping[str, Any]:
        point = dataclasses.replace(
            opts, tps=rate, out_dir=str(folder), json_out=str(folder / "report.json")
        )
        done = subprocess.run(
            [sys.executable, "-c", entry, *loadtest_argv(point)], stdout=subprocess.DEVNULL
        )
        if done.returncode != 0:
            raise RuntimeError(f"the loadtest at {rate:g} tx/s failed (exit {done.returncode})")
        loaded: dict[str, Any] = json.loads((folder / "report.json").read_text())
        return loaded

    def say(text: str) -> None:
        if not opts.quiet:
            print(text, file=sys.stderr, flush=True)

    doc = run_sweep(rates, out, one, say)
    if opts.json_out:
        Path(opts.json_out).write_text(json.dumps(doc, indent=1))
    return doc
