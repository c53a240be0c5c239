"""``raydex bench engine``: the engine over the realistic workload, on one core, beside its floor.

Goals: >= 150,000 commands/s on the default (compiled) build, and the engine within 4x of the bare
book built the same way (``ratio_engine_vs_bare``).

- The workload (``observability/loadtest/workload.py``) is generated chunk by chunk *before* each
  chunk is timed; generation is never inside a timed region.
- The engine runs as the sequencer drives it: ``Engine.execute_into`` writes each command's events
  as block bytes, taken every ``BLOCK_COMMANDS`` commands (inside the timing), decoded untimed
  afterwards for the tallies (liquidations, trades, volume, codes).
- Every stream command is timed alone with ``perf_counter_ns`` into a preallocated array, then into
  one HDR-style histogram per command type; commands/s is the command count over the timed loops'
  wall time (the two timer calls per command included).
- The same chunk's order adds/cancels run through one bare book per market (matching only: no
  accounts, margin, fees or events), the floor. Both loops also run around compiled calls that do
  nothing (``NullBook``), which times the harness alone: ``ratio_without_harness`` is the ratio of
  what is left. The goal is stated with the harness on both sides.
- GC disabled and the heap frozen around the timed loops: a collection walking the millions of
  objects the workload and the state hold measures heap size and collector policy, not the engine
  (the sequencer's own policy keeps such pauses off its path); between chunks it runs untimed.
- Pinned to one CPU (every thread) where allowed; the JSON says which. Peak memory is
  ``ru_maxrss``. The default 1,000,000 commands take a minute or more on a 2-core VM.
- The neighbour: a shared host's other work slows the engine's cold reads more than the bare
  book's hot book, so the report states what ran beside it (``neighbour``): the 1-minute load
  average at the start and the end, and the CPUs busy over the run from ``/proc/stat``, all
  processes and the others alone (the machine's busy time less this process's CPU time).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import platform
import resource
import sys
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, Final

from raydex.cluster.pinning import pin_all_threads
from raydex.codecs import (
    PositionDeleveraged,
    PositionLiquidated,
    ResultCode,
    TradeExecuted,
    decode_body,
)
from raydex.engine import Engine, InvariantViolation
from raydex.engine.rules import notional_multiplier

from ..hist import Histogram
from ..loadtest.ledger import machine_ticks
from ..loadtest.workload import MARKETS, Chunk, Workload, WorkloadConfig
from .floors import BareBook, NullBook

__all__ = ["GOAL_COMMANDS_PER_S", "GOAL_RATIO", "demo", "format_report", "format_summary", "run"]

GOAL_COMMANDS_PER_S = 150_000
GOAL_RATIO = 4.0
#: commands per block: the engine's event bytes are taken this often, as a sequencer takes a
#: block's (blocks at the 5,000 tx/s goal load hold ~5-20 txs)
BLOCK_COMMANDS = 16


def run(
    commands: int = 1_000_000,
    seed: int = 1,
    json_out: bool = False,
    *,
    chunk_size: int = 65_536,
    pin: bool = True,
    quiet: bool = False,
    conditional_share: float | None = None,
) -> dict[str, Any]:
    """Generate, execute and time the workload; print the report (or one JSON object when
    ``json_out``) unless ``quiet``; return the figures. ``conditional_share``: the workload's
    share of conditional-order traffic (None: its default; 0: the stream without any)."""
    report = _measure(commands, seed, chunk_size, pin, conditional_share)
    if not quiet:
        print(json.dumps(report) if json_out else format_report(report))
    return report


def demo(commands: int = 200_000, seed: int = 1, json_out: bool = False) -> dict[str, Any]:
    """``raydex demo`` for now: the benchmark at a smaller size with a short human summary."""
    report = run(commands, seed, json_out=json_out, quiet=True)
    if json_out:
        print(json.dumps(report))
    else:
        print(format_summary(report))
        print()
        print(format_report(report))
    return report


# ---- measurement ------------------------------------------------------------------------------


def _measure(
    commands: int, seed: int, chunk_size: int, pin: bool, conditional_share: float | None = None
) -> dict[str, Any]:
    if commands < 1:
        raise ValueError("commands must be >= 1")
    cfg = WorkloadConfig(seed=seed, commands=commands, chunk_size=chunk_size)
    if conditional_share is not None:
        cfg = dataclasses.replace(cfg, conditional_share=conditional_share)
    wl = Workload(cfg)
    engine = Engine()
    books = [BareBook() for _ in MARKETS]
    lat = array("q", bytes(8 * commands))
    codes = array("l", bytes(array("l").itemsize * commands))
    out: list[Any] = []
    pc = time.perf_counter_ns
    tally = _Tally()
    engine_ns = bare_ns = gen_ns = bare_ops = i = 0
    engine_harness_ns = bare_harness_ns = 0
    neighbour = _Neighbour()
    with _pinned(pin) as cpu:
        t = pc()
        setup = wl.setup()
        gen_ns += pc() - t
        setup_codes = Counter(
            engine.execute(cmd, now, out)
            for cmd, now in zip(setup.commands, setup.now_ms, strict=True)
        )
        out.clear()
        chunks = wl.chunks()
        while True:
            t = pc()
            chunk = next(chunks, None)
            gen_ns += pc() - t
            if chunk is None:
                break
            e_ns, b_ns, eh_ns, bh_ns = _time_chunk(engine, books, chunk, lat, codes, i, out)
            engine_ns += e_ns
            bare_ns += b_ns
            engine_harness_ns += eh_ns
            bare_harness_ns += bh_ns
            bare_ops += len(chunk.bare_ops)
            tally.add(chunk.commands, lat[i : i + len(chunk.commands)], out)
            i += len(chunk.commands)
            out.clear()
            del chunk
        timer_ns = _timer_overhead_ns(lat)
        t = pc()
        state_hash = engine.state_hash()
        hash_ns = pc() - t
        try:
            engine.validate_internal_state()
            valid, invalid_reason = True, ""
        except InvariantViolation as e:
            valid, invalid_reason = False, str(e) or type(e).__name__
    engine_s = engine_ns / 1e9
    bare_s = bare_ns / 1e9
    hist = tally.overall()
    pct = {q: round(hist.percentile(q) / 1000, 2) for q in (0.5, 0.9, 0.99, 0.999)}
    cps = commands / engine_s if engine_s else 0.0
    ratio = engine_s / bare_s if bare_s else 0.0
    engine_h = engine_harness_ns / 1e9
    bare_h = bare_harness_ns / 1e9
    net = (engine_s - engine_h) / (bare_s - bare_h) if bare_s > bare_h else 0.0
    return {
        "commands": commands,
        "setup_commands": len(setup.commands),
        "setup_codes": _named(setup_codes),
        "seed": seed,
        "conditional_share": cfg.conditional_share,
        "commands_per_s": round(cps, 1),
        "engine_seconds": round(engine_s, 4),
        "p50_us": pct[0.5],
        "p90_us": pct[0.9],
        "p99_us": pct[0.99],
        "p999_us": pct[0.999],
        "max_us": round(hist.max / 1000, 2),
        "mean_us": round(sum(lat) / commands / 1000, 2),
        # What the two perf_counter_ns calls around a command add to its measured latency.
        "timer_overhead_us": round(timer_ns / 1000, 3),
        "bare_book_ops": bare_ops,
        "bare_book_seconds": round(bare_s, 4),
        "bare_book_ops_per_s": round(bare_ops / bare_s if bare_s else 0.0, 1),
        "ratio_engine_vs_bare": round(ratio, 2),
        # Each timed loop is interpreted Python around its calls; the same loops around calls
        # that do nothing (``_engine_loop``, ``_bare_loop``) measure that harness, and the
        # ratio of what is left is the engine's work over the bare book's alone.
        "harness_seconds": {"engine": round(engine_h, 4), "bare_book": round(bare_h, 4)},
        "ratio_without_harness": round(net, 2),
        "codes": _named(Counter(codes)),
        "by_type": tally.by_type(),
        "trades": tally.trades,
        "liquidations": tally.liquidations,
        "deleverages": tally.deleverages,
        "volume_usd": {
            MARKETS[m].symbol: round(v / 1e6, 2) for m, v in sorted(tally.volume.items())
        },
        "events": tally.events,
        "state_hash": state_hash.hex(),
        "state_hash_ms": round(hash_ns / 1e6, 1),
        "valid": valid,
        "invalid_reason": invalid_reason,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "generation_seconds": round(gen_ns / 1e9, 2),
        "pinned_cpu": cpu,
        # Other processes on a shared host inflate the tail and the ratio (module docstring).
        "neighbour": neighbour.report(),
        "gc": "collected+frozen+disabled around each timed chunk",
        "python": platform.python_version(),
        "goals": {
            "commands_per_s": GOAL_COMMANDS_PER_S,
            "commands_per_s_met": cps >= GOAL_COMMANDS_PER_S,
            "ratio_engine_vs_bare": GOAL_RATIO,
            "ratio_met": 0 < ratio <= GOAL_RATIO,
        },
    }


def _time_chunk(
    engine: Engine,
    books: list[BareBook],
    chunk: Chunk,
    lat: array[int],
    codes: array[int],
    i: int,
    out: list[Any],
) -> tuple[int, int, int, int]:
    """Run one chunk through the engine (each command timed into ``lat[i:]``, its code into
    ``codes[i:]``), then its bare ops through ``books``; return both loops' wall times (ns), and
    then the same two loops' around calls that do nothing (the harness: see ``_engine_loop``).

    The engine runs as the sequencer runs it: ``execute_into`` writes the events as block bytes,
    taken every ``BLOCK_COMMANDS`` commands as a block closes (inside the chunk's time, outside
    the commands' own); after the timed loops they are decoded into ``out`` for the tally."""
    bodies: list[tuple[int, bytes]] = []
    execute, take = engine.execute_into, engine.take_deltas
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        engine_ns = _engine_loop(execute, take, chunk, lat, codes, i, bodies)
        bare_ns = _bare_loop([b.add for b in books], [b.cancel for b in books], chunk)
        # then the harness alone, after the measured loops (into scratch arrays)
        null = NullBook()
        scratch = array("q", bytes(8 * len(chunk.commands)))
        engine_harness_ns = _engine_loop(
            null.execute_into, null.take_deltas, chunk, scratch, array("q", scratch), 0, []
        )
        bare_harness_ns = _bare_loop([null.add] * len(books), [null.cancel] * len(books), chunk)
    finally:
        gc.enable()
        gc.unfreeze()
    for count, body in bodies:
        if count:
            out.extend(decode_body(body, count))
    return engine_ns, bare_ns, engine_harness_ns, bare_harness_ns


def _engine_loop(
    execute: Callable[[Any, int], Any],
    take: Callable[[], Any],
    chunk: Chunk,
    lat: array[int],
    codes: array[int],
    i: int,
    bodies: list[Any],
) -> int:
    """The engine's timed loop (ns). Around ``NullBook``'s calls (compiled, doing nothing) the
    same loop measures the harness itself: the interpreted loop, the call, the two
    ``perf_counter_ns`` calls and the array stores per command."""
    pc = time.perf_counter_ns
    t_start = pc()
    for cmd, now in zip(chunk.commands, chunk.now_ms, strict=True):
        t0 = pc()
        code = execute(cmd, now)
        lat[i] = pc() - t0
        codes[i] = code
        i += 1
        if not i % BLOCK_COMMANDS:
            bodies.append(take())
    bodies.append(take())
    return pc() - t_start


def _bare_loop(
    adds: list[Callable[[int, int, int, int], Any]],
    cancels: list[Callable[[int], Any]],
    chunk: Chunk,
) -> int:
    """The bare book's timed loop (ns); around ``NullBook``'s calls, its harness: the
    interpreted loop, unpacking each op, the call."""
    pc = time.perf_counter_ns
    t_start = pc()
    for m, kind, oid, is_ask, price, size in chunk.bare_ops:
        if kind:
            cancels[m](oid)
        else:
            adds[m](oid, is_ask, price, size)
    return pc() - t_start


class _Neighbour:
    """What else ran on the host from its creation to :meth:`report` (module docstring)."""

    def __init__(self) -> None:
        self._load = os.getloadavg()[0]
        self._ticks = _ticks()
        self._own = _own_cpu_s()

    def report(self) -> dict[str, Any]:
        """``load_avg_1m`` [start, end]; ``cpus_busy`` (all processes) and ``cpus_busy_others``
        (without this one) over the run, in CPUs (0 .. ``cpus``); None where ``/proc/stat`` is
        not readable."""
        ticks = _ticks()
        own = _own_cpu_s() - self._own
        busy = others = None
        if ticks is not None and self._ticks is not None:
            d_busy = ticks[0] - self._ticks[0]
            d_total = ticks[1] - self._ticks[1]
            if d_total > 0:
                cpus = os.cpu_count() or 1
                wall = d_total / cpus / _CLK_TCK  # seconds of the window (ticks per CPU)
                busy = d_busy / d_total * cpus
                others = max(0.0, busy - own / wall) if wall > 0 else busy
        return {
            "load_avg_1m": [round(self._load, 2), round(os.getloadavg()[0], 2)],
            "cpus": os.cpu_count(),
            "cpus_busy": None if busy is None else round(busy, 2),
            "cpus_busy_others": None if others is None else round(others, 2),
        }


_CLK_TCK: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _ticks() -> tuple[int, int] | None:
    """(busy, total) ticks of all CPUs (``/proc/stat``), or None where unreadable."""
    try:
        busy, total, _steal, _irq = machine_ticks()
    except (OSError, RuntimeError):
        return None
    return busy, total


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def _named(codes: Counter[int]) -> dict[str, int]:
    return {_code_name(c): n for c, n in sorted(codes.items())}


class _Tally:
    """What a chunk's events and latencies say: trades, liquidations, volume per market (micro-
    USDC), events per type, latencies per command type. Runs after a chunk's timed loops."""

    def __init__(self) -> None:
        self.trades = 0
        self.liquidations = 0
        self.deleverages = 0
        self.volume: dict[int, int] = {}
        self.events: dict[str, int] = {}
        self._hist: dict[str, Histogram] = {}
        self._ns: dict[str, int] = {}  # timed ns per command type, summed
        self._mult = [notional_multiplier(m.price_decimals, m.size_decimals) for m in MARKETS]

    def add(self, commands: list[Any], lat: array[int], events: list[Any]) -> None:
        hists = self._hist
        sums = self._ns
        for cmd, ns in zip(commands, lat, strict=True):
            name = type(cmd).__name__
            h = hists.get(name)
            if h is None:
                h = hists[name] = Histogram()
                sums[name] = 0
            h.record(ns)
            sums[name] += ns
        by_type: Counter[type] = Counter(map(type, events))
        for t, n in by_type.items():
            self.events[t.__name__] = self.events.get(t.__name__, 0) + n
        self.liquidations += by_type.get(PositionLiquidated, 0)
        self.deleverages += by_type.get(PositionDeleveraged, 0)
        if not by_type.get(TradeExecuted):
            return
        vol = self.volume
        mult = self._mult
        for e in events:
            if type(e) is TradeExecuted:
                self.trades += 1
                m = e.market_index
                vol[m] = vol.get(m, 0) + e.price * e.size * mult[m]

    def overall(self) -> Histogram:
        merged = Histogram()
        for h in self._hist.values():
            merged.merge(h)
        return merged

    def by_type(self) -> dict[str, dict[str, float]]:
        """Count, p50, p99 and max (us) per command type, most frequent first, and the type's
        share of the timed engine time (``time_share``: where the engine's seconds went)."""
        timed = sum(self._ns.values()) or 1
        return {
            name: {
                "count": h.total,
                "time_share": round(self._ns[name] / timed, 4),
                "p50_us": round(h.percentile(0.5) / 1000, 2),
                "p99_us": round(h.percentile(0.99) / 1000, 2),
                "max_us": round(h.max / 1000, 2),
            }
            for name, h in sorted(self._hist.items(), key=lambda kv: -kv[1].total)
        }


def _timer_overhead_ns(scratch: array[int], n: int = 10_000) -> float:
    """Median latency the harness records for an empty command (the timer pair, the store)."""
    pc = time.perf_counter_ns
    n = min(n, len(scratch))
    saved = scratch[:n]
    for k in range(n):
        t0 = pc()
        scratch[k] = pc() - t0
    median = sorted(scratch[:n])[n // 2]
    scratch[:n] = saved
    return float(median)


def _code_name(code: int) -> str:
    try:
        return str(ResultCode(code).name)
    except ValueError:
        return str(code)


@contextmanager
def _pinned(enabled: bool) -> Iterator[int | None]:
    """Pin every thread of this process to one allowed CPU (the highest-numbered: CPU 0 takes
    most interrupts); yield it, or None when pinning is off or refused; restore on exit."""
    if not enabled or not hasattr(os, "sched_setaffinity"):
        yield None
        return
    before = os.sched_getaffinity(0)
    cpu = max(before)
    try:
        pin_all_threads({cpu})
    except (OSError, ValueError) as e:
        print(f"raydex bench: cannot pin to CPU {cpu} ({e}); running unpinned", file=sys.stderr)
        yield None
        return
    try:
        yield cpu
    finally:
        with suppress(OSError, ValueError):
            pin_all_threads(before)


# ---- human output -------------------------------------------------------------------------------


def format_report(r: dict[str, Any]) -> str:
    goals = r["goals"]
    lines = [
        f"engine benchmark: {r['commands']:,} commands (seed {r['seed']}, "
        f"+{r['setup_commands']:,} setup, conditional orders {r['conditional_share']:.1%}), "
        f"CPU {r['pinned_cpu']}, Python {r['python']}",
        f"  engine     {r['commands_per_s']:>12,.0f} commands/s   {r['engine_seconds']:.2f} s   "
        f"(goal {GOAL_COMMANDS_PER_S:,}: {'met' if goals['commands_per_s_met'] else 'NOT met'})",
        f"  bare book  {r['bare_book_ops_per_s']:>12,.0f} ops/s        "
        f"{r['bare_book_seconds']:.2f} s   ({r['bare_book_ops']:,} ops)",
        f"  engine / bare book time: {r['ratio_engine_vs_bare']:.2f}x   "
        f"(goal <= {GOAL_RATIO}: {'met' if goals['ratio_met'] else 'NOT met'})",
        f"  without either loop's harness ({r['harness_seconds']['engine']:.2f} s / "
        f"{r['harness_seconds']['bare_book']:.2f} s): {r['ratio_without_harness']:.2f}x",
        f"  latency us: p50 {r['p50_us']}  p90 {r['p90_us']}  p99 {r['p99_us']}  "
        f"p99.9 {r['p999_us']}  max {r['max_us']}  mean {r['mean_us']}  "
        f"(timer {r['timer_overhead_us']})",
        f"  peak RSS {r['peak_rss_mb']} MB; workload generation {r['generation_seconds']} s "
        f"(untimed)",
        _neighbour_line(r["neighbour"]),
        f"  trades {r['trades']:,}; liquidations {r['liquidations']:,}; deleverages "
        f"{r['deleverages']:,}; state valid: {r['valid']}; state hash {r['state_hash'][:16]}...",
        "  result codes:",
    ]
    total = r["commands"]
    for name, n in sorted(r["codes"].items(), key=lambda kv: -kv[1]):
        lines.append(f"    {name:<32}{n:>10,}  {n / total:7.2%}")
    lines.append(
        "  by command type:        count     share    p50 us    p99 us    max us   of the time"
    )
    for name, t in r["by_type"].items():
        lines.append(
            f"    {name:<18}{t['count']:>10,}  {t['count'] / total:7.2%}"
            f"{t['p50_us']:>10.1f}{t['p99_us']:>10.1f}{t['max_us']:>10.1f}"
            f"{t['time_share']:>13.1%}"
        )
    return "\n".join(lines)


def _neighbour_line(n: dict[str, Any]) -> str:
    load = n["load_avg_1m"]
    line = f"  neighbour: load average {load[0]} -> {load[1]} on {n['cpus']} CPUs"
    if n["cpus_busy"] is not None:
        line += (
            f"; CPUs busy over the run {n['cpus_busy']:.2f} of {n['cpus']}, "
            f"{n['cpus_busy_others']:.2f} of them other processes"
        )
    return line


def format_summary(r: dict[str, Any]) -> str:
    lines = [
        "raydex demo: the engine over a generated market",
        f"  {r['commands']:,} commands after {r['setup_commands']:,} setup commands "
        f"(8 markets, accounts funded, API keys registered)",
        f"  trades {r['trades']:,}; liquidations {r['liquidations']:,}; "
        f"deleverages {r['deleverages']:,}",
        "  volume per market (USD):",
    ]
    for sym, v in r["volume_usd"].items():
        lines.append(f"    {sym:<6}{v:>18,.2f}")
    lines.append(f"  final state hash {r['state_hash']}")
    if r["valid"]:
        lines.append("  validate_internal_state(): passed")
    else:
        lines.append(f"  validate_internal_state(): FAILED: {r['invalid_reason']}")
    return "\n".join(lines)
