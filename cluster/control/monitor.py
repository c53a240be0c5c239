"""The deployment's monitor: its health (``health.py``) every few seconds, as Prometheus metrics.

::

    MonitorActor "raydex-monitor" (detached, no CPU, on the head)
      every interval_s:  health.gather (record, Ray's actor table, nodes, statuses)
                         RestartWindow.sample(num_restarts)  ─►  restarts in the last minute
                         health.assess  ─►  raydex_health, raydex_actor_state{state},
                                            raydex_actor_restarts_last_minute, raydex_host_up

``raydex status`` asks it for a fresh gather (``check``), with the restarts it counted: a one-shot
command would see Ray's total only, and would spend seconds importing every actor class to get
their handles (Ray loads an actor's class to make a handle); the monitor holds them all. The same
verdict is what ``raydex status`` exits with. A series of an actor or host that left the
deployment is set to 0 once and then no longer written.

Why an actor: the facts worth an alarm (a host down, an actor restarting, unreachable) cannot be
reported by the actor they concern, and Ray's metrics agent exports only what a live process
records. Cost: one gather per interval (a state-API read, ``ray.nodes()``, one cheap status call
per actor, replicas without a state hash); never on a data path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from typing import Any

from raydex.observability.metrics import CATALOG, Sink, default_sink

from .health import Facts, Health, RestartWindow, assess, gather

__all__ = ["STATES", "Exported", "MonitorActor", "export"]

log = logging.getLogger(__name__)

#: the states ``raydex_actor_state`` is one-hot over (``health.ActorHealth.state``)
STATES = ("alive", "restarting", "unreachable", "host down", "missing", "dead", "booting",
          "no sequencer", "refused", "fenced")  # fmt: skip


def _label(state: str) -> str:
    return state.replace(" ", "_")


@dataclasses.dataclass(slots=True)
class Exported:
    """The series ``export`` wrote last time: the hosts, and each actor's base tags."""

    hosts: set[str] = dataclasses.field(default_factory=set)
    actors: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)


def export(sink: Sink, namespace: str, h: Health, exported: Exported) -> None:
    """Write ``h`` to ``sink``; ``exported`` (kept by the caller between calls) remembers the
    series written, so that those of an actor or host gone since are set to 0 once, then
    dropped."""
    me = {"deployment": namespace, "role": "monitor", "name": "raydex-monitor", "group": "monitor"}
    sink.set(CATALOG["raydex_health"], me, float(h.code))
    for host in exported.hosts | set(h.hosts):
        sink.set(CATALOG["raydex_host_up"], {**me, "host": host}, float(h.hosts.get(host, False)))
    now: dict[str, dict[str, str]] = {}
    for a in h.actors:
        base = {"deployment": namespace, "role": a.role, "name": a.name, "group": a.role}
        now[a.name] = base
        for state in STATES:
            sink.set(CATALOG["raydex_actor_state"], {**base, "state": _label(state)},
                     1.0 if a.state == state else 0.0)  # fmt: skip
        recent = float(a.restarts_last_minute or 0)
        sink.set(CATALOG["raydex_actor_restarts_last_minute"], base, recent)
    for name, base in exported.actors.items():
        if name not in now:
            for state in STATES:
                sink.set(CATALOG["raydex_actor_state"], {**base, "state": _label(state)}, 0.0)
            sink.set(CATALOG["raydex_actor_restarts_last_minute"], base, 0.0)
    exported.hosts = set(h.hosts)
    exported.actors = now


class MonitorActor:
    """Ray actor (async): ``health()``, ``restarts()``, ``status()``; see the module docstring."""

    def __init__(self, namespace: str, interval_s: float = 5.0, timeout_s: float = 4.0) -> None:
        self.namespace = namespace
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.window = RestartWindow()
        self.last: Health | None = None
        self.rounds = 0
        self.failures = 0
        self._exported = Exported()
        self._sink = default_sink()
        self._task = asyncio.get_event_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            try:
                self.last = await asyncio.to_thread(self._round)
                export(self._sink, self.namespace, self.last, self._exported)
                self.rounds += 1
            except Exception:  # the watcher must outlive a bad round (Ray busy, a GCS blip)
                self.failures += 1
                log.exception("raydex monitor: health round failed")
            await asyncio.sleep(self.interval_s)

    def _gather(self, timeout_s: float, state_hash: bool) -> tuple[Facts, dict[str, Any]]:
        facts, statuses = gather(self.namespace, timeout_s, state_hash=state_hash)
        if facts.table is not None:
            self.window.sample({n: int(r["num_restarts"]) for n, r in facts.table.items()})
        return dataclasses.replace(facts, restarts_last_minute=self.window.counts()), statuses

    def _round(self) -> Health:
        return assess(self._gather(self.timeout_s, state_hash=False)[0])

    async def check(
        self, timeout_s: float = 3.0, state_hash: bool = True
    ) -> tuple[Facts, dict[str, Any]]:
        """A fresh gather for ``raydex status``: the facts (with the restarts this monitor
        counted) and every actor's status. Asked here because this process holds every actor's
        handle already: a new driver pays seconds importing the actor classes to get them."""
        return await asyncio.to_thread(self._gather, timeout_s, state_hash)

    async def restarts(self) -> dict[str, int]:
        """Restarts per actor in the last minute, as sampled every ``interval_s``."""
        return self.window.counts()

    async def health(self) -> dict[str, Any] | None:
        return self.last.as_json() if self.last is not None else None

    async def status(self) -> dict[str, Any]:
        return {
            "name": "raydex-monitor",
            "pid": os.getpid(),
            "rounds": self.rounds,
            "failures": self.failures,
            "interval_s": self.interval_s,
            "verdict": self.last.verdict if self.last is not None else None,
            "repr": f"monitor {self.namespace}/raydex-monitor rounds={self.rounds}",
        }

    def __repr__(self) -> str:
        return f"monitor {self.namespace}/raydex-monitor every {self.interval_s:g}s"
