"""What every Ray actor shell of raydex does the same way: pin itself, say where it is, export its
metrics (GC and placement on top of the service's own; flushed every ``METRICS_INTERVAL_S``),
describe itself in one line (``ActorRuntime.describe``, each shell's ``__repr__``) and write that
line to its log every ``LIVE_LOG_INTERVAL_S``.

Ray records an actor's ``repr()`` once, when its ``__init__`` returns (the dashboard's Actors page
and ``ray.util.state.list_actors``' ``repr_name``), and never asks again unless it restarts the
actor. So each actor has two lines: ``__repr__`` (``describe(..., fixed=True)``) holds only what
does not change (role, deployment, name, group, configured ports, node, NUMA node, cores,
scheduling policy) and ends with ``live=log`` (``LIVE_HINT``); ``live()`` adds the changing facts
(``LIVE_FACTS``: state, seq, lag, state hash with its seq, bound ports, the placement in force), is
written to stdout every ``LIVE_LOG_INTERVAL_S`` prefixed ``LIVE_LOG_PREFIX`` (the log the Actors
page opens), and is what ``raydex status`` asks for. Cost: one short write per interval on the
actor's event loop, never inside a block.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raydex.observability.metrics import Recorder

#: how often an actor's Recorder exports (Ray's agent scrapes workers every ~10 s anyway)
METRICS_INTERVAL_S = 2.0
#: how often an actor writes its live line to its log (shorter: a fresher line in the dashboard's
#: log view, a longer log file: ~200 bytes a line)
LIVE_LOG_INTERVAL_S = 10.0
#: the start of every live line in an actor's ``.out`` log
LIVE_LOG_PREFIX = "raydex live"
#: what the repr Ray records ends with: where the live figures are
LIVE_HINT = "live=log"
#: the facts of an actor's line that change while it runs (left out of the repr Ray records)
LIVE_FACTS = frozenset(
    {"state", "seq", "lag", "hash", "check", "agrees", "snapshot", "chain", "direct"}
)


def advertised_host() -> str:
    """This node's IP as other nodes reach it (127.0.0.1 outside Ray)."""
    try:
        import ray

        return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    except Exception:  # outside a Ray worker: loopback
        return "127.0.0.1"


#: The environment variable deploy sets on every actor it creates (``runtime_env``): the Ray
#: namespace the actor is named in, i.e. its deployment. Needed because inside an actor Ray's
#: ``get_runtime_context().namespace`` is the namespace of the *job* that created it (an anonymous
#: one for ``raydex deploy``), not the one the actor was named in.
DEPLOYMENT_ENV = "RAYDEX_DEPLOYMENT"


def current_namespace() -> str:
    """This actor's deployment: ``$RAYDEX_DEPLOYMENT`` (set by deploy), else the job's Ray
    namespace, "" outside Ray."""
    given = os.environ.get(DEPLOYMENT_ENV)
    if given:
        return given
    ray = _ray_worker()
    return str(ray.get_runtime_context().namespace or "") if ray is not None else ""


def _ray_worker() -> Any:
    """The ``ray`` module when this process is connected to Ray, else None (never imports or
    starts Ray: ``get_runtime_context`` outside Ray would start a local instance)."""
    ray = sys.modules.get("ray")
    return ray if ray is not None and ray.is_initialized() else None


def _who() -> str:
    """``<namespace>/<actor name>`` inside a Ray actor, "" outside."""
    ray = _ray_worker()
    if ray is None:
        return ""
    ctx = ray.get_runtime_context()
    if ctx.get_actor_id() is None:  # a driver connected to Ray (a test, a CLI), not an actor
        return ""
    return f"{current_namespace()}/{ctx.get_actor_name() or '?'}"


def pin_actor(bundle: Any) -> dict[str, Any]:
    """Pin the calling actor's threads to its planned bundle (a ``BundlePlacement``); the placement
    report, or {} when the actor was not planned (tests, embedded runs without a plan)."""
    if bundle is None:
        return {}
    import ray

    from raydex.cluster.bundle import pin_bundle

    report = pin_bundle(bundle, ray.get_runtime_context().get_node_id())
    return dataclasses.asdict(report)


