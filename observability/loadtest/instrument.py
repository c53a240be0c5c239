"""Loadtest-only instrumentation of an API replica, switched on by deploying this actor class.

``InstrumentedReplicaActor`` is a ``ReplicaActor`` (same boot, same service) that, before the
service starts, wraps three things on that one instance:

- the apply step (``ReplicaService._apply``) split into ``decode`` (the hot codec),
  ``cache_update`` (``ReplicaState.apply_block`` on the decoded block) and ``fanout``
  (``Fanout.publish``); each step goes to a histogram and to the flight recorder;
- ``ReplicaState.dry_run``: its duration, to a histogram and the flight recorder;
- the app gets a middleware that opens an OpenTelemetry span for requests carrying a
  ``traceparent`` header (sampled txs), with the dry-run and the sequencer round trip as children.

When an apply or a dry-run exceeds its threshold, the flight recorder's last ``window_s`` seconds
are written to ``<out_dir>/flight-<replica>-<n>.json`` (Chrome trace; rate-limited, capped).
``loadtest_stats()`` returns mergeable histogram snapshots, the GC figures and the dump paths.

Invariant: the wrapped apply does exactly what ``ReplicaService._apply`` does (decode, apply,
publish unless duplicate, record, release waiters), only timed in steps; a change to that method
must be mirrored here (tests/integration/test_loadtest.py runs the whole stack through it).
Cost per block: three ``perf_counter_ns`` pairs and three flight-recorder appends (~3 µs).
"""

from __future__ import annotations

import dataclasses
import gc
import heapq
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from raydex.actors.replica import service as replica_mod
from raydex.actors.replica.app import fanout_of
from raydex.actors.replica.service import ReplicaActor, ReplicaService
from raydex.codecs import PositionLiquidated, decode_block

from ..flight import FlightRecorder, SlowTrigger
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
    """The per-replica timing state (histograms, flight recorder, trigger, tracer)."""

    def __init__(self, name: str, cfg: Instrumentation) -> None:
        self.name = name
        self.cfg = cfg
        self.hists = {k: Histogram() for k in ("apply", "decode", "cache_update", "fanout",
                                                "dry_run")}  # fmt: skip
        self.flight = FlightRecorder(window_s=cfg.window_s)
        self.trigger = SlowTrigger(
            {"apply": cfg.apply_slow_us * 1000, "dry_run": cfg.dry_run_slow_us * 1000},
            max_dumps=cfg.max_dumps,
        )
        self.dumps: list[str] = []
        self.liquidations = 0
        self.tracer: Any = None
        self.provider: Any = None
        if cfg.trace:
            from ..tracing import file_tracer

            self.tracer, self.provider = file_tracer(
                Path(cfg.out_dir) / f"spans-{name}.jsonl", name
            )

    def slow(self, what: str, dur_ns: int) -> None:
        if self.trigger.observe(what, dur_ns):
            path = Path(self.cfg.out_dir) / f"flight-{self.name}-{self.trigger.fired}.json"
            self.flight.dump(path, self.name, f"{what} took {dur_ns / 1000:.0f} µs")
            self.dumps.append(str(path))


def _timed_apply(svc: ReplicaService, probe: _Probe) -> Callable[[bytes], None]:
    hists = probe.hists
    h_apply, h_dec, h_cache, h_fan = (hists[k] for k in ("apply", "decode", "cache_update",
                                                          "fanout"))  # fmt: skip
    record = probe.flight.record

    def _apply(frame: bytes) -> None:
        w0 = time.time_ns()
        t0 = time.perf_counter_ns()
        blk = decode_block(frame)
        t1 = time.perf_counter_ns()
        applied = svc.state.apply_block(blk)
        if not applied.duplicate:
            probe.liquidations += sum(type(e) is PositionLiquidated for e in blk.events)
        t2 = time.perf_counter_ns()
        if svc.app is not None and not applied.duplicate:
            fanout_of(svc.app).publish(applied)
        t3 = time.perf_counter_ns()
        svc.apply_time.record(t3 - t0)
        svc.blocks_applied += 1
        h_apply.record(t3 - t0)
        h_dec.record(t1 - t0)
        h_cache.record(t2 - t1)
        h_fan.record(t3 - t2)
        args = {"seq": applied.seq, "markets": len(applied.books)}
        record("apply", w0, t3 - t0, "apply", args)
        record("decode", w0, t1 - t0, "apply")
        record("cache_update", w0 + (t1 - t0), t2 - t1, "apply")
        record("fanout", w0 + (t2 - t0), t3 - t2, "apply")
        seq = svc.state.seq
        waiters = svc._waiters
        while waiters and waiters[0][0] <= seq:
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(None)
        probe.slow("apply", t3 - t0)

    return _apply


