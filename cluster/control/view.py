"""A deployment seen from outside: its actors, their statuses, and what they say together.

Names: every deployment is a Ray namespace (``NAMESPACE``, or ``raydex-loadtest-<pid>``) holding
the named actors ``SEQUENCER``, ``SNAPSHOT``, ``COMMITTER``, ``MONITOR`` and the replicas
``REPLICA_PREFIX<group>-<index>``, and with a standby (``sequencer.standby``) ``STANDBY`` and the
arbiter (``actors/runtime/primary.py``'s ``ARBITER_NAME``), which names the primary
(``primary_name``: ``STANDBY`` once it took over); the deployment's record (``record.py``)
lists which of them it created (``deployed``).

- ``status`` asks every actor for its status in parallel, bounded in time altogether;
- ``state_agreement`` groups their state hashes by the seq they reflect (a difference at one seq
  is a divergence), ``audit_line`` reads the committer's signature audit;
- ``host_loads`` sets the cores the actors pin per host against what Ray reserves for them;
- ``wait_ready`` polls until every replica has caught up (tests, the loadtest).

Kept apart from ``deploy.py`` so that the health verdict (``health.py``) and the monitor that
``deploy`` starts read a deployment without importing what creates one.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from ..topology import HOST_LABEL
from . import record

__all__ = [
    "COMMITTER",
    "MONITOR",
    "NAMESPACE",
    "REPLICA_PREFIX",
    "SEQUENCER",
    "SNAPSHOT",
    "STANDBY",
    "Agreement",
    "HostLoad",
    "audit_line",
    "deployed",
    "host_loads",
    "named_actors",
    "primary_name",
    "replica_name",
    "state_agreement",
    "status",
    "wait_ready",
]

NAMESPACE = "raydex"
SEQUENCER = "raydex-sequencer"
#: the standby sequencer (``sequencer.standby`` in the spec; ``actors/sequencer/standby.py``)
STANDBY = "raydex-standby"
SNAPSHOT = "raydex-snapshot"
COMMITTER = "raydex-committer"
REPLICA_PREFIX = "raydex-replica-"
#: the deployment's watcher (``monitor.py``): its health as Prometheus metrics
MONITOR = "raydex-monitor"


def replica_name(group: str, index: int) -> str:
    return f"{REPLICA_PREFIX}{group}-{index}"


def named_actors(namespace: str) -> set[str]:
    import ray

    return {
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a.get("namespace") == namespace
    }


#: the names raydex gives its actors: a deployment made before records existed is recognised by
#: them (a user's actor with another name is never touched)
def _raydex_name(name: str) -> bool:
    from raydex.actors.runtime import ARBITER_NAME

    fixed = (SEQUENCER, STANDBY, SNAPSHOT, COMMITTER, MONITOR, ARBITER_NAME)
    return name in fixed or name.startswith(REPLICA_PREFIX)


def _role_of(name: str) -> str:
    from raydex.actors.runtime import ARBITER_NAME

    fixed = {SEQUENCER: "sequencer", STANDBY: "standby", SNAPSHOT: "snapshot",
             COMMITTER: "committer", MONITOR: "monitor", ARBITER_NAME: "arbiter"}  # fmt: skip
    return fixed.get(name, "replica")


def primary_name(namespace: str = NAMESPACE) -> str:
    """The primary sequencer's actor name: the one the arbiter names (a standby that took over),
    else ``SEQUENCER`` (no arbiter: a deployment without a standby)."""
    import ray

    from raydex.actors.runtime import ARBITER_NAME

    try:
        arbiter = ray.get_actor(ARBITER_NAME, namespace=namespace)
    except ValueError:
        return SEQUENCER
    view: Any = ray.get(arbiter.view.remote(), timeout=30)
    return str(view["primary"] or SEQUENCER)


def deployed(namespace: str = NAMESPACE) -> record.DeploymentRecord:
    """The deployment's record (``record.py``), or for one deployed before records existed the
    raydex-named actors of the namespace (without their groups and bundles)."""
    found = record.load(namespace)
    if found is not None:
        return found
    legacy = record.DeploymentRecord(namespace)
    for name in sorted(named_actors(namespace)):
        if _raydex_name(name):
            legacy.actors[name] = record.ActorEntry(_role_of(name))
    return legacy


def status(
    namespace: str = NAMESPACE,
    timeout_s: float = 30.0,
    state_hash: bool = True,
    names: Collection[str] | None = None,
) -> dict[str, Any]:
    """Every actor of the deployment's status (``names``: those instead), asked in parallel and
    waited for at most ``timeout_s`` altogether; one that cannot answer reports an ``error``
    (not running, failed, or no answer in time). ``state_hash=False`` spares the replicas a state
    hash (O(state) on their event loop) when nothing compares it: they then report the last one
    they computed, with its seq (``state_hash_seq``)."""
    import ray

    out: dict[str, Any] = {}
    calls: dict[str, Any] = {}
    for name in sorted(names if names is not None else deployed(namespace).actors):
        try:
            actor = ray.get_actor(name, namespace=namespace)
        except ValueError:
            out[name] = {"error": "not running (no such actor)"}
            continue
        quick = not state_hash and name.startswith(REPLICA_PREFIX)
        calls[name] = actor.status.remote(state_hash=False) if quick else actor.status.remote()
    refs = list(calls.values())
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
    answered = set(ready)
    for name, ref in calls.items():
        if ref not in answered:
            out[name] = {"error": f"no answer within {timeout_s:g} s"}
            with contextlib.suppress(Exception):  # best effort: the call is abandoned anyway
                ray.cancel(ref)
            continue
        try:
            out[name] = ray.get(ref)
        except Exception as exc:  # a status page must show a broken actor, not die on it
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return dict(sorted(out.items()))


@dataclass(frozen=True, slots=True)
class Agreement:
    """The actors that reported a state hash at one seq, and whether their hashes agree."""

    seq: int
    hashes: dict[str, str]

    @property
    def diverged(self) -> bool:
        return len(set(self.hashes.values())) > 1

    def line(self) -> str:
        names = sorted(self.hashes)
        if self.diverged:
            each = ", ".join(f"{n}={self.hashes[n][:12]}" for n in names)
            return f"STATE DIVERGED at seq {self.seq}: {each}"
        if len(names) == 1:
            return f"state at seq {self.seq}: {names[0]} alone (no other actor hashed this seq)"
        h = self.hashes[names[0]][:12]
        return f"state agrees at seq {self.seq} ({h}): {', '.join(names)}"


def state_agreement(statuses: Mapping[str, Mapping[str, Any]]) -> list[Agreement]:
    """Group the state hashes of ``statuses`` (from ``status()``) by the seq they reflect
    (``state_hash_seq``; the sequencer's is its newest snapshot's), with the followers' hashes
    at the newest checkpoint seq they share (``state_checks``) and at any where they differ.
    Hashes are comparable only at equal seq: every role hashes the same state the same way
    (``raydex.engine.state_digest``), so two different hashes at one seq are a real divergence."""
    by_seq: dict[int, dict[str, str]] = {}
    checks: dict[int, dict[str, str]] = {}
    for name, st in statuses.items():
        h, seq = st.get("state_hash"), st.get("state_hash_seq")
        if h and isinstance(seq, int) and seq >= 0:
            by_seq.setdefault(seq, {})[name] = str(h)
        for check_seq, digest in (st.get("state_checks") or {}).items():
            checks.setdefault(int(check_seq), {})[name] = str(digest)
    # the followers' state checks (actors/runtime/checks.py): hashes at the same checkpoint seqs.
    # Every checkpoint two of them hashed is compared; shown: the newest, and any that differs.
    shared = sorted(s for s, hashes in checks.items() if len(hashes) > 1)
    shown = {s for s in shared if len(set(checks[s].values())) > 1}
    shown.update(shared[-1:])
    for s in shown:
        by_seq.setdefault(s, {}).update(checks[s])
    return [Agreement(seq, by_seq[seq]) for seq in sorted(by_seq)]


def audit_line(statuses: Mapping[str, Mapping[str, Any]]) -> tuple[str, bool] | None:
    """The committer's signature audit (``actors/audit.py``) in one line, and whether it failed
    (a forged tx was executed: commitments are withheld); None when no committer audits."""
    a = statuses.get(COMMITTER, {}).get("signature_audit")
    if not a:
        return None
    start = f"from seq {a['from_seq']} (this committer's start), " if a.get("from_seq") else ""
    head = (
        f"signature audit: {a['audited_txs']} txs re-verified through seq {a['seq']}"
        f" ({start}{a['pending_blocks']} blocks behind, {a['skipped_blocks']} passed unaudited)"
    )
    if a["failed_at"] is None:
        return head + ": all valid", False
    first = (a.get("failures") or [{}])[0]
    return (
        f"SIGNATURE AUDIT FAILED at seq {a['failed_at']}: {a['failed_txs']} txs, first"
        f" {first.get('tx_hash', '?')[:16]} of account {first.get('account_index', '?')}"
        f" ({first.get('reason', '?')}); commitments withheld from that block on. {head}",
        True,
    )


@dataclass(frozen=True, slots=True)
class HostLoad:
    """What the placed raydex actors of one host pin, against what Ray reserves for them.

    ``cores``: the host's cores as advertised to Ray (its ``numa<N>`` resources, ``raydex
    node-args``; Ray's CPU count when it has none); ``pinned``: cores the actors pin, summed over
    actors (a core pinned by two actors counts twice); ``reserved``: the distinct CPU amounts
    their bundles reserve in Ray. Where ``pinned`` exceeds ``cores`` the actors share cores and
    each bundle reserves only ``SHARED_REQUEST``, so Ray would schedule other work onto cores
    that are in fact busy: ``line()`` says so.
    """

    host: str
    cores: int
    pinned: int
    actors: tuple[str, ...]
    reserved: tuple[float, ...]

    @property
    def oversubscribed(self) -> bool:
        return self.pinned > self.cores

    def line(self) -> str:
        amounts = ", ".join(f"{r:g}" for r in self.reserved) or "nothing"
        if self.oversubscribed:
            return (
                f"host {self.host}: {self.cores} cores, {self.pinned} pinned requests: "
                f"oversubscribed, Ray reserves {amounts} CPU per actor "
                f"({len(self.actors)} actors share the cores; Ray counts them as nearly free: "
                "run no other Ray work on this host)"
            )
        return (
            f"host {self.host}: {self.cores} cores, {self.pinned} pinned by "
            f"{len(self.actors)} actors; Ray reserves {amounts} CPU per actor (the cores it pins)"
        )


def host_loads(
    statuses: Mapping[str, Mapping[str, Any]], namespace: str = NAMESPACE
) -> list[HostLoad]:
    """Per host, the cores the placed actors of ``statuses`` (from ``status()``) pin and what
    Ray reserves for them (their placement groups); actors without a placement are left out."""
    import ray

    nodes = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}  # type: ignore[no-untyped-call]
    reserved: dict[str, list[tuple[str, float]]] = {}
    for pg in ray.util.placement_group_table().values():
        if pg.get("state") == "CREATED" and pg.get("bundles"):
            node = pg.get("bundles_to_node_id", {}).get(0, "")
            reserved.setdefault(pg["name"], []).append(
                (node, float(pg["bundles"][0].get("CPU", 0)))
            )
    per_host: dict[str, list[tuple[str, int, float | None]]] = {}
    for name, st in statuses.items():
        placement = st.get("placement") or {}
        node_id = placement.get("node_id")
        if not node_id or node_id not in nodes:
            continue
        host = str(
            nodes[node_id].get("Labels", {}).get(HOST_LABEL) or nodes[node_id]["NodeManagerAddress"]
        )
        held = reserved.get(record.group_name(namespace, name), [])
        amounts = [r for n, r in held if n in ("", node_id)]
        per_host.setdefault(host, []).append(
            (name, len(placement.get("cpus") or ()), amounts[0] if amounts else None)
        )
    out = []
    for host, actors in per_host.items():
        node = next(
            n
            for n in nodes.values()
            if str(n.get("Labels", {}).get(HOST_LABEL) or n["NodeManagerAddress"]) == host
        )
        res = node.get("Resources", {})
        numa = sum(v for k, v in res.items() if re.fullmatch(r"numa\d+", k))
        cores = int(numa or res.get("CPU", 0))
        out.append(
            HostLoad(
                host,
                cores,
                sum(k for _, k, _ in actors),
                tuple(sorted(n for n, _, _ in actors)),
                tuple(sorted({r for _, _, r in actors if r is not None})),
            )
        )
    return sorted(out, key=lambda h: h.host)


def wait_ready(namespace: str = NAMESPACE, timeout_s: float = 60.0) -> dict[str, Any]:
    """Poll ``status`` until every replica reports the primary's seq or newer, and the state
    hash of its seq (a replica computes it once quiet: ``ReplicaService.status``) (bounded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        st = status(namespace)
        seq = st.get(primary_name(namespace), {}).get("seq", 0)
        reps = [v for k, v in st.items() if k.startswith(REPLICA_PREFIX)]
        if reps and all(
            r.get("seq", -1) >= seq and r.get("state_hash_seq") == r.get("seq") for r in reps
        ):
            return st
        if time.monotonic() > deadline:
            raise TimeoutError(f"replicas not caught up after {timeout_s}s: {st}")
        time.sleep(0.2)