class ActorRuntime:
    """The per-process discipline every raydex actor applies around its boot: GC policy and
    monitor before it, pinning (all threads, once they exist) and the boot-heap freeze after it."""

    def __init__(self, bundle: Any = None, gc_spec: Any = None, nice: int | None = 0) -> None:
        """``nice``: the niceness for every thread after the boot. 0 for the hot path (Ray starts
        workers at 15); None keeps Ray's, for background roles (snapshot holder, committer) that
        should yield the CPU to the sequencer and the replicas when the host is saturated."""
        from raydex.observability.gcstats import GcMonitor, GcPolicy

        self.nice = nice
        self.bundle = bundle
        self.gc = GcPolicy(gc_spec)
        self.monitor = GcMonitor()
        self.placement: dict[str, Any] = {}
        self.metrics: Recorder | None = None
        self._scheduled: asyncio.Task[None] | None = None
        self._spinner: asyncio.Task[None] | None = None
        self._live: asyncio.Task[None] | None = None

    def before_boot(self) -> None:
        self.monitor.install()
        self.gc.apply()
        if self.huge_pages:
            # before the boot builds the state: the arenas it fills come from huge pages
            from raydex.cluster.hugepages import install_arenas

            install_arenas()

    @property
    def huge_pages(self) -> bool:
        """The planned bundle asks for the heap on huge pages (``BundlePlacement.huge_pages``)."""
        return bool(self.bundle is not None and self.bundle.huge_pages)

    def after_boot(
        self,
        metrics: Recorder | None = None,
        busy_poll: bool = False,
        live: Callable[[], str] | None = None,
    ) -> None:
        """``busy_poll``: the event loop never parks (see :func:`busy_poll`); for a role with a
        core of its own only. ``live``: the actor's live line (its ``live()``), written to its
        log now and every ``LIVE_LOG_INTERVAL_S`` (:func:`live_log_loop`)."""
        from raydex.cluster.pinning import renice_all_threads

        self.placement = pin_actor(self.bundle)
        if self.huge_pages:
            from raydex.cluster.hugepages import report

            self.placement["huge_pages"] = report()
        if self.nice is not None:
            self.placement["nice"] = renice_all_threads(self.nice)
        else:
            self.placement["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
        self.gc.after_boot()
        loop = asyncio.get_running_loop()
        self._scheduled = loop.create_task(self.gc.run_scheduled())
        if busy_poll:
            self._spinner = loop.create_task(busy_poll_loop())
        if metrics is not None:
            self.start_metrics(metrics)
        if live is not None:
            self._live = loop.create_task(live_log_loop(live, LIVE_LOG_INTERVAL_S))

    def start_metrics(self, rec: Recorder) -> None:
        """Add this process's GC and placement series to ``rec`` and start its flush task."""
        self.metrics = rec
        if self.bundle is not None:
            rec.base["group"] = str(self.bundle.group)
        # the deployment and the actor's Ray name label every series (inside Ray)
        rec.base["deployment"] = rec.base["deployment"] or current_namespace() or "local"
        ray = _ray_worker()
        if ray is not None:
            rec.base["name"] = ray.get_runtime_context().get_actor_name() or rec.base["name"]
        mon = self.monitor
        for g in range(3):
            rec.histogram("raydex_gc_pause_seconds", mon.pauses[g], gen=str(g))
            rec.counter_fn(
                "raydex_gc_collections_total", lambda g=g: mon.collections[g], gen=str(g)
            )
        p = self.placement
        rec.gauge(
            "raydex_placement_info",
            lambda: 1.0,
            node=advertised_host(),
            numa_node=str(p.get("numa_node", -1)),
            cpus=",".join(str(c) for c in p.get("cpus", ())) or "any",
            policy=str(p.get("policy", "unpinned")),
            pages=self.pages(),
        )
        rec.start(METRICS_INTERVAL_S)

    def where(self) -> str:
        """``node=<ip> numa=<n> cpus=<list>|any policy=<policy>``: the placement in force after
        the boot, the planned one (``bundle``) before it."""
        p = self.placement
        b = self.bundle
        if p.get("node_id") or p.get("cpus") or p.get("policy"):
            numa, cpus, policy = p.get("numa_node", -1), tuple(p.get("cpus", ())), p.get("policy")
        elif b is not None:
            numa = b.numa_node
            cpus = tuple(b.cpus) if b.pin else ()
            policy = "SCHED_FIFO(planned)" if b.realtime else None
        else:
            numa, cpus, policy = -1, (), None
        parts = [f"node={advertised_host()}"]
        if b is not None:
            parts.append(f"host={b.host}")
        parts.append(f"numa={numa}" if numa is not None and numa >= 0 else "numa=any")
        parts.append("cpus=" + (",".join(map(str, cpus)) if cpus else "any"))
        parts.append(f"policy={policy or ('SCHED_OTHER' if cpus else 'unpinned')}")
        parts.append(f"pages={self.pages()}")
        return " ".join(parts)

    def pages(self) -> str:
        """``2M`` when this process's arenas are on huge pages (installed at the worker's start,
        and the kernel's THP mode lets them be), ``2M(late)`` when they were installed only at
        the boot (the state then fills the worker's older 4 KiB arenas first), ``2M(planned)``
        before the boot, else ``4k``."""
        if not self.huge_pages:
            return "4k"
        report = self.placement.get("huge_pages")
        if report is None:
            return "2M(planned)"
        if not report["arenas"] or report["thp"] not in ("always", "madvise"):
            return "4k"
        return "2M" if report["at_start"] else "2M(late)"

    def describe(self, role: str, facts: dict[str, Any], fixed: bool = False) -> str:
        """One line naming the actor and what matters live (see the module docstring): role,
        ``deployment/name``, the ``facts`` given (None values left out), then :meth:`where`.
        ``fixed``: what Ray records (the actor's ``__repr__``): the facts that never change
        (``LIVE_FACTS`` left out, they would be frozen at their creation values) and, last,
        ``LIVE_HINT``. Never raises (Ray calls ``__repr__`` while creating the actor)."""
        try:
            live = " ".join(
                f"{k}={v}"
                for k, v in facts.items()
                if v is not None and not (fixed and k in LIVE_FACTS)
            )
            where = self.where()
        except Exception as exc:  # a repr must not fail the actor's creation
            live, where = "", f"(placement unknown: {exc!r})"
        hint = LIVE_HINT if fixed else ""
        return " ".join(x for x in (role, _who(), live, where, hint) if x)

    @property
    def busy_polling(self) -> bool:
        return self._spinner is not None and not self._spinner.done()

    def status(self) -> dict[str, Any]:
        placement = self.placement
        if "huge_pages" in placement:  # its counters now, not at the boot
            from raydex.cluster.hugepages import report

            placement = {**placement, "huge_pages": report()}
        out = {
            "placement": placement,
            "gc": self.monitor.summary(),
            "busy_poll": self.busy_polling,
        }
        if self.metrics is not None:
            m = self.metrics
            out["metrics"] = {"flushes": m.flushes}
        return out


def live_line(describe: Callable[[], str]) -> str:
    """``raydex live <UTC time> <the actor's line>``; never raises."""
    try:
        line = describe()
    except Exception as exc:  # the log line must not kill its loop
        line = f"(describe failed: {exc!r})"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f"{LIVE_LOG_PREFIX} {stamp} {line}"


async def live_log_loop(describe: Callable[[], str], interval_s: float) -> None:
    """Write the live line to stdout (the actor's ``.out`` log) now and every ``interval_s``."""
    while True:
        print(live_line(describe), flush=True)
        await asyncio.sleep(interval_s)


async def busy_poll_loop() -> None:
    """The seed's busy-wait: a callback is ready on every loop turn, so the selector polls with
    a zero timeout and the loop never sleeps in epoll: a frame or a timer is handled without the
    wake-up latency of a parked thread (tens of µs, more on a loaded host). It burns its whole
    core, so it is for a role pinned to a core of its own (``busy_poll`` in raydex.yaml); on a
    shared core it only steals CPU from the others."""
    while True:
        await asyncio.sleep(0)


def short_hash(state_hash: str, seq: int) -> str | None:
    """``<first 8 hex>@<seq>`` of a state hash, None when none was computed yet."""
    return f"{state_hash[:8]}@{seq}" if state_hash and seq >= 0 else None
