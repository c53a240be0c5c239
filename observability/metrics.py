"""Always-on metrics: hot paths bump plain ints and local histograms; a periodic task exports.

::

    hot path (apply, dry-run, submit, close) ──int += 1 / Histogram.record──► Recorder sources
                                                                                 │ every interval_s
    Recorder.run_flush ──deltas since the last flush──► Sink ──► ray.util.metrics (inside Ray)
                                                             └─► LocalSink      (outside Ray)
    Ray's metrics agent ──► http://<node>:<MetricsExportPort>/metrics  (names prefixed ``ray_``)

Names follow Prometheus conventions, ``raydex_<what>_<unit>``, counters end in ``_total``, base
units (seconds). Ray prefixes ``ray_`` on export, so ``raydex_apply_seconds`` is scraped as
``ray_raydex_apply_seconds_bucket/_sum/_count``. Every series carries ``deployment`` (the Ray
namespace, so a loadtest on the same cluster never mixes into production series), ``role``
(sequencer, snapshot, committer, replica), ``name`` (the actor) and ``group`` (the replica group;
the role for the core actors); some add a low-cardinality label from :data:`CATALOG` (``stage``,
``tx_type``, ``gen``, placement fields). Never an account: labels multiply series.

Semantics:

- Sources are *cumulative*: a :class:`Count` (``.n``), a callable returning a running total, or an
  :class:`~raydex.observability.hist.Histogram` that the owner also uses for its status page. A
  flush exports only what changed since the previous flush, so nothing is counted twice and a
  flush that raised part-way loses nothing (the next one sends the remainder). A source whose
  total went down (its owner was rebuilt) restarts from zero.
- A local histogram is exported as Prometheus itself lays a histogram out, with exact totals:
  ``<name>_bucket{le=...}`` (the running count of samples at or below each boundary, ``+Inf``
  included), ``<name>_count`` and ``<name>_sum``, each *set* at every flush to its running total
  (``histogram_quantile`` and ``rate(_count)`` read them as they read any histogram). ``_count``
  and every bucket are exact, ``_sum`` exact to the local histogram's precision (< 1%; a sample
  within < 1% of a boundary may be counted in the neighbouring bucket). Why not Ray's own
  ``Histogram``: it takes one sample per call, so a flush had to down-sample (``_count``
  undercounted past ~300 samples a second), each call costs microseconds in the actor and again
  in Ray's node agent, and the agent re-records bucket *midpoints* (a scraped ``_sum`` of
  midpoints). Why gauges: Ray exports a counter named ``x_bucket`` as ``x_bucket_total``
  (OpenTelemetry's suffix), while a gauge keeps its name; a running total in a gauge is what
  ``rate()`` needs (the names end in ``_bucket``/``_count``/``_sum``, so PromQL takes them as
  counters), and an owner that restarts from zero reads as a counter reset. Ray drops a gauge
  left unset for ~30 s: a histogram with new samples has all its series set at the flush, one
  without is set again every ``HIST_REFRESH_S``.
- Gauges are sampled at flush time from a callable (cost paid by the flush, not the hot path).
- Every counter exists from the start: :meth:`Recorder.start` exports each one at 0 (and so does
  a registration after it), so a rate panel reads 0, not "no data", until the first event.

Cost: hot path one int add (``count.n += 1``) or one ``Histogram.record``; a family member lookup
adds a dict get. A flush costs O(local buckets touched), one call per changed counter and per
gauge, and per histogram with new samples one gauge set per boundary plus three (41 for the
seconds buckets), whatever the rate: ~5.6 µs per set in a Ray actor here, so a replica with ~25
busy histograms spends ~6 ms of CPU per flush (0.3% of a core at one flush per 2 s).

Caller duties: register sources once (at boot), start :meth:`Recorder.run_flush` from the actor's
event loop; outside Ray (unit tests, local runs) the Recorder exports to a :class:`LocalSink` and
never imports ``ray``.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .hist import Histogram

__all__ = [
    "BASE_TAGS",
    "CATALOG",
    "COUNT_BUCKETS",
    "HIST_REFRESH_S",
    "SECONDS_BUCKETS",
    "ApiCounters",
    "Count",
    "HistogramFamily",
    "LocalSink",
    "MetricDef",
    "RaySink",
    "Recorder",
    "Sink",
    "default_sink",
    "le_label",
]

log = logging.getLogger(__name__)

Kind = Literal["counter", "gauge", "histogram"]

#: Tags on every raydex series: the deployment (the Ray namespace: ``raydex`` in production,
#: ``raydex-loadtest-<pid>`` for a loadtest on the same cluster), the role, the actor's name, the
#: replica group (the role for the other actors).
BASE_TAGS: tuple[str, ...] = ("deployment", "role", "name", "group")


def _series(lo_exp: int, hi_exp: int, steps: tuple[float, ...]) -> tuple[float, ...]:
    out = [round(s * 10.0**e, 12) for e in range(lo_exp, hi_exp) for s in steps]
    return (*out, round(10.0**hi_exp, 12))


#: 10 µs .. 10 s, six boundaries per decade (1, 1.5, 2, 3, 5, 7): neighbouring boundaries differ
#: by at most 1.67x, so a p99 from ``histogram_quantile`` is within that of the truth; finer
#: buckets would multiply series (tx_type x stage x buckets per replica).
SECONDS_BUCKETS: tuple[float, ...] = _series(-5, 1, (1.0, 1.5, 2.0, 3.0, 5.0, 7.0))
#: Sizes (txs per block): 1 .. 10,000.
COUNT_BUCKETS: tuple[float, ...] = _series(0, 4, (1.0, 2.0, 5.0))

_NS = 1e-9
#: A histogram with no new samples has its series set again this often (s): Ray's agent drops a
#: gauge left unset for ~30 s.
HIST_REFRESH_S = 15.0


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One exported metric: its Prometheus name (before Ray's ``ray_`` prefix), kind, help text,
    extra tag keys beyond :data:`BASE_TAGS`, and for histograms the bucket boundaries in base
    units and ``scale`` (local unit -> base unit: 1e-9 for nanosecond histograms)."""

    name: str
    kind: Kind
    description: str
    tags: tuple[str, ...] = ()
    boundaries: tuple[float, ...] = ()
    scale: float = 1.0

    @property
    def tag_keys(self) -> tuple[str, ...]:
        return BASE_TAGS + self.tags


