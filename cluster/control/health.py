"""A deployment's health in one verdict: what ``raydex status`` exits with and the monitor exports.

::

    gather(namespace)                                   assess(...)  (pure)
      record.load ─► the planned actors and hosts ─┐
      Ray's actor table ─► state, restarts, node ──┤─► ActorHealth per planned actor ─┐
      ray.nodes() ─► which hosts are up ───────────┤                                  ├─► Health
      status() of each actor, in parallel, ────────┘   state hashes, signature audit ─┘   .code
      bounded by ``timeout_s`` altogether

Verdict (``Health.code``), the exit status of ``raydex status``:

- 3 **broken**: two actors hash the state differently at one seq, the committer's signature
  audit failed (a forged tx was executed), or the sequencer refuses to start (its WAL cannot be
  used as it is: its status says why; an operator decides);
- 4 **degraded**: a planned actor is not serving: missing, dead, restarting (Ray restarts it now,
  or it restarted ``RESTART_LOOP`` times or more in the last minute), on a host that is down,
  unreachable (no answer within ``timeout_s``), still booting, or a replica that cannot reach the
  sequencer; a host of the deployment is missing; blocks passed unaudited; or, with a standby in
  the spec, **replication** is not whole: the primary degraded to local durability (it answers
  txs on its own WAL alone), its standby is not in sync (missing, dead, failed, catching up: the
  arbiter would not let it take over), or an old primary is fenced (it came back after a
  takeover; ``raydex deploy`` puts a standby in its slot);
- 0 **healthy**: none of that.

``assess`` is pure (tests feed it facts); ``gather`` reads them from a connected Ray. Restarts in
the last minute come from whoever samples Ray's restart counter over time (the monitor keeps those
samples, ``RestartWindow``); without them only Ray's total is known.

Cost: a few GCS reads per actor (its name, its row in the actor table), ``ray.nodes()``, and one
status call per actor, all in parallel: a few seconds at most, however many actors are down.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..topology import HOST_LABEL
from . import record
from .view import (
    COMMITTER,
    NAMESPACE,
    REPLICA_PREFIX,
    SEQUENCER,
    audit_line,
    deployed,
    state_agreement,
)
from .view import status as actor_statuses

__all__ = [
    "BROKEN",
    "DEGRADED",
    "HEALTHY",
    "RESTART_LOOP",
    "ActorHealth",
    "Facts",
    "Health",
    "RestartWindow",
    "assess",
    "gather",
]

HEALTHY, BROKEN, DEGRADED = 0, 3, 4
#: restarts within the last minute that make an actor that is up again count as restarting: a
#: crash loop restarts every few seconds, while losing a host costs its actors two (the worker,
#: then the node)
RESTART_LOOP = 3
WINDOW_S = 60.0

#: Ray's actor states that mean "being (re)started now"
_STARTING = frozenset({"RESTARTING", "PENDING_CREATION", "DEPENDENCIES_UNREADY"})


@dataclass(frozen=True, slots=True)
class ActorHealth:
    """One planned actor: ``state`` is one of alive, restarting, unreachable, host down,
    missing, dead, booting, no sequencer, refused, fenced; ``ok`` only for alive."""

    name: str
    role: str
    host: str | None
    state: str
    restarts: int | None
    restarts_last_minute: int | None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.state == "alive"

    def line(self) -> str:
        where = f" on {self.host}" if self.host else ""
        bits = [f"{self.name} ({self.role}{where}): {self.state}"]
        if self.restarts_last_minute:
            bits.append(f"restarted {self.restarts_last_minute} times in the last minute")
        elif self.restarts:
            bits.append(f"{self.restarts} restarts since created")
        if self.detail:
            bits.append(self.detail)
        return ", ".join(bits)


@dataclass(frozen=True, slots=True)
class Health:
    """The verdict and everything it rests on."""

    actors: tuple[ActorHealth, ...]
    hosts: dict[str, bool]
    diverged: bool
    audit_failed: bool
    unaudited_blocks: int
    audit_lag_blocks: int | None
    problems: tuple[str, ...]
    #: with a standby in the spec: who is the primary, in which epoch, the standby, and whether
    #: every acknowledged block is on both (``replication_facts``); None without a standby
    replication: dict[str, Any] | None = None

    @property
    def code(self) -> int:
        if self.diverged or self.audit_failed or any(a.state == "refused" for a in self.actors):
            return BROKEN
        return DEGRADED if self.problems else HEALTHY

    @property
    def verdict(self) -> str:
        return {HEALTHY: "healthy", BROKEN: "broken", DEGRADED: "degraded"}[self.code]

    def line(self) -> str:
        if self.code == HEALTHY:
            lag = f", audit {self.audit_lag_blocks} blocks behind" if self.audit_lag_blocks else ""
            up = sum(self.hosts.values())
            return f"HEALTHY: {len(self.actors)} actors alive on {up} hosts{lag}"
        head = "BROKEN" if self.code == BROKEN else "DEGRADED"
        return f"{head}: " + "; ".join(self.problems)

    def as_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "verdict": self.verdict,
            "line": self.line(),
            "problems": list(self.problems),
            "hosts": self.hosts,
            "unaudited_blocks": self.unaudited_blocks,
            "audit_lag_blocks": self.audit_lag_blocks,
            "replication": self.replication,
            "actors": {
                a.name: {
                    "role": a.role,
                    "host": a.host,
                    "state": a.state,
                    "restarts": a.restarts,
                    "restarts_last_minute": a.restarts_last_minute,
                    "detail": a.detail,
                }
                for a in self.actors
            },
        }


@dataclass(frozen=True, slots=True)
class Facts:
    """What ``assess`` judges: the record's planned actors, Ray's view of each (``table``: name
    -> ``{"state", "num_restarts", "node_id"}``; None when Ray's state API did not answer), the
    live nodes' host labels (node id -> host; ``hosts_down``: planned hosts with no live node),
    each actor's status (or ``{"error": ...}``) and restarts in the last minute by name."""

    planned: Mapping[str, record.ActorEntry]
    table: Mapping[str, Mapping[str, Any]] | None
    live_nodes: Mapping[str, str]
    statuses: Mapping[str, Mapping[str, Any]]
    restarts_last_minute: Mapping[str, int] = field(default_factory=dict)


def assess(f: Facts) -> Health:
    """The verdict over ``f`` (see the module docstring)."""
    live_hosts = set(f.live_nodes.values())
    planned_hosts = {h for e in f.planned.values() if (h := e.host) is not None}
    hosts = {h: h in live_hosts for h in sorted(planned_hosts | live_hosts)}
    actors = tuple(_actor(name, entry, f) for name, entry in sorted(f.planned.items()))
    problems = [f"host {h} is down (no live Ray node carries its label)"
                for h, up in hosts.items() if not up]  # fmt: skip
    problems += [a.line() for a in actors if not a.ok]
    statuses = {n: s for n, s in f.statuses.items() if "error" not in s}
    diverged = [a.line() for a in state_agreement(statuses) if a.diverged]
    audit = (statuses.get(COMMITTER) or {}).get("signature_audit") or {}
    failed = audit_line(statuses)
    audit_failed = failed is not None and failed[1]
    skipped = int(audit.get("skipped_blocks") or 0)
    if skipped:
        problems.append(
            f"{skipped} blocks passed the signature audit unaudited (the committer rebuilt "
            "from a snapshot, or the WAL no longer held them): their signatures were never "
            "re-verified"
        )
    replication = replication_facts(f)
    if replication is not None:
        problems += replication_problems(replication, {a.name: a for a in actors})
    broken = diverged + ([failed[0]] if failed is not None and audit_failed else [])
    return Health(
        actors,
        hosts,
        bool(diverged),
        audit_failed,
        skipped,
        int(audit["pending_blocks"]) if "pending_blocks" in audit else None,
        tuple(broken + problems),
        replication,
    )


def replication_facts(f: Facts) -> dict[str, Any] | None:
    """With a standby in the plan (an actor of role ``standby``): the primary (the arbiter's,
    else ``SEQUENCER``), the epoch, the standby (the other sequencer of the plan), and the
    primary's and the arbiter's word on replication; None without a standby."""
    from raydex.actors.runtime import ARBITER_NAME

    if not any(e.role == "standby" for e in f.planned.values()):
        return None
    arbiter = f.statuses.get(ARBITER_NAME) or {}
    arbiter = {} if "error" in arbiter else arbiter
    primary = str(arbiter.get("primary") or SEQUENCER)
    standbys = sorted(
        n for n, e in f.planned.items() if e.role in ("sequencer", "standby") and n != primary
    )
    rep = (f.statuses.get(primary) or {}).get("replication") or {}
    return {
        "primary": primary,
        "epoch": arbiter.get("epoch", (f.statuses.get(primary) or {}).get("epoch")),
        "standby": standbys[0] if standbys else None,
        "durability": rep.get("durability"),
        "degraded": rep.get("degraded"),
        "in_sync": rep.get("in_sync"),
        "lag_blocks": rep.get("lag_blocks"),
        "acked_seq": rep.get("acked_seq"),
        "replicating_to": rep.get("standby_name"),
        "error": rep.get("error"),
        "arbiter_in_sync": arbiter.get("in_sync"),
        "arbiter_standby": arbiter.get("standby") or None,
    }


def replication_problems(r: Mapping[str, Any], actors: Mapping[str, ActorHealth]) -> list[str]:
    """Why replication is not whole (``replication_facts``; empty when it is): every
    acknowledged block on both hosts and a standby the arbiter would let take over. The primary
    not answering, or durability ``local``, says nothing here (the actor's own line does)."""
    primary, standby = r["primary"], r["standby"]
    if r["durability"] != "replicated":
        return []
    out = []
    if r["degraded"]:
        why = f": {r['error']}" if r["error"] else ""
        out.append(
            f"replication DEGRADED: the primary {primary} answers txs on its local WAL alone "
            f"(no ack from its standby {r['replicating_to'] or standby or '-'}{why}); blocks "
            "since then are on one host, and the standby may not take over"
        )
    elif not r["in_sync"] or r["arbiter_in_sync"] is False:
        lag = r["lag_blocks"]
        out.append(
            f"replication: the standby {r['replicating_to'] or standby or '-'} is not in sync "
            f"with the primary {primary}"
            + (f" ({lag} blocks behind)" if lag else "")
            + ": it may not take over yet"
        )
    if standby is None:
        out.append(f"replication: no standby planned beside the primary {primary}")
    elif standby in actors and not actors[standby].ok and not out:
        out.append(f"replication: the standby {standby} is {actors[standby].state}")
    return out


def _actor(name: str, entry: record.ActorEntry, f: Facts) -> ActorHealth:
    row = f.table.get(name) if f.table is not None else None
    st = f.statuses.get(name, {})
    restarts = int(row["num_restarts"]) if row is not None else None
    recent = f.restarts_last_minute.get(name)
    node_host = f.live_nodes.get(str(row.get("node_id") or "")) if row is not None else None
    host = entry.host or node_host or (st.get("placement") or {}).get("host")

    def health(state: str, detail: str = "") -> ActorHealth:
        return ActorHealth(name, entry.role, host, state, restarts, recent, detail)

    live_hosts = set(f.live_nodes.values())
    if f.table is not None and row is None:
        return health("missing", "no such actor: killed outside raydex? `raydex deploy` makes it")
    if row is not None and row["state"] == "DEAD":
        return health("dead", "Ray will not restart it: `raydex deploy` makes it again")
    if entry.host is not None and entry.host not in live_hosts:
        return health("host down", f"Ray restarts it when {entry.host} is back")
    if row is not None and row["state"] in _STARTING:
        return health("restarting", f"Ray's state {row['state']}")
    if "error" in st:
        return health("unreachable", str(st["error"]))
    if st.get("refused") and str(st["refused"]).startswith("fenced"):
        return health("fenced", f"{st['refused']}: `raydex deploy` makes it the standby")
    if st.get("refused"):
        return health("refused", f"refuses to start: {st['refused']}")
    if recent is not None and recent >= RESTART_LOOP:
        return health("restarting", "up now, but in a restart loop")
    if st.get("booting"):
        return health("booting", "not serving yet")
    if name.startswith(REPLICA_PREFIX):
        seq = st.get("sequencer") or {}
        if seq.get("reachable") is False:
            return health("no sequencer", f"its block stream is down: {seq.get('cause', '?')}")
    return health("alive")


class RestartWindow:
    """Restarts per actor in the last ``window_s``, from samples of Ray's cumulative restart
    counter (``num_restarts``): each increase between two samples is counted at the later one.
    The first sample of an actor counts nothing (its history before is unknown)."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._last: dict[str, int] = {}
        self._events: dict[str, deque[tuple[float, int]]] = {}

    def sample(self, counts: Mapping[str, int], now: float | None = None) -> None:
        t = time.monotonic() if now is None else now
        for name, n in counts.items():
            before = self._last.get(name)
            self._last[name] = n
            if before is not None and n > before:
                self._events.setdefault(name, deque()).append((t, n - before))
        for name in set(self._last) - set(counts):  # gone: forget
            self._last.pop(name, None)
            self._events.pop(name, None)

    def counts(self, now: float | None = None) -> dict[str, int]:
        t = time.monotonic() if now is None else now
        out = {}
        for name in self._last:
            events = self._events.get(name, deque())
            while events and events[0][0] < t - self.window_s:
                events.popleft()
            out[name] = sum(k for _, k in events)
        return out


def actor_table(namespace: str, names: Sequence[str]) -> dict[str, Any] | None:
    """Ray's view of each of ``names`` that exists in ``namespace``: its state, restarts and
    node, read from the GCS (the named actor's id, then its row: no dashboard needed). A name
    with no live actor is left out; None when this Ray cannot be asked."""
    import ray

    try:
        from ray._private.state import state as gcs
    except ImportError:  # pragma: no cover - a Ray without it: the verdict rests on the calls
        return None
    out: dict[str, Any] = {}
    for name in names:
        try:
            handle = ray.get_actor(name, namespace=namespace)
        except ValueError:  # no such actor (never made, killed, or dead for good)
            continue
        row = gcs.actor_table(handle._actor_id.hex())  # type: ignore[no-untyped-call]
        if row:
            node = (row.get("Address") or {}).get("NodeID") or None
            out[name] = {"state": row["State"], "num_restarts": row["NumRestarts"],
                         "node_id": node}  # fmt: skip
    return out


def live_nodes() -> dict[str, str]:
    """node id -> host label (else its IP) of every live Ray node."""
    import ray

    return {
        n["NodeID"]: str(n.get("Labels", {}).get(HOST_LABEL) or n["NodeManagerAddress"])
        for n in ray.nodes()  # type: ignore[no-untyped-call]
        if n.get("Alive")
    }


def gather(
    namespace: str = NAMESPACE,
    timeout_s: float = 5.0,
    state_hash: bool = True,
    restarts_last_minute: Mapping[str, int] | None = None,
) -> tuple[Facts, dict[str, Any]]:
    """The facts of a connected Ray, and the actors' statuses as ``deploy.status`` gives them.
    Actors Ray reports dead, restarting or on a dead node are not called (they cannot answer);
    the others are called in parallel and waited for ``timeout_s`` at most."""
    rec = deployed(namespace)
    nodes = live_nodes()
    table = actor_table(namespace, list(rec.actors))
    callable_ = [
        n
        for n, e in rec.actors.items()
        if (table is None or (n in table and table[n]["state"] == "ALIVE"))
        and (e.host is None or e.host in nodes.values())
    ]
    statuses = actor_statuses(namespace, timeout_s, state_hash=state_hash, names=callable_)
    facts = Facts(rec.actors, table, nodes, statuses, dict(restarts_last_minute or {}))
    return facts, statuses
