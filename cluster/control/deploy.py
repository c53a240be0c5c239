"""Deploying raydex onto a Ray cluster and reconciling it live with ``raydex.yaml``.

::

    raydex deploy raydex.yaml
       │  discover_topologies() ─► placement_for(spec) ─► one placement group per actor
       ▼
    ┌─────────────── Ray namespace "raydex" (detached, restartable named actors) ──────────┐
    │ raydex-sequencer ──blocks / tx log────► raydex-snapshot    raydex-committer          │
    │        ▲  ▲                                   │ Arrow snapshots (object store)       │
    │        │  └───────── tx batches ──────── raydex-replica-<group>-<i>  (per NUMA node)  │
    └──────────────────────────────────────────────────────────────────────────────────────┘

``deploy`` is idempotent: it creates what is missing and removes what the spec no longer asks
for, and never touches a running sequencer. Scaling a replica group is editing its count and
deploying again: new replicas boot hot from the snapshot and join the shared port; removed ones
drain (their port closes, WS clients are told to reconnect, which lands them on a sibling).

Placement groups are immutable in Ray, so each actor gets its own single-bundle group
(``raydex-<actor name>``), planned per replica group by ``placement_for``; adding a replica never
rebuilds its siblings' groups. A replica that keeps running keeps the cores it was given even if
a new plan would shuffle them (a redeploy of that replica moves it).

Configs: each actor gets the config dataclass the spec embeds (``spec.sequencer.config``,
``spec.snapshot.config``, a group's ``replica``), with the spec-wide fields already wired by the
spec and the deploy-time ones filled in here: the listen address, replica names, the
sequencer's address, the data-plane secret. Nothing is copied field by field.

Data-plane secret: the deploy that creates the sequencer makes a fresh one (``new_secret``) and
passes it in the sequencer's config; every later deploy asks the sequencer for it (a Ray call:
only members of the Ray cluster can make it) and passes it to the holder, the committer and each
new replica. It travels only inside Ray (actor creation arguments, which Ray keeps to restart an
actor), never through raydex.yaml or a file; a new deployment (after ``raydex down``) gets a new
one. Every data-plane caller of the sequencer must carry it (``actors/transport/core.py``).

Ports: the sequencer serves blocks on ``ports.data`` and the tx log on ``ports.data + 1``;
replicas share ``ports.http`` per host. ``bind`` is ``127.0.0.1`` for an embedded local Ray and
``0.0.0.0`` on a cluster; the others then reach the sequencer at the node IP it advertises
(``sequencer_host``).

Resources: a bundle on a NUMA node with room reserves exactly the cores its actor pins, so Ray
never schedules other work onto them. On an oversubscribed node (the 2-core demo) bundles share
cores and reserve only ``SHARED_REQUEST`` each (see there why); ``host_loads`` reports that per
host and ``raydex status`` prints it, so the token reservation is never mistaken for the truth.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import re
import socket
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from raydex.actors.transport import new_secret

from .. import hugepages
from ..topology import HOST_LABEL, Topology
from .placement import (
    BundlePlacement,
    GroupPlacement,
    actor_options,
    create_placement_groups,
    discover_topologies,
    placement_for,
)
from .spec import DeploySpec, ReplicaGroupSpec

NAMESPACE = "raydex"
SEQUENCER = "raydex-sequencer"
#: the standby sequencer (``sequencer.standby`` in the spec) and the arbiter of their epochs
STANDBY = "raydex-standby"
SNAPSHOT = "raydex-snapshot"
COMMITTER = "raydex-committer"
REPLICA_PREFIX = "raydex-replica-"


#: Ports :func:`free_port` never hands out: Ray's default worker port range. The kernel's
#: ephemeral range (``ip_local_port_range``) is avoided too, read at call time.
RAY_WORKER_PORTS = range(10002, 20000)


def _ephemeral_range() -> range:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return range(low, high + 1)
    except (OSError, ValueError):
        return range(32768, 61000)  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(pair: bool = False, avoid: Collection[int] = ()) -> int:
    """A free TCP port on 127.0.0.1 (``pair``: one whose successor is free too, for the
    sequencer's blocks + tx-log ports), chosen at random outside the kernel's ephemeral range
    and Ray's worker ports, and not in ``avoid`` (ports already chosen for the same deployment
    but not bound yet: both would look free). A port the OS hands out for ``bind(0)`` lies in
    the ephemeral range, where any outgoing connection (Ray opens many) may take it before the
    listener binds it: a loadtest's replica once failed to start with EADDRINUSE that way.
    Still racy against other listeners choosing at random; callers bind soon after."""
    ephemeral = _ephemeral_range()
    rng = random.SystemRandom()
    for _ in range(1000):
        port = rng.randrange(1024, 65535)
        if port in ephemeral or port + 1 in ephemeral or port in RAY_WORKER_PORTS:
            continue
        if port in avoid or (pair and port + 1 in avoid):
            continue
        if _bindable(port) and (not pair or _bindable(port + 1)):
            return port
    raise RuntimeError(
        f"no free port outside the ephemeral range {ephemeral.start}-{ephemeral.stop - 1} "
        f"and Ray's worker ports {RAY_WORKER_PORTS.start}-{RAY_WORKER_PORTS.stop - 1}"
    )


def replica_name(group: str, index: int) -> str:
    return f"{REPLICA_PREFIX}{group}-{index}"


@dataclass(frozen=True, slots=True)
class DeployResult:
    sequencer_target: str
    created: tuple[str, ...]
    removed: tuple[str, ...]
    replicas: tuple[str, ...]
    http_port: int


#: What a bundle on an oversubscribed NUMA node reserves. Such bundles share cores anyway, and
#: Ray cannot express sharing: reserving the planner's scaled-down share would leave nothing for
#: a later scale-up (placement groups are immutable), so they reserve a token and keep the NUMA
#: node's label/resource only for *where* they land.
SHARED_REQUEST = 0.05


def _reservable(b: BundlePlacement) -> BundlePlacement:
    return dataclasses.replace(b, request=SHARED_REQUEST) if b.shared else b


#: listen addresses that mean "every interface": the sequencer is then reached at its node's IP
_ANY_ADDRESS = frozenset({"0.0.0.0", "::", ""})


def sequencer_host(
    started: Mapping[str, Any], bind: str, status: Callable[[], Mapping[str, Any]]
) -> str:
    """The host other actors reach the sequencer's gRPC ports at.

    A specific ``bind`` address is that address. On every interface (``0.0.0.0``, a cluster) it is
    the node IP the sequencer advertises: ``started["address"]`` when its ``start()`` reports it,
    else the ``address`` of its ``status()`` (which every sequencer reports), else an error
    saying so rather than a ``KeyError``.
    """
    if bind not in _ANY_ADDRESS:
        return bind
    host = started.get("address") or status().get("address")
    if not host:
        raise RuntimeError(
            "the sequencer listens on every interface but reports no advertised address "
            "(neither start() nor status() has 'address'); deploy with --bind <its node IP>"
        )
    return str(host)


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


def _spawn_arbiter(namespace: str) -> Any:
    """The arbiter on the head node (its state in the GCS beside it; see
    ``actors/sequencer/arbiter.py``): detached, restarted by Ray, no CPU."""
    import ray

    from raydex.actors.runtime import ARBITER_NAME, DEPLOYMENT_ENV
    from raydex.actors.sequencer.arbiter import ArbiterActor

    return (
        ray.remote(ArbiterActor)
        .options(
            name=ARBITER_NAME,
            namespace=namespace,
            runtime_env={"env_vars": {DEPLOYMENT_ENV: namespace}},
            lifetime="detached",
            max_restarts=-1,
            max_task_retries=-1,
            num_cpus=0,
            resources={"node:__internal_head__": 0.001},
        )
        .remote(f"raydex/{namespace}/arbiter")
    )


def _ensure_standby(
    spec: DeploySpec,
    namespace: str,
    bind: str,
    secret: str,
    plane: str,
    leader: str,
    existing: set[str],
    bundle: Callable[[str], BundlePlacement | None],
    timeout_s: float,
) -> str | None:
    """A standby beside the primary ``leader``, in the other slot: ``STANDBY`` (the spec's
    ``sequencer.standby`` host and folders) while ``SEQUENCER`` is the primary, ``SEQUENCER``
    (the sequencer's host, its WAL folder moved aside first) after the standby took over. An old
    primary found fenced there (its host came back) is replaced. The primary is told where its
    new standby is (``set_standby``). Returns the name of a standby it started, None if none."""
    import ray

    from raydex.actors.sequencer import StandbyActor
    from raydex.actors.transport import target_of

    assert spec.sequencer.standby is not None
    other = STANDBY if leader == SEQUENCER else SEQUENCER
    if other in existing and _fenced(other, namespace, timeout_s):
        ray.kill(ray.get_actor(other, namespace=namespace), no_restart=True)
        _remove_group(other)
        existing.discard(other)
    if other in existing:
        return None
    _free_name(other, namespace, timeout_s)  # a lost primary's name may still be held
    base = spec.sequencer.config
    if other == STANDBY:
        wal_dir, snap_dir = spec.sequencer.standby.wal_dir, spec.sequencer.standby.snapshot_dir
    else:  # the old primary's slot: the holder's folder is not the standby's
        wal_dir, snap_dir = base.wal_dir, f"{base.snapshot_dir}-standby"
    cfg = dataclasses.replace(
        base,
        data_host=bind,
        data_plane_secret=secret,
        wal_dir=wal_dir,
        snapshot_dir=snap_dir,  # durability as the primary's: what it keeps once it took over
    )
    b = bundle("standby" if other == STANDBY else "sequencer")
    args = (cfg, b, spec.sequencer.gc, leader)
    actor = _spawn(
        StandbyActor, other, namespace, b, args, kwargs={"set_aside": other == SEQUENCER}
    )
    st = _until_serving(actor, timeout_s)
    target = target_of(plane, sequencer_host(st, bind, lambda: st), st["replication_port"])
    primary = ray.get_actor(leader, namespace=namespace)
    ray.get(primary.set_standby.remote(target, other), timeout=timeout_s)
    return other


def _free_name(name: str, namespace: str, timeout_s: float) -> None:
    """Wait until no actor holds ``name`` (one killed, or lost with its host, may hold it a
    while: killed again, for good), bounded by ``timeout_s``."""
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            held = ray.get_actor(name, namespace=namespace)
        except ValueError:
            return
        ray.kill(held, no_restart=True)
        if time.monotonic() > deadline:
            raise TimeoutError(f"the actor name {name} is still taken after {timeout_s}s")
        time.sleep(0.2)


def _fenced(name: str, namespace: str, timeout_s: float) -> bool:
    """Whether sequencer ``name`` refuses to start because another one holds the epoch."""
    import ray

    try:
        st: Any = ray.get(ray.get_actor(name, namespace=namespace).status.remote(), timeout=10)
    except Exception:  # gone or not answering: not known to be fenced
        return False
    return "fenced" in str(st.get("refused") or "")


def _until_serving(actor: Any, timeout_s: float) -> dict[str, Any]:
    """A standby's status once it serves replication (bounded by ``timeout_s``)."""
    import ray

    deadline = time.monotonic() + timeout_s
    while True:
        st: dict[str, Any] = ray.get(actor.status.remote(), timeout=timeout_s)
        if st.get("replication_port"):
            return st
        if time.monotonic() > deadline:
            raise TimeoutError(f"the standby did not serve within {timeout_s}s: {st}")
        time.sleep(0.1)


def _named(namespace: str) -> set[str]:
    import ray

    return {
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a.get("namespace") == namespace
    }


def _single_group(name: str, bundle: BundlePlacement) -> Any:
    ((_, pg),) = create_placement_groups(
        [GroupPlacement(name, (bundle,))], name_prefix="raydex", lifetime="detached"
    )
    return pg


def _remove_group(name: str) -> None:
    import ray
    from ray.util import remove_placement_group

    with contextlib.suppress(ValueError):  # never created (an unplanned actor)
        remove_placement_group(ray.util.get_placement_group(f"raydex-{name}"))


def _spawn(
    cls: type,
    name: str,
    namespace: str,
    bundle: BundlePlacement | None,
    args: tuple[Any, ...],
    num_cpus: float = 0.0,
    kwargs: Mapping[str, Any] | None = None,
) -> Any:
    import ray

    from raydex.actors.runtime import DEPLOYMENT_ENV

    # the actor's deployment, for its metrics labels and repr (see DEPLOYMENT_ENV)
    runtime_env: dict[str, Any] = {"env_vars": {DEPLOYMENT_ENV: namespace}}
    if bundle is not None and bundle.huge_pages:
        # both at the worker's start: glibc reads its tunables once, and pymalloc fills the
        # arenas it has before new ones (raydex.cluster.hugepages)
        runtime_env["env_vars"].update(hugepages.actor_env())
        runtime_env["py_executable"] = hugepages.worker_command()
    opts: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "runtime_env": runtime_env,
        "lifetime": "detached",
        "max_restarts": -1,
        "max_task_retries": 0,
        "max_concurrency": 1000,
    }
    if bundle is not None:
        opts.update(actor_options(bundle, _single_group(name, bundle), 0))
    else:
        opts["num_cpus"] = num_cpus
    return ray.remote(cls).options(**opts).remote(*args, **(kwargs or {}))