def _h(name: str, desc: str, tags: tuple[str, ...] = ()) -> MetricDef:
    return MetricDef(name, "histogram", desc, tags, SECONDS_BUCKETS, _NS)


#: Every raydex metric, by name. Registering a source for a name not listed here is an error, so
#: each name has one kind and one tag set in every process.
CATALOG: dict[str, MetricDef] = {
    d.name: d
    for d in (
        # sequencer
        _h("raydex_block_seconds", "Block time: first tx in -> durable and published."),
        _h("raydex_block_close_seconds", "Block close: WAL append (+fsync), encode, publish."),
        MetricDef(
            "raydex_block_size_txs", "histogram", "Transactions per block.", (), COUNT_BUCKETS, 1.0
        ),
        _h("raydex_wal_fsync_seconds", "WAL sync per group of blocks (the journal thread)."),
        _h(
            "raydex_wal_handoff_seconds",
            "WAL sync returned -> the sequencer's loop publishing (its wake-up).",
        ),
        MetricDef("raydex_blocks_total", "counter", "Blocks closed (sequencer) or applied."),
        MetricDef("raydex_txs_total", "counter", "Transactions executed into blocks."),
        MetricDef(
            "raydex_block_seq",
            "gauge",
            "Newest block seq this actor holds (two actors' are sampled seconds apart: "
            "a replica's lag is raydex_replica_lag_blocks, measured where it is true).",
        ),
        MetricDef(
            "raydex_sequencer_refused_starts_total",
            "counter",
            "Starts the sequencer refused: its log cannot be used (damaged, altered, a tail it "
            "cannot repair); it stays up, says why in its status and tries again (an alarm).",
        ),
        MetricDef(
            "raydex_sequencer_epoch",
            "gauge",
            "The epoch this sequencer sequences in (the arbiter's; 0: no arbiter). Goes up by "
            "one at each takeover (actors/sequencer/arbiter.py).",
        ),
        MetricDef(
            "raydex_replication_lag_blocks",
            "gauge",
            "Blocks the primary closed that its standby has not acked yet (replicated "
            "durability, actors/sequencer/replication.py).",
        ),
        MetricDef(
            "raydex_replication_degraded_info",
            "gauge",
            "1 while the primary acknowledges blocks on its own sync alone (its standby gone or "
            "behind past replication_timeout_s; it may not take over meanwhile): an alarm.",
        ),
        MetricDef(
            "raydex_replication_degradations_total",
            "counter",
            "Times the primary stopped waiting for its standby's acks (see "
            "raydex_replication_degraded_info).",
        ),
        MetricDef(
            "raydex_wal_restored_blocks_total",
            "counter",
            "Blocks the sequencer's log had lost that it took back from the followers' copies "
            "at a start (actors/sequencer/repair.py).",
        ),
        MetricDef(
            "raydex_preauth_refusals_total",
            "counter",
            "Data-plane connections turned away before they showed the deployment's secret: "
            "bad_secret, hello_timeout, hello_too_large, not_hello, per_peer, total.",
            ("reason",),
        ),
        # snapshot holder
        _h("raydex_snapshot_build_seconds", "Snapshot build: records, Arrow, IPC write, put."),
        # replica
        _h("raydex_apply_seconds", "Hot-path apply per block: decode, caches, fan-out."),
        _h(
            "raydex_apply_cpu_seconds",
            "The same apply on the thread's CPU clock: what exceeds it in raydex_apply_seconds "
            "the thread spent off the CPU (another process ran on its core).",
        ),
        _h(
            "raydex_book_publish_delay_seconds",
            "Engine timestamp of a block -> its order-book updates queued to clients.",
        ),
        _h("raydex_dry_run_seconds", "Dry-run of one tx against the replica's caches."),
        _h(
            "raydex_tx_lifecycle_seconds",
            "From the replica's submit to sequenced (outcome back) / confirmed (applied here).",
            ("stage", "tx_type"),
        ),
        MetricDef("raydex_cache_hits_total", "counter", "REST reads answered from the caches."),
        MetricDef(
            "raydex_cache_fallbacks_total",
            "counter",
            "REST reads the caches could not answer (remote call to another actor).",
        ),
        MetricDef(
            "raydex_overload_refusals_total",
            "counter",
            "Txs refused at the replica's overload door (23000 / HTTP 429).",
        ),
        MetricDef(
            "raydex_queue_delay_seconds",
            "gauge",
            "Overload door signal: event-loop lag plus the queue delay to the sequencer.",
        ),
        MetricDef("raydex_ws_connections", "gauge", "Open WebSocket connections."),
        MetricDef(
            "raydex_ws_queue_depth_messages",
            "gauge",
            "Deepest WebSocket send queue (max over clients), in messages.",
        ),
        MetricDef(
            "raydex_ws_conflations_total", "counter", "Order-book updates merged for slow clients."
        ),
        MetricDef(
            "raydex_ws_slow_disconnects_total", "counter", "Slow consumers disconnected (30006)."
        ),
        MetricDef("raydex_ws_messages_total", "counter", "WebSocket messages queued for clients."),
        MetricDef(
            "raydex_fastlane_requests_total",
            "counter",
            "sendTx/sendTxBatch requests answered by the replica's fast lane.",
        ),
        MetricDef(
            "raydex_fastlane_handoffs_total",
            "counter",
            "Connections the fast lane handed to aiohttp (reads, WebSocket, multipart, ...).",
        ),
        MetricDef("raydex_http_connections", "gauge", "Open HTTP connections (WebSocket too)."),
        MetricDef(
            "raydex_http_refusals_total",
            "counter",
            "HTTP connections refused or closed before an answer: per_ip / total (over a cap: "
            "429 / 503), head_timeout (a request head not complete in time: 408), bad_head.",
            ("reason",),
        ),
        MetricDef(
            "raydex_http_bad_requests_total",
            "counter",
            "Malformed requests answered 4xx by aiohttp's parser (bare LF, over-long lines).",
        ),
        MetricDef(
            "raydex_http_accept_errors_total",
            "counter",
            "accept() failures for want of file descriptors (logged within a budget).",
        ),
        MetricDef(
            "raydex_ws_socket_writes_total",
            "counter",
            "Socket writes of WebSocket frames (queued messages go out together).",
        ),
        MetricDef(
            "raydex_replica_lag_blocks",
            "gauge",
            "Newest block seq seen on the stream/catch-up minus the seq applied.",
        ),
        # snapshot holder and replicas: state checks (actors/runtime/checks.py)
        MetricDef(
            "raydex_state_check_seq",
            "gauge",
            "Newest checkpoint seq whose state this follower hashed (-1: none yet).",
        ),
        MetricDef(
            "raydex_replica_native_info",
            "gauge",
            "1, labelled with whether the replica's apply runs its C paths (true) or the Python "
            "fallbacks: block_decode (codecs/_blockdec.c), cache_loop (the C cache loop), "
            "book_json (the C order-book renderer).",
            ("block_decode", "cache_loop", "book_json"),
        ),
        MetricDef(
            "raydex_state_divergences_total",
            "counter",
            "Checkpoints at which the replica's state hash differed from the snapshot holder's "
            "(an alarm: any increase).",
        ),
        # every actor
        MetricDef(
            "raydex_signing_info",
            "gauge",
            "1, labelled with the signature backend: accelerated=true (C extension) or false "
            "(the pure-Python fallback, ~1000x slower).",
            ("backend", "accelerated"),
        ),
        MetricDef(
            "raydex_loop_restarts_total",
            "counter",
            "Background loops (followers, oracle, maintenance) restarted after an exception.",
            ("loop",),
        ),
        MetricDef(
            "raydex_signature_audit_txs_total",
            "counter",
            "Executed user txs whose signature the committer re-verified (actors/audit.py).",
        ),
        MetricDef(
            "raydex_signature_audit_failures_total",
            "counter",
            "Executed txs that failed the re-verification: an alarm (commitments are withheld "
            "from the first such block on).",
        ),
        MetricDef(
            "raydex_signature_audit_skipped_blocks_total",
            "counter",
            "Blocks passed unaudited (the WAL no longer held them, or the audit fell far behind).",
        ),
        MetricDef(
            "raydex_signature_audit_wal_reads_total",
            "counter",
            "Range reads of the sequencer's WAL by the audit (while it keeps up, one per linger "
            "of ~10 ms for all the blocks committed meanwhile).",
        ),
        MetricDef(
            "raydex_signature_audit_lag_blocks",
            "gauge",
            "Blocks committed but not yet audited.",
        ),
        _h("raydex_gc_pause_seconds", "CPython GC pause per collection.", ("gen",)),
        MetricDef("raydex_gc_collections_total", "counter", "CPython GC collections.", ("gen",)),
        # the deployment's monitor (cluster/control/monitor.py): one series per planned actor,
        # labelled with that actor's role, name and group, and per host
        MetricDef(
            "raydex_actor_state",
            "gauge",
            "1 for the planned actor's current state, 0 for the others: alive, restarting, "
            "unreachable, host_down, missing, dead, booting, no_sequencer, refused "
            "(raydex status).",
            ("state",),
        ),
        MetricDef(
            "raydex_actor_restarts_last_minute",
            "gauge",
            "Times Ray restarted the planned actor in the last minute (sampled by the monitor).",
        ),
        MetricDef(
            "raydex_host_up",
            "gauge",
            "1 while a live Ray node carries the host label, 0 for a host of the deployment "
            "that has none.",
            ("host",),
        ),
        MetricDef(
            "raydex_health",
            "gauge",
            "The deployment's verdict, as raydex status exits: 0 healthy, 3 state diverged or "
            "signature audit failed, 4 degraded (an actor or host down, unaudited blocks).",
        ),
        MetricDef(
            "raydex_placement_info",
            "gauge",
            "1, labelled with where the actor runs, how it is pinned and its heap's page size.",
            ("node", "numa_node", "cpus", "policy", "pages"),
        ),
    )
}


