"""Loadtest-only instrumentation of an API replica, switched on by deploying this actor class.

``InstrumentedReplicaActor`` is a ``ReplicaActor`` (same boot, same service, same code on every
path) that hands the service a probe and a middleware through ``ReplicaActor.hooks()``:

- the probe (a ``StepProbe``) gets each applied block's step times as the service measured them
  (``decode``, ``cache_update``, ``fanout``, and the three on the thread's CPU clock,
  ``apply_cpu``), each dry-run's time and each executed batch, into histograms, the flight recorder
  and, under a traced request, spans;
- the middleware opens an OpenTelemetry span for requests carrying a ``traceparent`` header.

When an apply or a dry-run exceeds its threshold, the flight recorder's last ``window_s`` seconds
are captured (a list copy) and written to ``<out_dir>/flight-<replica>-<n>.json`` (Chrome trace;
rate-limited, capped) by the last ``loadtest_stats()``, after the timed window, so their cost is
not charged to the window the ledger measures. ``loadtest_stats()`` returns mergeable histogram
snapshots, the GC figures and the dump paths.

Invariant: nothing here re-implements the replica; it only observes what the service reports.
Cost per block: three histogram records and a few flight-recorder appends, after the apply was
timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from raydex.actors.replica import Applied, ReplicaActor, ReplicaHooks
from raydex.actors.replica.ws import NATIVE_PATHS
from raydex.cluster import hugepages
from raydex.codecs import Block, PositionLiquidated, TxOutcome

from ..flight import Capture, FlightRecorder, SlowTrigger
from ..gcstats import UNTRACKING
from ..hist import Histogram

__all__ = ["Instrumentation", "InstrumentedReplicaActor"]


@dataclasses.dataclass(frozen=True, slots=True)
class Instrumentation:
    """What to switch on; thresholds trade dump count for sensitivity."""

    out_dir: str
    apply_slow_us: int = 2_000
    dry_run_slow_us: int = 1_000
    window_s: float = 3.0
    max_dumps: int = 5
    trace: bool = True


class _Probe:
    """The per-replica timing state (histograms, flight recorder, trigger, tracer); the replica's
    ``StepProbe``."""

    def __init__(self, name: str, cfg: Instrumentation) -> None:
        self.name = name
        self.cfg = cfg
        self.hists = {k: Histogram() for k in ("apply", "apply_cpu", "decode", "cache_update",
                                                "fanout", "dry_run")}  # fmt: skip
        self.flight = FlightRecorder(window_s=cfg.window_s)
        self.trigger = SlowTrigger(
            {"apply": cfg.apply_slow_us * 1000, "dry_run": cfg.dry_run_slow_us * 1000},
            max_dumps=cfg.max_dumps,
        )
        self.dumps: list[str] = []
        #: captured on a slow event, written after the timed window (:meth:`write_dumps`)
        self.captured: list[tuple[Path, Capture]] = []
        self.liquidations = 0
        self.tracer: Any = None
        #: traced requests being served now (``_request_span``): while none is, a dry-run or an
        #: execute has no span to hang under and ``_child_span`` returns at once
        self.traced = 0
        self.provider: Any = None
        if cfg.trace:
            from ..tracing import file_tracer

            self.tracer, self.provider = file_tracer(
                Path(cfg.out_dir) / f"spans-{name}.jsonl", name
            )

    def slow(self, what: str, dur_ns: int) -> None:
        if self.trigger.observe(what, dur_ns):
            path = Path(self.cfg.out_dir) / f"flight-{self.name}-{self.trigger.fired}.json"
            reason = f"{what} took {dur_ns / 1000:.0f} µs"
            self.captured.append((path, self.flight.capture(self.name, reason)))
            self.dumps.append(str(path))

    def write_dumps(self) -> None:
        """Write the captured dumps (a thread: the event loop keeps serving meanwhile)."""
        captured, self.captured = self.captured, []
        for path, shot in captured:
            shot.write(path)

    # ---- StepProbe ------------------------------------------------------------------------------

    def on_apply(
        self,
        block: Block,
        applied: Applied,
        decode_ns: int,
        cache_ns: int,
        fanout_ns: int,
        cpu_ns: int,
    ) -> None:
        total = decode_ns + cache_ns + fanout_ns
        w0 = time.time_ns() - total  # the probe runs right after the last step
        h = self.hists
        h["apply"].record(total)
        h["apply_cpu"].record(cpu_ns)
        h["decode"].record(decode_ns)
        h["cache_update"].record(cache_ns)
        h["fanout"].record(fanout_ns)
        if not applied.duplicate:
            self.liquidations += sum(type(e) is PositionLiquidated for e in block.events)
        record = self.flight.record
        record("apply", w0, total, "apply", {"seq": applied.seq, "markets": len(applied.books)})
        record("decode", w0, decode_ns, "apply")
        record("cache_update", w0 + decode_ns, cache_ns, "apply")
        record("fanout", w0 + decode_ns + cache_ns, fanout_ns, "apply")
        self.slow("apply", total)

    def on_dry_run(self, tx: Any, code: int, dur_ns: int) -> None:
        w0 = time.time_ns() - dur_ns
        self.hists["dry_run"].record(dur_ns)
        self.flight.record(
            "dry_run", w0, dur_ns, "requests", {"code": code, "type": type(tx).__name__}
        )
        self._child_span("replica.dry_run", w0, w0 + dur_ns, {"raydex.code": code})
        self.slow("dry_run", dur_ns)

    def on_execute(
        self, txs: Sequence[Any], outcomes: Sequence[TxOutcome], sequenced_ns: int, total_ns: int
    ) -> None:
        end = time.time_ns()
        top = max((o.seq for o in outcomes), default=0)
        attrs = {
            "raydex.txs": len(txs),
            "raydex.seq": top,
            "raydex.sequenced_us": sequenced_ns // 1000,
        }
        self._child_span("replica.submit", end - total_ns, end, attrs)

    def _child_span(self, name: str, start: int, end: int, attrs: dict[str, Any]) -> None:
        """A finished span under the current one, if a traced request is being served."""
        if not self.traced or self.tracer is None:
            return  # the common case (1 request in --sample-every is traced): no lookup at all
        from opentelemetry import trace

        if trace.get_current_span().is_recording():
            span = self.tracer.start_span(name, start_time=start)
            for k, v in attrs.items():
                span.set_attribute(k, v)
            span.end(end_time=end)


def _request_span(probe: _Probe) -> Any:
    """A ``replica.<name>`` span under the client's trace context (``traceparent``), or nothing
    for an untraced request; the fast lane's hook and the middleware's body."""
    from ..tracing import extract_context

    @contextlib.contextmanager
    def traced(name: str, ctx: Any) -> Iterator[None]:
        probe.traced += 1
        try:
            with probe.tracer.start_as_current_span(f"replica.{name}", context=ctx):
                yield
        finally:
            probe.traced -= 1

    def span(name: str, headers: Any) -> contextlib.AbstractContextManager[Any]:
        ctx = extract_context(headers) if probe.tracer is not None else None
        if ctx is None or probe.tracer is None:
            return contextlib.nullcontext()
        return traced(name, ctx)

    return span


def _tracing_middleware(probe: _Probe) -> Any:
    span = _request_span(probe)

    @web.middleware
    async def mw(request: web.Request, handler: Any) -> web.StreamResponse:
        with span(request.path.rsplit("/", 1)[-1], request.headers):
            return await handler(request)  # type: ignore[no-any-return]

    return mw


class InstrumentedReplicaActor(ReplicaActor):  # type: ignore[misc]
    """``ReplicaActor`` plus the loadtest instrumentation (see the module docstring). Extra
    constructor argument: an ``Instrumentation``."""

    def __init__(self, *args: Any, instrumentation: Instrumentation | None = None) -> None:
        self.probe = _Probe(args[0].name, instrumentation or Instrumentation("/tmp/raydex-lt"))
        #: GC collections and pause snapshots per generation at the last reset
        self._gc_base: tuple[list[int], list[dict[int, int]], list[int]] | None = None
        super().__init__(*args)

    def hooks(self) -> ReplicaHooks:
        return ReplicaHooks(
            self.probe, (_tracing_middleware(self.probe),), _request_span(self.probe)
        )

    async def loadtest_stats(self, reset: bool = False) -> dict[str, Any]:
        """Histogram snapshots (ns buckets), GC figures, slow events and flight dumps, all since
        the last ``reset=True`` call (the loadtest resets right before its timed window). A call
        without ``reset`` (the loadtest's last, after the window) first writes the flight dumps
        captured so far, so their files exist when it returns."""
        p = self.probe
        if not reset and p.captured:
            await asyncio.get_running_loop().run_in_executor(None, p.write_dumps)
        mon = self.runtime.monitor
        empty: tuple[list[int], list[dict[int, int]], list[int]] = ([0] * 3, [{}, {}, {}], [0] * 3)
        base = self._gc_base or empty
        gens: dict[str, Any] = {}
        pauses = Histogram()
        for g in range(3):
            since = _minus(mon.pauses[g].snapshot(), base[1][g])
            pauses.merge(since)
            gens[f"gen{g}"] = {
                "collections": mon.collections[g] - base[0][g],
                "collected": mon.collected[g] - base[2][g],
                "pause_us": _with_max(since).summary_us(),
            }
        out = {
            "hists": {k: h.snapshot() for k, h in p.hists.items()},
            "gc": {
                **gens,
                "pause_hist": pauses.snapshot(),
                "thresholds": list(gc.get_threshold()),
                "frozen": gc.get_freeze_count(),
                "untracking": UNTRACKING,
                "scheduled_full_collections": self.runtime.gc.scheduled,
                "thawed_collections": self.runtime.gc.thawed,
                # (pause ns, objects freed) of the last whole-heap collection, if any
                "last_thaw": self.runtime.gc.last_thaw,
            },
            # the apply's C loops in this replica process (False: the Python fallback ran)
            "native": dict(NATIVE_PATHS),
            # its heap's pages now (None: not planned on huge pages)
            "heap": hugepages.report() if self.runtime.huge_pages else None,
            "slow_events": p.trigger.seen_slow,
            "flight_dumps": list(p.dumps),
            "liquidations": p.liquidations,
        }
        if reset:
            for h in p.hists.values():
                h.reset()
            p.liquidations = 0
            self._gc_base = (
                list(mon.collections),
                [h.snapshot() for h in mon.pauses],
                list(mon.collected),
            )
        if p.provider is not None:
            p.provider.force_flush()
        return out


def _minus(now: dict[int, int], base: dict[int, int]) -> dict[int, int]:
    return {b: c - base.get(b, 0) for b, c in now.items() if c > base.get(b, 0)}


def _with_max(counts: dict[int, int]) -> Histogram:
    h = Histogram()
    h.merge(counts)
    h.max = max(counts, default=0)
    return h