def deploy(
    spec: DeploySpec,
    *,
    namespace: str = NAMESPACE,
    bind: str = "127.0.0.1",
    topologies: Mapping[str, Topology] | None = None,
    place: bool = True,
    timeout_s: float = 180.0,
    replica_class: type | None = None,
    replica_kwargs: Mapping[str, Any] | None = None,
) -> DeployResult:
    """Reconcile the cluster with ``spec`` (see module docstring). ``place=False`` skips
    placement groups and pinning (a laptop, a test): actors then ask Ray for no CPU.
    ``replica_class`` (a ``ReplicaActor`` subclass taking ``replica_kwargs``) replaces the replica
    actor, e.g. the loadtest's instrumented one (observability/loadtest/instrument.py)."""
    import ray

    from raydex.actors.committer import CommitterActor
    from raydex.actors.replica import ReplicaActor
    from raydex.actors.runtime import ARBITER_NAME
    from raydex.actors.sequencer import SequencerActor
    from raydex.actors.snapshot import SnapshotActor
    from raydex.actors.transport import target_of

    plan: dict[str, GroupPlacement] = {}
    if place:
        tops = dict(topologies) if topologies is not None else discover_topologies()
        plan = {g.name: g for g in placement_for(spec, tops)}

    def bundle(group: str, index: int = 0) -> BundlePlacement | None:
        g = plan.get(group)
        return _reservable(g.bundles[index]) if g is not None else None

    existing = _named(namespace)
    created: list[str] = []
    standby = spec.sequencer.standby
    if standby is not None and ARBITER_NAME not in existing:
        arbiter = _spawn_arbiter(namespace)
        ray.get(arbiter.view.remote(), timeout=timeout_s)  # alive before a sequencer asks it
        created.append(ARBITER_NAME)
    if SEQUENCER not in existing:
        # The deployment's data-plane secret is born with its sequencer and lives in the actors'
        # creation arguments (Ray hands them to restarted actors too); later deploys ask the
        # sequencer for it. It is never written to raydex.yaml or any other file.
        cfg = dataclasses.replace(
            spec.sequencer.config, data_host=bind, data_plane_secret=new_secret()
        )
        args_q = (cfg, bundle("sequencer"), spec.sequencer.gc)
        _spawn(SequencerActor, SEQUENCER, namespace, bundle("sequencer"), args_q)
        created.append(SEQUENCER)
    leader = primary_name(namespace)  # a standby that took over, else the sequencer
    sequencer = ray.get_actor(leader, namespace=namespace)
    started: Any = ray.get(sequencer.start.remote(), timeout=timeout_s)
    host = sequencer_host(
        started, bind, lambda: ray.get(sequencer.status.remote(), timeout=timeout_s)
    )
    plane = started["data_plane"]["plane"]
    unix = started["data_plane"].get("unix") or {}
    delta_target = target_of(plane, host, started["data_port"], unix.get("blocks"))
    txlog_target = target_of(plane, host, started["txlog_port"], unix.get("txlog"))
    secret: str = ray.get(sequencer.data_plane_secret.remote(), timeout=timeout_s)
    if standby is not None:
        _ensure_standby(spec, namespace, bind, secret, plane, leader, existing, bundle, timeout_s)
    # CreateMarket of an existing market is refused (MARKET_EXISTS) and changes nothing.
    ray.get(sequencer.operator.remote(list(spec.markets)), timeout=timeout_s)

    if SNAPSHOT not in existing:
        args = (
            dataclasses.replace(spec.snapshot.config, data_plane_secret=secret),
            delta_target,
            txlog_target,
            bundle("snapshot"),
            spec.snapshot.gc,
        )
        _spawn(SnapshotActor, SNAPSHOT, namespace, bundle("snapshot"), args)
        created.append(SNAPSHOT)
    ray.get(ray.get_actor(SNAPSHOT, namespace=namespace).start.remote(), timeout=timeout_s)
    if COMMITTER not in existing:
        args_c = (delta_target, SNAPSHOT, namespace, secret, txlog_target, spec.chain_id)
        kw_c = {"bundle": bundle("committer"), "gc_spec": spec.committer.gc}
        _spawn(CommitterActor, COMMITTER, namespace, bundle("committer"), args_c, kwargs=kw_c)
        created.append(COMMITTER)

    desired: dict[str, BundlePlacement | None] = {}
    group_of: dict[str, ReplicaGroupSpec] = {}
    for group in spec.replica_groups:
        g = plan.get(group.name)
        if g is not None:
            bundles: list[BundlePlacement | None] = [_reservable(b) for b in g.bundles]
        else:
            count = group.replicas if group.replicas is not None else group.replicas_per_numa_node
            bundles = [None] * (count or 0)
        for i, b in enumerate(bundles):
            desired[replica_name(group.name, i)] = b
            group_of[replica_name(group.name, i)] = group
    current = {n for n in existing if n.startswith(REPLICA_PREFIX)}
    starting = []
    for name in sorted(set(desired) - current):
        group = group_of[name]
        cfg_r = dataclasses.replace(
            group.replica,
            name=name,
            sequencer_target=delta_target,
            http_host=bind,
            data_plane_secret=secret,
        )
        b = desired[name]
        args_r = (cfg_r, SNAPSHOT, namespace, b, COMMITTER, group.gc)
        actor = _spawn(
            replica_class or ReplicaActor, name, namespace, b, args_r, kwargs=replica_kwargs
        )
        starting.append(actor.start.remote())
        created.append(name)
    ray.get(starting, timeout=timeout_s)

    removed = sorted(current - set(desired))
    for name in removed:
        actor = ray.get_actor(name, namespace=namespace)
        try:
            ray.get(actor.drain.remote(), timeout=30)
        finally:
            ray.kill(actor, no_restart=True)
            _remove_group(name)
    return DeployResult(
        delta_target, tuple(created), tuple(removed), tuple(sorted(desired)), spec.ports.http
    )


