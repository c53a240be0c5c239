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
import itertools
import logging
import random
import re
import socket
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from raydex.actors.transport import new_secret

from .. import hugepages
from ..topology import HOST_LABEL, ROLE_LABEL, Topology
from . import record
from .monitor import MonitorActor
from .placement import (
    BundlePlacement,
    GroupPlacement,
    NodeFacts,
    PlacementError,
    actor_options,
    discover_nodes,
    placement_for,
    topologies_of,
)
from .spec import DeploySpec, ReplicaGroupSpec
from .view import (
    COMMITTER,
    MONITOR,
    NAMESPACE,
    REPLICA_PREFIX,
    SEQUENCER,
    SNAPSHOT,
    STANDBY,
    Agreement,
    HostLoad,
    audit_line,
    deployed,
    host_loads,
    named_actors,
    primary_name,
    replica_name,
    state_agreement,
    status,
    wait_ready,
)

__all__ = [  # the names a deployment is read by (``view.py``) are also here, beside deploy's
    "COMMITTER",
    "MONITOR",
    "NAMESPACE",
    "REPLICA_PREFIX",
    "SEQUENCER",
    "SHARED_REQUEST",
    "SNAPSHOT",
    "STANDBY",
    "Agreement",
    "DeployRefused",
    "DeployResult",
    "HostLoad",
    "audit_line",
    "check_ray_auth",
    "deploy",
    "deployed",
    "down",
    "free_port",
    "host_loads",
    "named_actors",
    "primary_name",
    "replica_name",
    "sequencer_host",
    "shortages",
    "state_agreement",
    "status",
    "wait_ready",
]


