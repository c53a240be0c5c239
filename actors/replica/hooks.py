"""What a measurement may plug into a replica without copying it: a step probe and middlewares.

::

    ReplicaService(config, ..., hooks=ReplicaHooks(probe, middlewares))
        apply loop:  decode ─► state.apply_block ─► fanout.publish ─► probe.on_apply(...)
        app:         dry_run(tx) ──────────────────────────────────► probe.on_dry_run(...)
                     execute_txs (sequenced, confirmed) ────────────► probe.on_execute(...)
                     every request ─► error_middleware ─► *middlewares ─► handler
                     fast lane (sendTx*) ─► request_span(name, headers) ─► fast_send

Semantics: the probe is told *after* each step, with the durations the service measured anyway
(``perf_counter_ns`` deltas), so a probe never changes what it measures and the production path
has no second copy. Probe methods are synchronous and run on the replica's event loop, inside the
apply loop or the request's task (so an OpenTelemetry span opened by a middleware is current in
``on_dry_run`` / ``on_execute``); they must not block and must not raise (an exception in
``on_apply`` ends the apply loop like any other bug in it).

Cost: with no probe (``ReplicaHooks()``, the production default) each hook is one ``is None``
test; timing the three apply steps apart costs two ``perf_counter_ns`` calls per block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp.typedefs import Middleware

from raydex.codecs import Block, TxOutcome

from .cache import Applied
from .http import RequestSpan

__all__ = ["Middleware", "ReplicaHooks", "StepProbe"]


class StepProbe(Protocol):
    """Told about each step of the replica's work, after it happened (durations in ns)."""

    def on_apply(
        self,
        block: Block,
        applied: Applied,
        decode_ns: int,
        cache_ns: int,
        fanout_ns: int,
        cpu_ns: int,
    ) -> None:
        """One block went through decode, ``ReplicaState.apply_block`` (cache update) and
        ``Fanout.publish`` (``fanout_ns`` is 0 for a replayed block, which is not published);
        ``cpu_ns`` is the three on the thread's CPU clock (the rest of their wall time the thread
        was off the CPU)."""

    def on_dry_run(self, tx: Any, code: int, dur_ns: int) -> None:
        """One tx was dry-run against the caches with result ``code``."""

    def on_execute(
        self, txs: Sequence[Any], outcomes: Sequence[TxOutcome], sequenced_ns: int, total_ns: int
    ) -> None:
        """``txs`` came back from the sequencer after ``sequenced_ns`` and their block was applied
        here after ``total_ns`` (both from the moment they were handed to the micro-batcher)."""


@dataclass(frozen=True, slots=True)
class ReplicaHooks:
    """A replica's measurement hooks. The default (no probe, no middleware) is production."""

    probe: StepProbe | None = None
    #: run after the replica's own error middleware, in order, around every handler
    middlewares: tuple[Middleware, ...] = ()
    #: the fast lane's counterpart of a middleware (fastlane.py): a context around a request that
    #: carries ``traceparent``, given its name (``sendTx``) and those headers
    request_span: RequestSpan | None = None