class Sink(Protocol):
    """Where a flush goes. ``tags`` always holds every key of ``d.tag_keys``.

    ``set_histogram`` takes a histogram's running totals (idempotent: the same totals again change
    nothing): ``buckets[i]`` samples in Ray bucket ``i`` (``d.boundaries[i - 1] < v <=
    d.boundaries[i]``, the last one above every boundary; not cumulative), ``count`` their sum,
    ``total`` the sum of the samples in base units."""

    def inc(self, d: MetricDef, tags: Mapping[str, str], value: float) -> None: ...

    def set(self, d: MetricDef, tags: Mapping[str, str], value: float) -> None: ...

    def set_histogram(
        self,
        d: MetricDef,
        tags: Mapping[str, str],
        buckets: Sequence[int],
        count: int,
        total: float,
    ) -> None: ...


_Key = tuple[str, tuple[tuple[str, str], ...]]


def _key(d: MetricDef, tags: Mapping[str, str]) -> _Key:
    return d.name, tuple(sorted(tags.items()))


@dataclass(slots=True)
class _LocalHist:
    buckets: list[int]
    count: int = 0
    sum: float = 0.0


class LocalSink:
    """In-process totals, shaped like what Prometheus would scrape: counters' totals, gauges' last
    values, histograms' per-bucket counts (non-cumulative), ``count`` and ``sum`` as last set."""

    def __init__(self) -> None:
        self.counters: dict[_Key, float] = {}
        self.gauges: dict[_Key, float] = {}
        self.histograms: dict[_Key, _LocalHist] = {}
        self.calls = 0

    def inc(self, d: MetricDef, tags: Mapping[str, str], value: float) -> None:
        k = _key(d, tags)
        self.counters[k] = self.counters.get(k, 0.0) + value
        self.calls += 1

    def set(self, d: MetricDef, tags: Mapping[str, str], value: float) -> None:
        self.gauges[_key(d, tags)] = value
        self.calls += 1

    def set_histogram(
        self,
        d: MetricDef,
        tags: Mapping[str, str],
        buckets: Sequence[int],
        count: int,
        total: float,
    ) -> None:
        self.histograms[_key(d, tags)] = _LocalHist(list(buckets), count, total)
        self.calls += 1

    def value(self, metric: str, /, **tags: str) -> float:
        """Sum of a counter's or gauge's series whose tags include ``tags``."""
        out = 0.0
        for store in (self.counters, self.gauges):
            for (n, kv), v in store.items():
                if n == metric and tags.items() <= dict(kv).items():
                    out += v
        return out

    def histogram(self, metric: str, /, **tags: str) -> _LocalHist:
        """The merged histogram of every series of ``name`` whose tags include ``tags``."""
        merged: _LocalHist | None = None
        for (n, kv), h in self.histograms.items():
            if n == metric and tags.items() <= dict(kv).items():
                if merged is None:
                    merged = _LocalHist([0] * len(h.buckets))
                merged.buckets = [a + b for a, b in zip(merged.buckets, h.buckets, strict=True)]
                merged.count += h.count
                merged.sum += h.sum
        return merged if merged is not None else _LocalHist([])