class _OwnGroupsWarning(logging.Filter):
    """Ray warns at every restartable detached actor scheduled in a placement group that removing
    the group kills it for good. That is how raydex stops an actor (``down``, a scale-down):
    printed once per actor of every deploy, the warning told an operator nothing to act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "restartable detached actor with a placement group" not in record.getMessage()


logging.getLogger("ray.actor").addFilter(_OwnGroupsWarning())


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


@dataclass(frozen=True, slots=True)
class DeployResult:
    sequencer_target: str
    created: tuple[str, ...]
    removed: tuple[str, ...]
    replicas: tuple[str, ...]
    http_port: int
    #: what the operator should know (a host that is away, its actors kept)
    warnings: tuple[str, ...] = ()


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


class DeployRefused(RuntimeError):
    """The deploy would be unsafe or cannot be planned; nothing was started (the message says
    why and what to do)."""


_LOOPBACK = re.compile(r"127(\.\d{1,3}){3}|::1|localhost")


def check_ray_auth(spec: DeploySpec, bind: str, nodes: Sequence[NodeFacts]) -> None:
    """Refuse a data plane on a non-loopback address while Ray's own token authentication is off
    on some node, unless the spec says ``allow_unauthenticated_ray: true``. The data-plane secret
    travels inside Ray (``data_plane_secret``): whoever reaches a Ray port of an unauthenticated
    cluster (the GCS, the Ray client server) can ask the sequencer for it and is then a member."""
    if _LOOPBACK.fullmatch(bind) or spec.allow_unauthenticated_ray:
        return
    open_nodes = sorted(n.labels.get(HOST_LABEL) or n.ip or n.node_id[:12] for n in nodes
                        if not n.ray_auth)  # fmt: skip
    if not open_nodes:
        return
    raise DeployRefused(
        f"refusing to deploy: the data plane would listen on {bind} while Ray's token "
        f"authentication is off on {', '.join(open_nodes)}. Anyone who reaches a Ray port there "
        "(the GCS, the Ray client server) can ask the sequencer for the deployment's data-plane "
        "secret and then submit blocks of txs as a member. Start Ray on every host with "
        "RAY_AUTH_MODE=token and the same RAY_AUTH_TOKEN (docs/operations.md, 'On a cluster'), "
        "or, on a network only your hosts reach, set `allow_unauthenticated_ray: true` in the "
        "deploy spec to accept that risk."
    )


def _reserve(
    name: str, bundle: BundlePlacement, namespace: str, rec: record.DeploymentRecord,
    timeout_s: float,
) -> Any:  # fmt: skip
    """Create ``name``'s single-bundle placement group (named ``<namespace>:<name>``), record its
    id before waiting, wait until Ray has reserved it."""
    from ray.util.placement_group import placement_group

    pg = placement_group(
        bundles=[bundle.bundle()],
        strategy="PACK",
        name=record.group_name(namespace, name),
        lifetime="detached",
        bundle_label_selector=[bundle.label_selector()],
    )
    rec.set_group(name, pg.id.hex())
    if not pg.wait(timeout_seconds=timeout_s):
        raise PlacementError(
            f"{name}: placement group not placed within {timeout_s:g}s; "
            + "; ".join(shortages([bundle]) or [f"wanted {bundle.bundle()} on {bundle.host}"])
        )
    return pg


class _Run:
    """What one ``deploy`` call started, so that a failure rolls back exactly that."""

    def __init__(self, namespace: str, rec: record.DeploymentRecord, place_timeout_s: float):
        self.namespace = namespace
        self.record = rec
        self.place_timeout_s = place_timeout_s
        self.started: list[str] = []

    def spawn(
        self,
        cls: type,
        name: str,
        role: str,
        bundle: BundlePlacement | None,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Any:
        import ray

        from raydex.actors.runtime import DEPLOYMENT_ENV

        group, index = (bundle.group, bundle.index) if bundle is not None else ("", 0)
        if role == "replica" and bundle is None:
            group, _, i = name.removeprefix(REPLICA_PREFIX).rpartition("-")
            index = int(i)
        self.record.add(name, record.ActorEntry(role, group, index, None, bundle))
        self.started.append(name)
        # the actor's deployment, for its metrics labels and repr (see DEPLOYMENT_ENV)
        runtime_env: dict[str, Any] = {"env_vars": {DEPLOYMENT_ENV: self.namespace}}
        if bundle is not None and bundle.huge_pages:
            # both at the worker's start: glibc reads its tunables once, and pymalloc fills the
            # arenas it has before new ones (raydex.cluster.hugepages)
            runtime_env["env_vars"].update(hugepages.actor_env())
            runtime_env["py_executable"] = hugepages.worker_command()
        opts: dict[str, Any] = {
            "name": name,
            "namespace": self.namespace,
            "runtime_env": runtime_env,
            "lifetime": "detached",
            "max_restarts": -1,
            "max_task_retries": 0,
            "max_concurrency": 1000,
            "num_cpus": 0.0,
            **(options or {}),
        }
        if bundle is not None:
            pg = _reserve(name, bundle, self.namespace, self.record, self.place_timeout_s)
            opts.update(actor_options(bundle, pg, 0))
        return ray.remote(cls).options(**opts).remote(*args, **(kwargs or {}))

    def roll_back(self) -> list[str]:
        """Kill what this run started and remove its placement groups; the record forgets them
        (an arbiter it started forgets its epoch: the deployment it began is not)."""
        from raydex.actors.runtime import ARBITER_NAME

        if ARBITER_NAME in self.started:
            _forget_epochs(self.namespace)
        for name in reversed(self.started):
            _stop(name, self.namespace, self.record.actors.get(name))
            self.record.forget(name)
        return list(self.started)


def _stop(name: str, namespace: str, entry: record.ActorEntry | None) -> None:
    import ray

    with contextlib.suppress(ValueError):  # already gone
        ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
    if entry is not None and entry.placement_group:
        record.remove_group(entry.placement_group)


def _forget_epochs(namespace: str) -> None:
    """Make the deployment's arbiter delete its kept epoch (best effort: one that cannot answer
    is killed anyway, and its state with the deployment's key stays in the GCS)."""
    import ray

    from raydex.actors.runtime import ARBITER_NAME

    with contextlib.suppress(Exception):
        ray.get(ray.get_actor(ARBITER_NAME, namespace=namespace).forget.remote(), timeout=30)


def _replica_names(group: ReplicaGroupSpec, running: Collection[int]) -> list[str]:
    """Without placement: ``count`` replicas, the running ones with the lowest indices first,
    then new ones with the lowest free indices."""
    count = group.replicas if group.replicas is not None else group.replicas_per_numa_node
    kept = sorted(running)[: count or 0]
    free = (i for i in itertools.count() if i not in kept)
    indices = kept + [next(free) for _ in range((count or 0) - len(kept))]
    return [replica_name(group.name, i) for i in sorted(indices)]