def status(
    namespace: str = NAMESPACE, timeout_s: float = 30.0, state_hash: bool = True
) -> dict[str, Any]:
    """Every raydex actor's status (an unreachable one reports its error). ``state_hash=False``
    spares the replicas a state hash (O(state) on their event loop) when nothing compares it:
    they then report the last one they computed, with its seq (``state_hash_seq``)."""
    import ray

    out: dict[str, Any] = {}
    for name in sorted(_named(namespace)):
        try:
            actor = ray.get_actor(name, namespace=namespace)
            call: Any = (
                actor.status.remote()
                if state_hash or not name.startswith(REPLICA_PREFIX)
                else actor.status.remote(state_hash=False)
            )
            out[name] = ray.get(call, timeout=timeout_s)
        except Exception as exc:  # a status page must show a broken actor, not die on it
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


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
    head = (
        f"signature audit: {a['audited_txs']} txs re-verified through seq {a['seq']}"
        f" ({a['pending_blocks']} blocks behind, {a['skipped_blocks']} passed unaudited)"
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


def host_loads(statuses: Mapping[str, Mapping[str, Any]]) -> list[HostLoad]:
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
        amounts = [r for n, r in reserved.get(f"raydex-{name}", []) if n in ("", node_id)]
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


def down(namespace: str = NAMESPACE) -> list[str]:
    """Kill every raydex actor of ``namespace`` and remove their placement groups (the arbiter
    forgets its epoch first: a new deployment starts at epoch 1)."""
    import ray

    from raydex.actors.runtime import ARBITER_NAME

    names = sorted(_named(namespace))
    if ARBITER_NAME in names:
        with contextlib.suppress(Exception):
            ray.get(ray.get_actor(ARBITER_NAME, namespace=namespace).forget.remote(), timeout=30)
    for name in names:
        ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
        _remove_group(name)
    return names


def wait_ready(namespace: str = NAMESPACE, timeout_s: float = 60.0) -> dict[str, Any]:
    """Poll ``status`` until every replica reports the sequencer's seq or newer, and the state
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