#: One ray.util.metrics object per exported name per process (Ray keys series by name).
_RAY_METRICS: dict[str, Any] = {}


def le_label(boundary: float) -> str:
    """A bucket's ``le`` label as Prometheus' clients write it (``0.001``, ``1e-05``, ``+Inf``)."""
    return "+Inf" if math.isinf(boundary) else repr(float(boundary))


class RaySink:
    """Exports through ``ray.util.metrics`` (objects created once per process, on first use); a
    histogram as gauges of its running totals (``<name>_bucket``, ``_count``, ``_sum``: see the
    module docstring)."""

    def _metric(self, name: str, kind: Kind, d: MetricDef, extra: tuple[str, ...] = ()) -> Any:
        m = _RAY_METRICS.get(name)
        if m is None:
            from ray.util import metrics as rm

            keys = d.tag_keys + extra
            if kind == "counter":
                m = rm.Counter(name, d.description, keys)
            else:
                m = rm.Gauge(name, d.description, keys)
            _RAY_METRICS[name] = m
        return m

    def inc(self, d: MetricDef, tags: Mapping[str, str], value: float) -> None:
        metric = self._metric(d.name, "counter", d)
        if value > 0:
            metric.inc(value, dict(tags))
            return
        # ``Counter.inc`` refuses 0; recording 0 creates the series at 0 (checked on Ray 2.60's
        # endpoint: ``ray_<name>{...} 0.0``), which is what announcing a counter needs.
        record = getattr(metric, "_record", None)
        if record is not None:
            record(0.0, tags=dict(tags))

    def set(self, d: MetricDef, tags: Mapping[str, str], value: float) -> None:
        self._metric(d.name, "gauge", d).set(value, dict(tags))

    def set_histogram(
        self,
        d: MetricDef,
        tags: Mapping[str, str],
        buckets: Sequence[int],
        count: int,
        total: float,
    ) -> None:
        t = dict(tags)
        self._metric(d.name + "_count", "gauge", d).set(count, t)
        self._metric(d.name + "_sum", "gauge", d).set(total, t)
        gauge = self._metric(d.name + "_bucket", "gauge", d, ("le",))
        # The first set validates the tags; the rest go straight to the Cython recorder that
        # ``set`` ends in (Metric._record, no default tags here), skipping that check each time.
        record = getattr(getattr(gauge, "_metric", None), "record", None)
        running = 0
        for i, (boundary, n) in enumerate(zip((*d.boundaries, math.inf), buckets, strict=True)):
            running += n
            t["le"] = le_label(boundary)
            if i == 0 or record is None:
                gauge.set(running, t)
            else:
                record(float(running), tags=t)