def _spawn_arbiter(run: _Run) -> Any:
    """The arbiter on the head node (its state in the GCS beside it; see
    ``actors/sequencer/arbiter.py``): detached, restarted by Ray, no CPU, one call at a time (its
    verdicts are read-modify-write), recorded as the deployment's (``down`` makes it forget)."""
    from raydex.actors.runtime import ARBITER_NAME
    from raydex.actors.sequencer.arbiter import ArbiterActor

    opts = {"max_task_retries": -1, "max_concurrency": 1,
            "resources": {"node:__internal_head__": 0.001}}  # fmt: skip
    key = f"raydex/{run.namespace}/arbiter"
    return run.spawn(ArbiterActor, ARBITER_NAME, "arbiter", None, (key,), options=opts)


def _ensure_standby(
    spec: DeploySpec,
    run: _Run,
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
    namespace = run.namespace
    other = STANDBY if leader == SEQUENCER else SEQUENCER
    if other in existing and _fenced(other, namespace, timeout_s):
        _stop(other, namespace, run.record.actors.get(other))
        run.record.forget(other)
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
    actor = run.spawn(
        StandbyActor, other, "standby", b, args, kwargs={"set_aside": other == SEQUENCER}
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


def deploy(
    spec: DeploySpec,
    *,
    namespace: str = NAMESPACE,
    bind: str = "127.0.0.1",
    topologies: Mapping[str, Topology] | None = None,
    place: bool = True,
    timeout_s: float = 180.0,
    place_timeout_s: float = 60.0,
    replica_class: type | None = None,
    replica_kwargs: Mapping[str, Any] | None = None,
    monitor: bool = True,
) -> DeployResult:
    """Reconcile the cluster with ``spec`` (see module docstring). ``place=False`` skips
    placement groups and pinning (a laptop, a test): actors then ask Ray for no CPU.
    ``topologies`` replaces discovering the live hosts (tests). ``replica_class`` (a
    ``ReplicaActor`` subclass taking ``replica_kwargs``) replaces the replica actor, e.g. the
    loadtest's instrumented one (observability/loadtest/instrument.py). ``monitor``: also run
    the deployment's monitor (``monitor.py``: health as metrics).

    Refuses (``DeployRefused``, nothing started) an unsafe bind (``check_ray_auth``), a host
    label carried by two nodes, or a plan the hosts' free resources cannot hold; a failure
    after something started rolls back what this call started and re-raises."""

    rec = deployed(namespace)
    existing = named_actors(namespace)
    nodes: list[NodeFacts] = []
    # recorded but gone (killed from outside, or its host lost for good): made again, its old
    # placement group removed first so that it never leaks
    for name in sorted(set(rec.actors) - existing):
        _stop(name, namespace, rec.actors[name])
        rec.forget(name)
    if not _LOOPBACK.fullmatch(bind) or (place and topologies is None):
        nodes = discover_nodes()
        check_ray_auth(spec, bind, nodes)
    plan: dict[str, GroupPlacement] = {}
    warnings: list[str] = []
    if place:
        tops = dict(topologies) if topologies is not None else topologies_of(nodes)
        plan = {g.name: g for g in placement_for(spec, tops, keep=rec.bundles())}
        running = set(rec.bundles().values())
        new = [b for g in plan.values() for b in g.bundles if b not in running]
        missing = _settled_shortages([_reservable(b) for b in new])
        if missing:
            raise DeployRefused("the plan does not fit, nothing was started: " + "; ".join(missing))
        for host in sorted(rec.hosts() - set(tops)):
            away = sorted(n for n, e in rec.actors.items() if e.host == host)
            warnings.append(f"host {host} is not in the cluster now: kept {', '.join(away)} "
                            "(Ray restarts them when it is back)")  # fmt: skip
    run = _Run(namespace, rec, place_timeout_s)
    try:
        result = _reconcile(spec, run, plan, existing, bind, timeout_s, replica_class,
                            replica_kwargs, monitor)  # fmt: skip
    except BaseException as exc:
        undone = run.roll_back()
        if undone:
            exc.add_note(f"rolled back what this deploy started: {', '.join(undone)}")
        raise
    return dataclasses.replace(result, warnings=tuple(warnings))


def _reconcile(
    spec: DeploySpec,
    run: _Run,
    plan: Mapping[str, GroupPlacement],
    existing: set[str],
    bind: str,
    timeout_s: float,
    replica_class: type | None,
    replica_kwargs: Mapping[str, Any] | None,
    monitor: bool,
) -> DeployResult:
    import ray

    from raydex.actors.committer import CommitterActor
    from raydex.actors.replica import ReplicaActor
    from raydex.actors.runtime import ARBITER_NAME
    from raydex.actors.sequencer import SequencerActor
    from raydex.actors.snapshot import SnapshotActor
    from raydex.actors.transport import target_of

    namespace = run.namespace

    def bundle(group: str, index: int = 0) -> BundlePlacement | None:
        g = plan.get(group)
        return _reservable(g.bundles[index]) if g is not None else None

    created: list[str] = []
    standby = spec.sequencer.standby
    if standby is not None and ARBITER_NAME not in existing:
        arbiter = _spawn_arbiter(run)
        ray.get(arbiter.view.remote(), timeout=timeout_s)  # alive before a sequencer asks it
        created.append(ARBITER_NAME)
    leader = primary_name(namespace)  # a standby that took over, else the sequencer
    # after a takeover the sequencer's slot is the standby's (``_ensure_standby``), never a new
    # primary's
    if SEQUENCER not in existing and leader == SEQUENCER:
        # The deployment's data-plane secret is born with its sequencer and lives in the actors'
        # creation arguments (Ray hands them to restarted actors too); later deploys ask the
        # sequencer for it. It is never written to raydex.yaml or any other file.
        cfg = dataclasses.replace(
            spec.sequencer.config, data_host=bind, data_plane_secret=new_secret()
        )
        args_q = (cfg, bundle("sequencer"), spec.sequencer.gc)
        run.spawn(SequencerActor, SEQUENCER, "sequencer", bundle("sequencer"), args_q)
        created.append(SEQUENCER)
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
        made = _ensure_standby(spec, run, bind, secret, plane, leader, existing, bundle, timeout_s)
        created.extend([made] if made else [])
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
        run.spawn(SnapshotActor, SNAPSHOT, "snapshot", bundle("snapshot"), args)
        created.append(SNAPSHOT)
    ray.get(ray.get_actor(SNAPSHOT, namespace=namespace).start.remote(), timeout=timeout_s)
    if COMMITTER not in existing:
        args_c = (delta_target, SNAPSHOT, namespace, secret, txlog_target, spec.chain_id)
        kw_c = {"bundle": bundle("committer"), "gc_spec": spec.committer.gc}
        run.spawn(CommitterActor, COMMITTER, "committer", bundle("committer"), args_c, kw_c)
        created.append(COMMITTER)

    desired: dict[str, BundlePlacement | None] = {}
    group_of: dict[str, ReplicaGroupSpec] = {}
    current = {n for n in existing if n.startswith(REPLICA_PREFIX) and n in run.record.actors}
    for group in spec.replica_groups:
        g = plan.get(group.name)
        if g is not None:
            for b in g.bundles:
                desired[replica_name(group.name, b.index)] = _reservable(b)
        else:
            running = [run.record.actors[n].index for n in current
                       if run.record.actors[n].group == group.name]  # fmt: skip
            desired.update(dict.fromkeys(_replica_names(group, running)))
        group_of.update({n: group for n in desired if n not in group_of})
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
        actor = run.spawn(replica_class or ReplicaActor, name, "replica", b, args_r,
                          replica_kwargs)  # fmt: skip
        starting.append(actor.start.remote())
        created.append(name)
    ray.get(starting, timeout=timeout_s)
    if monitor and MONITOR not in existing:
        # beside the GCS it watches: on the head when the head carries raydex's role label
        head = {"label_selector": {ROLE_LABEL: "head"}} if plan else {}
        run.spawn(MonitorActor, MONITOR, "monitor", None, (namespace,), options=head)
        created.append(MONITOR)

    removed = sorted(current - set(desired))
    for name in removed:
        actor = ray.get_actor(name, namespace=namespace)
        try:
            ray.get(actor.drain.remote(), timeout=30)
        finally:
            _stop(name, namespace, run.record.actors.get(name))
            run.record.forget(name)
    return DeployResult(
        delta_target, tuple(created), tuple(removed), tuple(sorted(desired)), spec.ports.http
    )


#: How long a plan that does not fit is re-read before it is refused: Ray's free-resource count
#: lags a placement group's removal by a few heartbeats (seen: 3 s after ``raydex down``).
SHORTAGE_SETTLE_S: Final = 6.0


def _settled_shortages(bundles: Sequence[BundlePlacement]) -> list[str]:
    """:func:`shortages`, re-read every 0.5 s for up to ``SHORTAGE_SETTLE_S`` while some remain
    (resources freed a moment ago, not yet counted free), so only a lasting shortage refuses."""
    deadline = time.monotonic() + SHORTAGE_SETTLE_S
    missing = shortages(bundles)
    while missing and time.monotonic() < deadline:
        time.sleep(0.5)
        missing = shortages(bundles)
    return missing


def shortages(bundles: Sequence[BundlePlacement]) -> list[str]:
    """What each host lacks to reserve ``bundles`` now: per host and resource (``CPU``,
    ``numa<N>``) the amount wanted against what the host's node has free (Ray's own count), with
    the placement groups holding that resource there, largest first. Empty when all fits."""
    import ray

    want: dict[str, dict[str, float]] = {}
    for b in bundles:
        per = want.setdefault(b.host, {})
        for res, amount in b.bundle().items():
            per[res] = per.get(res, 0.0) + amount
    if not want:
        return []
    nodes = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}  # type: ignore[no-untyped-call]
    host_of = {nid: str(n.get("Labels", {}).get(HOST_LABEL, "")) for nid, n in nodes.items()}
    held: dict[str, dict[str, list[tuple[float, str]]]] = {}
    for g in ray.util.placement_group_table().values():
        if g.get("state") not in ("CREATED", "RESCHEDULING"):
            continue
        for i, res in g.get("bundles", {}).items():
            host = host_of.get(g.get("bundles_to_node_id", {}).get(i, ""), "")
            for r, amount in res.items():
                held.setdefault(host, {}).setdefault(r, []).append((float(amount), g["name"]))
    free_of = _available_per_node()
    out = []
    for host, per in sorted(want.items()):
        nid = next((nid for nid in nodes if host_of[nid] == host), None)
        if nid is None:
            out.append(f"host {host}: no live Ray node carries that host label")
            continue
        total = nodes[nid].get("Resources", {})
        for res, amount in sorted(per.items()):
            holders = sorted(held.get(host, {}).get(res, []), reverse=True)
            have = float(total.get(res, 0.0))
            pg_free = have - sum(a for a, _ in holders)
            free = free_of[nid].get(res, 0.0) if nid in free_of else pg_free
            if amount > free + 1e-6:
                by = ", ".join(f"{n} {a:g}" for a, n in holders[:6]) or "none"
                out.append(
                    f"host {host} lacks {res}: the plan adds {amount:g}, {max(free, 0.0):g} of "
                    f"{have:g} free (placement groups holding it there: {by}; the rest, if any, "
                    "is held by tasks or actors outside placement groups)"
                )
    return out


def _available_per_node() -> dict[str, dict[str, float]]:
    """Free resources per live node as the GCS counts them; {} where this Ray cannot say."""
    try:
        from ray._private.state import available_resources_per_node

        found: dict[str, dict[str, float]] = available_resources_per_node()  # type: ignore[no-untyped-call]
        return found
    except Exception:  # a Ray without the call: the placement groups' count is used instead
        return {}


def down(namespace: str = NAMESPACE) -> list[str]:
    """Stop exactly what the deployment created (its record, ``record.py``; for a deployment
    from before records, the raydex-named actors): kill each actor, remove its placement group
    by id, then any group still named for the deployment (one a dying deploy created before
    recording it), and forget the record. Another actor in the namespace is left alone. Safe to
    repeat. Returns the names stopped. The arbiter forgets its epoch first (a new deployment
    starts at epoch 1)."""
    from raydex.actors.runtime import ARBITER_NAME

    rec = deployed(namespace)
    if ARBITER_NAME in rec.actors:
        _forget_epochs(namespace)
    for name, entry in sorted(rec.actors.items()):
        _stop(name, namespace, entry)
    for group_id, _ in list(record.leftover_groups(namespace)):
        record.remove_group(group_id)
    record.delete(namespace)
    return sorted(rec.actors)
