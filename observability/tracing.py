"""OpenTelemetry spans for sampled txs, across process and actor boundaries, exported to a file.

::

    load generator                          API replica (loadtest-instrumented)
    client.send  [planned .. answered] ──traceparent──► replica.sendTx ─► replica.dry_run
                                                                       └─► replica.submit
                                                                           (sequencer round trip
                                                                            + apply wait; seq)

Each process owns one ``TracerProvider`` (``file_tracer``) whose ``BatchSpanProcessor`` writes
finished spans as JSON lines to its file; the W3C ``traceparent`` header carries the context from
the client into the replica, so one trace shows a tx from its planned send time to its answer.
Only sampled txs carry the header and the replica opens spans only for those, so unsampled traffic
pays one dict lookup. Cost: tens of µs per span (the SDK), exported off the calling thread.
Loadtest only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = ["JsonLinesExporter", "file_tracer", "inject_headers", "extract_context"]

_PROPAGATOR = TraceContextTextMapPropagator()


class JsonLinesExporter(SpanExporter):
    """Appends each finished span as one JSON line to ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = self.path.open("a")
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._fh is None:
            return SpanExportResult.FAILURE
        for s in spans:
            self._fh.write(s.to_json(indent=None) + "\n")
        self._fh.flush()
        self.exported += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        if self._fh is not None:
            self._fh.flush()
        return True


def file_tracer(path: str | os.PathLike[str], service: str) -> tuple[trace.Tracer, TracerProvider]:
    """A tracer (not the global one) exporting to ``path``; call ``provider.shutdown()`` at the
    end to flush."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(
        BatchSpanProcessor(JsonLinesExporter(path), schedule_delay_millis=500)
    )
    return provider.get_tracer("raydex.loadtest"), provider


def inject_headers(span: trace.Span) -> dict[str, str]:
    """The ``traceparent`` header naming ``span`` as the parent."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier


def extract_context(headers: Any) -> Any:
    """The context a request's ``traceparent`` header carries (None when absent)."""
    if "traceparent" not in headers:
        return None
    return _PROPAGATOR.extract({"traceparent": headers["traceparent"]})