def default_sink() -> Sink:
    """:class:`RaySink` inside a connected Ray process (a worker or a driver), else a
    :class:`LocalSink`. Never imports ``ray`` itself: a process that has not imported it is not
    in Ray."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return RaySink()
    return LocalSink()


class Count:
    """A hot-path counter: ``c.n += 1``. Exported as a ``_total`` counter."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


class HistogramFamily:
    """Local histograms of one metric keyed by one label value (``tx_type``, ``stage``...),
    created on first use. ``get`` is one dict lookup when the member exists."""

    __slots__ = ("_fixed", "_label", "_make", "members")

    def __init__(
        self, label: str, fixed: Mapping[str, str], make: Callable[[dict[str, str]], Histogram]
    ) -> None:
        self._label = label
        self._fixed = dict(fixed)
        self._make = make
        self.members: dict[str, Histogram] = {}

    def get(self, value: str) -> Histogram:
        h = self.members.get(value)
        if h is None:
            h = self.members[value] = self._make({**self._fixed, self._label: value})
        return h


@dataclass(slots=True)
class _HistState:
    d: MetricDef
    tags: dict[str, str]
    hist: Histogram
    #: local bucket -> count already added to ``counts``
    seen: dict[int, int] = field(default_factory=dict)
    seen_total: int = 0
    #: per Ray bucket, the samples seen so far, and the sum of all of them (local unit)
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    #: Ray boundaries in the local unit
    local_bounds: tuple[float, ...] = ()
    #: ``time.monotonic()`` of the last export of these totals (0: never)
    exported_at: float = 0.0