def _timed_dry_run(svc: ReplicaService, probe: _Probe) -> Callable[[Any, int], int]:
    inner = svc.state.dry_run
    h = probe.hists["dry_run"]
    record = probe.flight.record

    def dry_run(tx: Any, now_ms: int) -> int:
        w0 = time.time_ns()
        t0 = time.perf_counter_ns()
        code: int = inner(tx, now_ms)
        dt = time.perf_counter_ns() - t0
        h.record(dt)
        record("dry_run", w0, dt, "requests", {"code": code, "type": type(tx).__name__})
        if probe.tracer is not None:
            from opentelemetry import trace

            parent = trace.get_current_span()
            if parent.is_recording():
                span = probe.tracer.start_span("replica.dry_run", start_time=w0)
                span.set_attribute("raydex.code", code)
                span.end(end_time=w0 + dt)
        probe.slow("dry_run", dt)
        return code

    return dry_run


def _traced_submit(
    inner: Callable[[list[Any]], Awaitable[Any]], probe: _Probe
) -> Callable[[list[Any]], Awaitable[Any]]:
    async def submit(txs: list[Any]) -> Any:
        from opentelemetry import trace

        if probe.tracer is None or not trace.get_current_span().is_recording():
            return await inner(txs)
        with probe.tracer.start_as_current_span("replica.submit") as span:
            span.set_attribute("raydex.txs", len(txs))
            outcomes = await inner(txs)
            span.set_attribute("raydex.seq", max((o.seq for o in outcomes), default=0))
            return outcomes

    return submit


def _tracing_middleware(probe: _Probe) -> Any:
    from ..tracing import extract_context

    @web.middleware
    async def mw(request: web.Request, handler: Any) -> web.StreamResponse:
        ctx = extract_context(request.headers) if probe.tracer is not None else None
        if ctx is None:
            return await handler(request)  # type: ignore[no-any-return]
        with probe.tracer.start_as_current_span(f"replica.{request.path.rsplit('/', 1)[-1]}",
                                                context=ctx):  # fmt: skip
            return await handler(request)  # type: ignore[no-any-return]

    return mw


class InstrumentedReplicaActor(ReplicaActor):  # type: ignore[misc]
    """``ReplicaActor`` plus the loadtest instrumentation (see the module docstring). Extra
    constructor argument: an ``Instrumentation``."""

    def __init__(self, *args: Any, instrumentation: Instrumentation | None = None) -> None:
        self.probe = _Probe(args[0].name, instrumentation or Instrumentation("/tmp/raydex-lt"))
        #: GC collections and pause snapshots per generation at the last reset
        self._gc_base: tuple[list[int], list[dict[int, int]]] | None = None
        super().__init__(*args)

    async def _start(self) -> int:
        self.runtime.before_boot()
        self.service = svc = ReplicaService(
            self.config,
            self._fetch_snapshot,
            self._fetch_blocks,
            commitments=self if self.committer_name else None,
        )
        probe = self.probe
        svc._apply = _timed_apply(svc, probe)  # type: ignore[method-assign]
        svc.state.dry_run = _timed_dry_run(svc, probe)  # type: ignore[method-assign]
        svc.submit = _traced_submit(svc.submit, probe)  # type: ignore[method-assign]
        original = replica_mod.build_app

        def build_app(*a: Any, **kw: Any) -> web.Application:
            app: web.Application = original(*a, **kw)
            app.middlewares.append(_tracing_middleware(probe))
            return app

        # This process hosts only this actor: the module-level swap reaches only its own app.
        replica_mod.build_app = build_app  # type: ignore[assignment]
        port: int = await svc.start()
        self.runtime.after_boot()
        return port

    async def loadtest_stats(self, reset: bool = False) -> dict[str, Any]:
        """Histogram snapshots (ns buckets), GC figures, slow events and flight dumps, all since
        the last ``reset=True`` call (the loadtest resets right before its timed window)."""
        p = self.probe
        mon = self.runtime.monitor
        empty: tuple[list[int], list[dict[int, int]]] = ([0, 0, 0], [{}, {}, {}])
        base = self._gc_base or empty
        gens: dict[str, Any] = {}
        pauses = Histogram()
        for g in range(3):
            since = _minus(mon.pauses[g].snapshot(), base[1][g])
            pauses.merge(since)
            gens[f"gen{g}"] = {
                "collections": mon.collections[g] - base[0][g],
                "pause_us": _with_max(since).summary_us(),
            }
        out = {
            "hists": {k: h.snapshot() for k, h in p.hists.items()},
            "gc": {
                **gens,
                "pause_hist": pauses.snapshot(),
                "thresholds": list(gc.get_threshold()),
                "frozen": gc.get_freeze_count(),
                "scheduled_full_collections": self.runtime.gc.scheduled,
            },
            "slow_events": p.trigger.seen_slow,
            "flight_dumps": list(p.dumps),
            "liquidations": p.liquidations,
        }
        if reset:
            for h in p.hists.values():
                h.reset()
            p.liquidations = 0
            self._gc_base = (list(mon.collections), [h.snapshot() for h in mon.pauses])
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