@dataclass(slots=True)
class _Cumulative:
    d: MetricDef
    tags: dict[str, str]
    read: Callable[[], int]
    last: int = 0


@dataclass(slots=True)
class _Sampled:
    d: MetricDef
    tags: dict[str, str]
    read: Callable[[], float]


class Recorder:
    """One actor's metrics: registered sources and their flush (see the module docstring).

    ``deployment``/``role``/``name``/``group`` become the base tags of every series (``group``
    defaults to the role; set them before :meth:`start`). ``hist_refresh_s``: how often a
    histogram without new samples is exported again (see ``HIST_REFRESH_S``).
    """

    def __init__(
        self,
        role: str,
        name: str,
        group: str | None = None,
        sink: Sink | None = None,
        deployment: str = "",
        hist_refresh_s: float = HIST_REFRESH_S,
    ) -> None:
        self.base = {
            "deployment": deployment,
            "role": role,
            "name": name,
            "group": group if group is not None else role,
        }
        self._sink = sink
        self.hist_refresh_s = hist_refresh_s
        self._hists: list[_HistState] = []
        self._cumulative: list[_Cumulative] = []
        self._sampled: list[_Sampled] = []
        self.flushes = 0
        self.source_errors = 0
        self._task: asyncio.Task[None] | None = None
        self._announced = False

    @property
    def sink(self) -> Sink:
        if self._sink is None:
            self._sink = default_sink()
        return self._sink

    def _def(self, name: str, kind: Kind, tags: Mapping[str, str]) -> MetricDef:
        d = CATALOG[name]
        if d.kind != kind:
            raise ValueError(f"{name} is a {d.kind}, not a {kind}")
        if set(tags) != set(d.tags):
            raise ValueError(f"{name} takes tags {d.tags}, got {tuple(tags)}")
        return d

    # ---- registration (once, at boot) -----------------------------------------------------------

    def count(self, name: str, **tags: str) -> Count:
        """A new hot-path counter exported as ``name``."""
        c = Count()
        self.counter_fn(name, lambda: c.n, **tags)
        return c

    def counter_fn(self, name: str, read: Callable[[], int], **tags: str) -> None:
        """Export the running total ``read()`` (an int its owner already keeps) as a counter."""
        d = self._def(name, "counter", tags)
        c = _Cumulative(d, dict(tags), read)
        self._cumulative.append(c)
        if self._announced:
            self.sink.inc(d, {**self.base, **c.tags}, 0.0)

    def gauge(self, name: str, read: Callable[[], float], **tags: str) -> None:
        """Export ``read()``, sampled at every flush, as a gauge."""
        d = self._def(name, "gauge", tags)
        self._sampled.append(_Sampled(d, dict(tags), read))

    def histogram(self, name: str, hist: Histogram | None = None, **tags: str) -> Histogram:
        """Export ``hist`` (cumulative, in the metric's local unit; a new one if None)."""
        d = self._def(name, "histogram", tags)
        h = hist if hist is not None else Histogram()
        n = len(d.boundaries) + 1
        self._hists.append(
            _HistState(
                d,
                dict(tags),
                h,
                counts=[0] * n,
                local_bounds=tuple(b / d.scale for b in d.boundaries),
            )
        )
        return h

    def histogram_family(self, name: str, label: str, **tags: str) -> HistogramFamily:
        """Histograms of ``name`` per value of ``label`` (created when first used)."""
        self._def(name, "histogram", {**tags, label: ""})
        return HistogramFamily(label, tags, lambda t: self.histogram(name, None, **t))

    # ---- flush ----------------------------------------------------------------------------------

    def flush(self) -> int:
        """Export what changed since the last flush; the number of sink calls made."""
        sink = self.sink
        base = self.base
        calls = 0
        for c in self._cumulative:
            try:
                now = int(c.read())
            except Exception:  # a source of a half-built owner: skip it this time
                self.source_errors += 1
                continue
            delta = now - c.last if now >= c.last else now
            if delta > 0:
                sink.inc(c.d, {**base, **c.tags}, delta)
                calls += 1
            c.last = now
        for s in self._sampled:
            try:
                value = float(s.read())
            except Exception:
                self.source_errors += 1
                continue
            sink.set(s.d, {**base, **s.tags}, value)
            calls += 1
        at = time.monotonic()
        for h in self._hists:
            if _collect(h) or (h.seen_total and at - h.exported_at >= self.hist_refresh_s):
                total = h.total * h.d.scale
                sink.set_histogram(h.d, {**base, **h.tags}, h.counts, h.seen_total, total)
                h.exported_at = at
                calls += len(h.counts) + 2
        self.flushes += 1
        return calls

    async def run_flush(self, interval_s: float = 2.0) -> None:
        """Flush every ``interval_s`` until cancelled; one failed flush is logged, not fatal.
        Ray's agent exports every ~10 s, so flushing faster buys little."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.flush()
            except Exception:
                log.exception("metrics flush failed (%s)", self.base)

    def announce(self) -> None:
        """Export every counter at 0 (once), so each series exists before its first event;
        counters registered later are exported at 0 when registered."""
        if self._announced:
            return
        self._announced = True
        for c in self._cumulative:
            self.sink.inc(c.d, {**self.base, **c.tags}, 0.0)

    def start(self, interval_s: float = 2.0) -> asyncio.Task[None]:
        """Export every counter at 0 (:meth:`announce`), then start :meth:`run_flush` on the
        running loop (once); the task."""
        self.announce()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run_flush(interval_s))
        return self._task

    async def stop(self) -> None:
        """Cancel the flush task, then flush once more."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self.flush()


def _collect(h: _HistState) -> bool:
    """Add the local histogram's new samples to the per-Ray-bucket counts (each sample at its
    local bucket's top: within 1% of its value); False if there were none."""
    hist = h.hist
    if hist.total == h.seen_total:
        return False
    if hist.total < h.seen_total:  # the owner reset it: its series restart from zero
        h.seen.clear()
        h.counts = [0] * len(h.counts)
        h.total = 0.0
    seen = h.seen
    bounds = h.local_bounds
    counts = h.counts
    for top, c in hist.counts.items():
        d = c - seen.get(top, 0)
        if d > 0:
            seen[top] = c
            counts[bisect.bisect_left(bounds, top)] += d
            h.total += float(top) * d
    h.seen_total = hist.total
    return True


class ApiCounters:
    """What the REST/WS handlers count (plain ints and a histogram; the replica exports them):
    reads answered from the caches, reads that needed another actor, dry-run time per tx (ns)."""

    __slots__ = ("cache_fallbacks", "cache_hits", "dry_run")

    def __init__(self) -> None:
        self.cache_hits = 0
        self.cache_fallbacks = 0
        self.dry_run = Histogram()
