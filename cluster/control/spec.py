"""The deploy spec (``raydex.yaml``): what runs where, with which knobs. Validated on load.

Shape (every key below is optional unless marked *required*)::

    chain_id: int                         # *required*; signed into every tx
    ports: {http: int, data: int}         # data: formerly grpc (still read, with a notice)
    allow_unauthenticated_ray: bool       # false: no data plane beyond loopback without Ray auth
    sequencer: {<SequencerConfig knobs: wal_dir*, block_close, block_interval_ms, block_max_txs,
                wal_fsync, oracle_interval_ms, oracle_max_step_bps, ring_size, ...>,
                host, numa_node, cpus, pin, realtime, huge_pages, gc,
                durability, standby: {host*, numa_node, cpus, pin, realtime, huge_pages,
                                      wal_dir, snapshot_dir}}
    snapshot:  {<SnapshotConfig knobs: dir*, every_blocks, every_seconds, ring_size, keep,
                check_every_blocks>,
                host, numa_node, cpus, pin, realtime, huge_pages, gc}
    committer: {host, numa_node, cpus, pin, realtime, huge_pages, gc}
    markets:   [{<CreateMarket fields: market_index*, symbol*, price_decimals*, size_decimals*,
                 min_base_amount, ..., max_price_deviation>, initial_mark*}]
    replica_groups: [{name*, replicas_per_numa_node | replicas, numa_nodes, hosts,
                      cpus_per_replica, pin, realtime, huge_pages, gc, http_port,
                      <ReplicaConfig knobs: max_batch_txs,
                      max_batches_in_flight, busy_poll>, api: {<ApiConfig knobs>}}]

Each knob is declared once, where it is used. The ``sequencer`` section embeds the actors'
``SequencerConfig``, ``snapshot`` embeds ``SnapshotConfig``, each replica group embeds a
``ReplicaConfig`` (its ``api:`` mapping is the replica's ``ApiConfig``): their fields, types and
defaults are read from those dataclasses, so a knob added there is settable here with no change
to this module. A market is the ``CreateMarket`` transaction itself (field names, integer
domains and units read from its wire declaration: fees in ppm of notional, margin fractions in
bps, amounts in lots / micro-USDC), written with ``initial_mark``, a decimal price
(``"3300.25"``) converted exactly to integer ticks, instead of ``mark_price``; this module adds
only the defaults of the optional market fields (``MARKET_DEFAULTS``).

Wired fields: a config field that the deployment decides is not a key of the section. Those set
from elsewhere in the spec are filled in when the ``DeploySpec`` is built (so the embedded configs
tell the truth, and ``dataclasses.replace`` of a ``DeploySpec`` fills them again): the one
``chain_id`` (the sequencer's, every replica's and the ``/info`` ``network_id``), the snapshot
folder the sequencer recovers from (``snapshot.dir``), every replica's state-check interval
(``snapshot.check_every_blocks``: followers compare hashes at the same seqs), the data-plane
ports (``ports.data`` and the next one), each replica's HTTP port (``http_port`` or ``ports.http``)
and group. Those known only at deploy time (listen address, actor names, the sequencer's
advertised address) are filled in by ``deploy``. Writing a wired key is an error saying where
it comes from.

A replica group sets exactly one of ``replicas_per_numa_node`` (scale with the hardware) or
``replicas`` (a total, spread round-robin over the hosts' NUMA nodes); ``numa_nodes``/``hosts``
absent means all of them.

Validation: ``load_spec`` raises ``SpecError`` for YAML syntax errors, unknown keys, missing
required keys, wrong types (``true`` is not an int, ``1`` is not a bool; ints are accepted where a
float is expected) and wrong values; the message starts with the key path, e.g.
``replica_groups[1].pin: expected bool, got 'yes'``. The first problem found is reported.

Renamed keys (``RENAMED_KEYS``) are still read under their old name, with a one-line notice on
standard error naming the new one; writing both names is an error.

Cost: one YAML parse and a walk of the tree, milliseconds (importing the actor config classes
imports the actors' modules, ~1.5 s once); done by the CLI and the controller, never by a
data-plane actor.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from raydex.actors.replica import ApiConfig, ReplicaConfig
from raydex.actors.sequencer import SequencerConfig
from raydex.actors.snapshot import SnapshotConfig
from raydex.actors.transport import MAX_INFLIGHT_PER_STREAM
from raydex.codecs import MAX_BATCH_TXS, CreateMarket, MarketIndex, MarketStatus, spec_of

__all__ = [
    "MARKET_DEFAULTS",
    "CommitterSpec",
    "DeploySpec",
    "GcSpec",
    "PortsSpec",
    "ReplicaGroupSpec",
    "SequencerSpec",
    "SnapshotSpec",
    "RENAMED_KEYS",
    "SpecError",
    "load_spec",
]

_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?")
_RESERVED_GROUP_NAMES = frozenset({"sequencer", "snapshot", "committer"})
_Problems = Iterator[tuple[str, str]]
_D = TypeVar("_D")


class SpecError(ValueError):
    """A deploy spec that cannot be used; the message starts with the offending key path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


def _embed(wired: Mapping[str, str]) -> dict[str, Any]:
    """Field metadata: this dataclass-typed field is written inline in its parent's mapping,
    except the ``wired`` keys (dotted for nested ones), each mapped to where its value comes
    from."""
    return {"embed": dict(wired)}


@dataclass(frozen=True, slots=True)
class GcSpec:
    """CPython GC settings for one actor kind.

    Raising ``thresholds[0]`` makes young collections rarer but each one longer (fewer, bigger
    pauses); ``freeze_after_boot`` moves the boot-time heap (caches loaded from the snapshot) to the
    permanent generation so no collection ever traverses it again; ``gen2_disabled`` removes the
    longest pauses from the hot path at the price of cycles piling up until the scheduled full
    collection every ``collect_interval_s`` (taken between blocks, measured).
    ``freeze_after_collect`` freezes what survived each scheduled collection, so the next one
    traverses only what was allocated since: its pause follows the allocation of one interval,
    not the size of the heap (a replica's caches grow with the exchange). Cycles that form among
    frozen objects are freed only by a thawed collection: every ``thaw_every`` scheduled
    collections (0 = never) the frozen heap is unfrozen and collected whole, one long pause.
    """

    thresholds: tuple[int, int, int] = (700, 10, 10)
    freeze_after_boot: bool = False
    gen2_disabled: bool = False
    collect_interval_s: float = 0.0
    freeze_after_collect: bool = False
    thaw_every: int = 0

    def _problems(self) -> _Problems:
        if any(t < 0 for t in self.thresholds):
            yield "thresholds", f"must be >= 0, got {list(self.thresholds)}"
        if self.thaw_every < 0:
            yield "thaw_every", f"must be >= 0, got {self.thaw_every}"
        if self.collect_interval_s < 0:
            yield "collect_interval_s", f"must be >= 0, got {self.collect_interval_s}"
        if self.gen2_disabled and self.collect_interval_s <= 0:
            yield (
                "collect_interval_s",
                "must be > 0 when gen2_disabled (else cycles are never freed)",
            )


@dataclass(frozen=True, slots=True)
class PortsSpec:
    """Ports on every host: REST/WebSocket (shared by its replicas) and the data plane, whichever
    plane serves it (blocks and tx batches on ``data``, the snapshot holder's tx log on
    ``data + 1``)."""

    http: int = 8080
    data: int = 50051

    def _problems(self) -> _Problems:
        for key in ("http", "data"):
            if not 1 <= getattr(self, key) <= 65535:
                yield key, f"must be a port in 1..65535, got {getattr(self, key)}"
        if self.data == 65535:
            yield "data", "must leave data + 1 (the tx-log port) in range"
        if self.http in (self.data, self.data + 1):
            yield "data", f"must differ from http ({self.http}), as must data + 1"


def _placement_problems(host: str | None, numa_node: int, cpus: int) -> _Problems:
    if host is not None and not host:
        yield "host", "must be a non-empty host label or absent"
    if numa_node < 0:
        yield "numa_node", f"must be >= 0, got {numa_node}"
    if cpus < 1:
        yield "cpus", f"must be >= 1, got {cpus}"


#: never a key: `raydex deploy` makes one per deployment and hands it out through Ray
_SECRET_SOURCE = "`raydex deploy` (a per-deployment secret, never written to a file)"
_SEQUENCER_WIRED = {
    "chain_id": "the top-level chain_id",
    "snapshot_dir": "snapshot.dir",
    "data_host": "`raydex deploy --bind`",
    "data_port": "ports.data",
    "txlog_port": "ports.data + 1",
    "replication_port": "ports.data + 2",
    "durability": "sequencer.durability (replicated when a standby is named)",
    "standby_target": "`raydex deploy` (the standby's address)",
    "standby_name": "`raydex deploy` (the standby's actor name)",
    "data_plane_secret": _SECRET_SOURCE,
}


@dataclass(frozen=True, slots=True)
class StandbySpec:
    """Where the standby sequencer runs (``actors/sequencer/standby.py``): another host than the
    sequencer's, its own WAL (``wal_dir``; default the sequencer's with ``-standby`` appended,
    so two hosts sharing a filesystem never share a log) and snapshot folder (``snapshot_dir``;
    default ``snapshot.dir`` with ``-standby``). Its other knobs are the sequencer's."""

    host: str
    numa_node: int = 0
    cpus: int = 1
    pin: bool = True
    realtime: bool = False
    huge_pages: bool = True
    wal_dir: str = ""
    snapshot_dir: str = ""

    def _problems(self) -> _Problems:
        yield from _placement_problems(self.host, self.numa_node, self.cpus)


@dataclass(frozen=True, slots=True)
class SequencerSpec:
    """The sequencer's ``SequencerConfig`` (block cadence, WAL, oracle; see its fields for what
    each knob trades) and where it runs.

    ``host`` absent: the first host given to placement (the head). ``cpus``: cores it pins (kept
    apart from the replicas where the host has them); ``pin`` keeps its caches warm and stops
    migrations but the kernel can no longer balance it; ``realtime`` (SCHED_FIFO) cuts scheduling
    jitter but can starve everything else on its cores. ``huge_pages`` puts its heap on 2 MiB
    transparent huge pages (``raydex.cluster.hugepages``): fewer TLB misses when its core comes back
    cold, at the price of keeping its arena peak (freed arenas are reused, not returned).
    """

    config: SequencerConfig = field(metadata=_embed(_SEQUENCER_WIRED))
    host: str | None = None
    numa_node: int = 0
    cpus: int = 1
    pin: bool = True
    realtime: bool = False
    huge_pages: bool = True
    gc: GcSpec = GcSpec()
    #: "local" or "replicated" (``SequencerConfig.durability``); unset: replicated when a
    #: standby is named, else local
    durability: Literal["local", "replicated"] | None = None
    #: a standby sequencer on another host (``StandbySpec``): replicated durability and takeover
    standby: StandbySpec | None = None

    @property
    def wal_dir(self) -> str:
        return str(self.config.wal_dir)

    def _problems(self) -> _Problems:
        c = self.config
        if c.block_close not in ("durable", "timer"):
            yield "block_close", f"must be durable or timer, got {c.block_close!r}"
        if not 0 < c.block_interval_ms <= 10_000:
            yield "block_interval_ms", f"must be in (0, 10000], got {c.block_interval_ms}"
        if not 1 <= c.block_max_txs <= 1_000_000:
            yield "block_max_txs", f"must be in 1..1000000, got {c.block_max_txs}"
        if not c.wal_dir:
            yield "wal_dir", "must be a non-empty path"
        if c.ring_size < 1:
            yield "ring_size", f"must be >= 1, got {c.ring_size}"
        if not 0 <= c.oracle_interval_ms <= 3_600_000:
            yield "oracle_interval_ms", f"must be in 0..3600000, got {c.oracle_interval_ms}"
        if not 1 <= c.oracle_max_step_bps <= 10_000:
            yield "oracle_max_step_bps", f"must be in 1..10000, got {c.oracle_max_step_bps}"
        if not 1 <= c.max_batch_txs <= MAX_BATCH_TXS:
            yield "max_batch_txs", f"must be in 1..{MAX_BATCH_TXS}, got {c.max_batch_txs}"
        if c.max_inflight_batches < 1:
            yield "max_inflight_batches", f"must be >= 1, got {c.max_inflight_batches}"
        if c.verify_slice_ms <= 0:
            yield "verify_slice_ms", f"must be > 0, got {c.verify_slice_ms}"
        if c.durability not in ("local", "replicated"):
            yield "durability", f"must be local or replicated, got {c.durability!r}"
        if c.replication_timeout_s < 0:
            yield "replication_timeout_s", f"must be >= 0, got {c.replication_timeout_s}"
        yield from _placement_problems(self.host, self.numa_node, self.cpus)
        if self.standby is not None and self.standby.host == self.host:
            yield "standby", "must be on another host than the sequencer's"
        if self.durability == "replicated" and self.standby is None:
            yield "durability", "replicated needs a standby (sequencer.standby)"


@dataclass(frozen=True, slots=True)
class SnapshotSpec:
    """The snapshot holder's ``SnapshotConfig`` (cadence, folder, catch-up ring, folders kept;
    see its fields for what each knob trades) and where it runs (as ``SequencerSpec``)."""

    config: SnapshotConfig = field(metadata=_embed({"data_plane_secret": _SECRET_SOURCE}))
    host: str | None = None
    numa_node: int = 0
    cpus: int = 1
    pin: bool = True
    realtime: bool = False
    huge_pages: bool = True
    gc: GcSpec = GcSpec()

    @property
    def dir(self) -> str:
        return str(self.config.dir)

    def _problems(self) -> _Problems:
        c = self.config
        if c.every_blocks < 1:
            yield "every_blocks", f"must be >= 1, got {c.every_blocks}"
        if c.check_every_blocks < 1:
            yield "check_every_blocks", f"must be >= 1, got {c.check_every_blocks}"
        if c.every_seconds <= 0:
            yield "every_seconds", f"must be > 0, got {c.every_seconds}"
        if not c.dir:
            yield "dir", "must be a non-empty path"
        for key in ("ring_size", "keep"):
            if getattr(c, key) < 1:
                yield key, f"must be >= 1, got {getattr(c, key)}"
        yield from _placement_problems(self.host, self.numa_node, self.cpus)


@dataclass(frozen=True, slots=True)
class CommitterSpec:
    """Where the committer runs (as ``SequencerSpec``; it has no knobs of its own). Off the hot
    path, but it hashes and re-verifies every block: its ``cpus`` are reserved in Ray like any
    other actor's, so nothing else is scheduled onto the cores it pins."""

    host: str | None = None
    numa_node: int = 0
    cpus: int = 1
    pin: bool = True
    realtime: bool = False
    huge_pages: bool = True
    gc: GcSpec = GcSpec()

    def _problems(self) -> _Problems:
        yield from _placement_problems(self.host, self.numa_node, self.cpus)


# --- markets: the CreateMarket transaction, read from its wire declaration -----------------------

#: Values of the optional ``CreateMarket`` fields when a market leaves them out (the spec's
#: choice, not a second declaration of the fields: names, types and domains come from the wire).
MARKET_DEFAULTS: Mapping[str, int] = {
    "min_base_amount": 1,
    "min_quote_amount": 0,
    "maker_fee": 0,
    "taker_fee": 0,
    "liquidation_fee": 0,
    "default_initial_margin_fraction": 500,
    "min_initial_margin_fraction": 200,
    "maintenance_margin_fraction": 120,
    "closeout_margin_fraction": 80,
    "max_price_deviation": 1000,
}
_MARKET_WIRED = {
    "mark_price": "initial_mark (a decimal price)",
    "status": "the deployment (markets are created active)",
}


def _market_keys() -> list[str]:
    names = [f.name for f in spec_of(CreateMarket).fields if f.name not in _MARKET_WIRED]
    return [*names, "initial_mark"]


def _build_market(value: object, path: str) -> CreateMarket:
    """A ``markets[i]`` mapping -> the ``CreateMarket`` the deployer submits (active)."""
    if not isinstance(value, Mapping):
        raise SpecError(path, f"expected a mapping, got {_show(value)}")
    known = _market_keys()
    _check_keys(value, known, _MARKET_WIRED, path)
    kwargs: dict[str, Any] = {}
    for f in spec_of(CreateMarket).fields:
        if f.name in _MARKET_WIRED:
            continue
        sub = _join(path, f.name)
        if f.name in value:
            kwargs[f.name] = _convert_scalar(value[f.name], f.py_type, sub)
        elif f.name in MARKET_DEFAULTS:
            kwargs[f.name] = MARKET_DEFAULTS[f.name]
        else:
            raise SpecError(sub, "required key missing")
        rng = f.range
        if rng is not None and not rng.lo <= kwargs[f.name] <= rng.hi:
            raise SpecError(sub, f"must be in {rng.lo}..{rng.hi}, got {kwargs[f.name]}")
    if "initial_mark" not in value:
        raise SpecError(_join(path, "initial_mark"), "required key missing")
    mark = _convert_scalar(_decimal_text(value["initial_mark"]), str, _join(path, "initial_mark"))
    for key, message in _market_problems(kwargs, mark):
        raise SpecError(_join(path, key), message)
    kwargs["market_index"] = MarketIndex(kwargs["market_index"])
    ticks = int(Decimal(mark).scaleb(kwargs["price_decimals"]))
    return CreateMarket(**kwargs, mark_price=ticks, status=MarketStatus.ACTIVE)


def _decimal_text(value: object) -> object:
    """``initial_mark`` may be written unquoted (a YAML number): keep the digits as typed."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def _market_problems(m: Mapping[str, Any], initial_mark: str) -> _Problems:
    symbol = m["symbol"]
    if not symbol or not symbol.isascii() or len(symbol) > 16:
        yield "symbol", f"must be 1..16 ASCII characters, got {symbol!r}"
    if m["price_decimals"] + m["size_decimals"] > 6:
        yield "size_decimals", "price_decimals + size_decimals must be <= 6 (USDC decimals)"
    yield from _mark_problems(initial_mark, m["price_decimals"])
    if m["min_initial_margin_fraction"] > m["default_initial_margin_fraction"]:
        yield "min_initial_margin_fraction", "must be <= default_initial_margin_fraction"
    if m["maintenance_margin_fraction"] >= m["min_initial_margin_fraction"]:
        yield "maintenance_margin_fraction", "must be < min_initial_margin_fraction"
    if m["closeout_margin_fraction"] >= m["maintenance_margin_fraction"]:
        yield "closeout_margin_fraction", "must be < maintenance_margin_fraction"


def _mark_problems(text: str, price_decimals: int) -> _Problems:
    try:
        mark = Decimal(text)
    except InvalidOperation:
        yield "initial_mark", f"expected a decimal price, got {text!r}"
        return
    if not mark.is_finite():
        yield "initial_mark", f"expected a decimal price, got {text!r}"
        return
    ticks = mark.scaleb(price_decimals)
    rng = next(f.range for f in spec_of(CreateMarket).fields if f.name == "mark_price")
    if ticks != ticks.to_integral_value():
        yield "initial_mark", f"{text!r} has more than {price_decimals} decimals"
    elif rng is not None and not rng.lo <= int(ticks) <= rng.hi:
        yield "initial_mark", f"{text!r} is out of the uint32 tick range"


# --- replica groups -------------------------------------------------------------------------------

_REPLICA_WIRED = {
    "name": "the deployment (raydex-replica-<group>-<i>)",
    "sequencer_target": "the sequencer's advertised address",
    "http_host": "`raydex deploy --bind`",
    "http_port": "the group's http_port or ports.http",
    "reuse_port": "the deployment (replicas of a host share its port)",
    "chain_id": "the top-level chain_id",
    "group": "the group's name",
    "state_check_blocks": "snapshot.check_every_blocks",
    "api.network_id": "the top-level chain_id",
    "data_plane_secret": _SECRET_SOURCE,
}
#: ApiConfig knobs that must be >= 1 (the others: >= 0); absent ones are skipped.
_API_POSITIVE = (
    "max_body_bytes",
    "max_batch",
    "ws_max_message_bytes",
    "ws_max_inflight_txs",
    "max_subscriptions",
    "ws_queue_limit",
    "ws_conflation_limit",
    "ws_send_buffer_bytes",
    "ws_close_timeout_s",
    "max_list_limit",
    "auth_max_lifetime_s",
    "ws_max_connections_per_ip",
    "rate_limit_max_keys",
    "rejection_cache_size",
)


def _replica_template() -> ReplicaConfig:
    return ReplicaConfig(name="", sequencer_target="")


@dataclass(frozen=True, slots=True)
class ReplicaGroupSpec:
    """A set of identical API replicas, placed per NUMA node (or a total spread over them).

    More replicas per NUMA node serve more connections and parallel dry-runs, but each one applies
    every block (CPU per replica is constant, not divided). ``cpus_per_replica`` > 1 leaves room for
    the replica's extra threads (gRPC's on the gRPC plane) on its own cores. ``pin`` keeps caches
    warm and avoids migrations (less jitter) but stops the kernel from balancing load;
    ``realtime`` (SCHED_FIFO) cuts scheduling latency but can starve everything else on those
    cores; ``huge_pages`` as in ``SequencerSpec``. ``replica`` is the ``ReplicaConfig`` every
    replica of the group starts from (its knobs and ``api:`` are written inline in the group; the
    deployment fills in the wired fields).
    """

    name: str
    replicas_per_numa_node: int | None = None
    replicas: int | None = None
    numa_nodes: tuple[int, ...] | None = None
    hosts: tuple[str, ...] | None = None
    cpus_per_replica: int = 1
    pin: bool = True
    realtime: bool = False
    huge_pages: bool = True
    gc: GcSpec = GcSpec()
    #: this group's own REST/WS port (absent: ``ports.http``, shared with the other groups); an
    #: A/B loadtest gives each group its own so both can be driven and measured apart
    http_port: int | None = None
    replica: ReplicaConfig = field(
        default_factory=_replica_template, metadata=_embed(_REPLICA_WIRED)
    )

    @property
    def api(self) -> ApiConfig:
        return self.replica.api

    def _problems(self) -> _Problems:
        if self.http_port is not None and not 1 <= self.http_port <= 65535:
            yield "http_port", f"must be a port in 1..65535, got {self.http_port}"
        if not _NAME.fullmatch(self.name):
            yield "name", f"must match {_NAME.pattern} (a DNS label), got {self.name!r}"
        elif self.name in _RESERVED_GROUP_NAMES:
            yield "name", f"{self.name!r} is reserved"
        if (self.replicas_per_numa_node is None) == (self.replicas is None):
            yield "replicas", "set exactly one of replicas_per_numa_node and replicas"
        for key in ("replicas_per_numa_node", "replicas"):
            value = getattr(self, key)
            if value is not None and value < 0:
                yield key, f"must be >= 0, got {value}"
        if self.numa_nodes is not None:
            if not self.numa_nodes or any(n < 0 for n in self.numa_nodes):
                yield "numa_nodes", f"must be non-empty ids >= 0, got {list(self.numa_nodes)}"
            elif len(set(self.numa_nodes)) != len(self.numa_nodes):
                yield "numa_nodes", f"has duplicates: {list(self.numa_nodes)}"
        if self.hosts is not None and (not self.hosts or not all(self.hosts)):
            yield "hosts", f"must be non-empty host labels, got {list(self.hosts)}"
        if self.cpus_per_replica < 1:
            yield "cpus_per_replica", f"must be >= 1, got {self.cpus_per_replica}"
        if self.replica.max_batch_txs < 1:
            yield "max_batch_txs", f"must be >= 1, got {self.replica.max_batch_txs}"
        if not 1 <= self.replica.max_batches_in_flight <= MAX_INFLIGHT_PER_STREAM:
            yield (
                "max_batches_in_flight",
                (
                    f"must be in 1..{MAX_INFLIGHT_PER_STREAM} (the sequencer runs at most "
                    f"{MAX_INFLIGHT_PER_STREAM} batches per stream), got "
                    f"{self.replica.max_batches_in_flight}"
                ),
            )
        yield from _api_problems(self.replica.api)


def _api_problems(api: ApiConfig) -> _Problems:
    for f in dataclasses.fields(api):
        value = getattr(api, f.name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        low = 1 if f.name in _API_POSITIVE else 0
        if value < low:
            yield f"api.{f.name}", f"must be >= {low}, got {value}"


# --- the whole deployment -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeploySpec:
    """A whole deployment: chain, ports, sequencer, snapshot holder, markets, replica groups.

    Building one fills the embedded configs' wired fields from ``chain_id``, ``ports`` and
    ``snapshot`` (see the module docstring): ``spec.sequencer.config.chain_id == spec.chain_id``,
    and so on, also after ``dataclasses.replace``.
    """

    chain_id: int
    sequencer: SequencerSpec
    snapshot: SnapshotSpec
    markets: tuple[CreateMarket, ...]
    replica_groups: tuple[ReplicaGroupSpec, ...] = ()
    ports: PortsSpec = PortsSpec()
    committer: CommitterSpec = CommitterSpec()
    #: deploy even though Ray's own token authentication is off while the data plane listens
    #: beyond loopback (``deploy.check_ray_auth`` says why that is refused by default)
    allow_unauthenticated_ray: bool = False

    def __post_init__(self) -> None:
        seq = self.sequencer
        seq_config = dataclasses.replace(
            seq.config,
            chain_id=self.chain_id,
            snapshot_dir=self.snapshot.config.dir,
            data_port=self.ports.data,
            txlog_port=self.ports.data + 1,
            replication_port=self.ports.data + 2,
            durability=seq.durability or ("replicated" if seq.standby else "local"),
        )
        standby = seq.standby
        if standby is not None:
            standby = dataclasses.replace(
                standby,
                wal_dir=standby.wal_dir or f"{seq_config.wal_dir}-standby",
                snapshot_dir=standby.snapshot_dir or f"{self.snapshot.config.dir}-standby",
            )
        object.__setattr__(
            self, "sequencer", dataclasses.replace(seq, config=seq_config, standby=standby)
        )
        groups = tuple(self._wired_group(g) for g in self.replica_groups)
        object.__setattr__(self, "replica_groups", groups)

    def _wired_group(self, group: ReplicaGroupSpec) -> ReplicaGroupSpec:
        r = group.replica
        replica = dataclasses.replace(
            r,
            chain_id=self.chain_id,
            group=group.name,
            http_port=group.http_port if group.http_port is not None else self.ports.http,
            reuse_port=True,
            state_check_blocks=self.snapshot.config.check_every_blocks,
            api=dataclasses.replace(r.api, network_id=self.chain_id),
        )
        return dataclasses.replace(group, replica=replica)

    def replica_group(self, name: str) -> ReplicaGroupSpec:
        for group in self.replica_groups:
            if group.name == name:
                return group
        raise KeyError(name)

    def _problems(self) -> _Problems:
        if not 0 <= self.chain_id <= 2**32 - 1:
            yield "chain_id", f"must be in 0..{2**32 - 1}, got {self.chain_id}"
        if not self.markets:
            yield "markets", "at least one market is required"
        for key, attr in (
            ("markets", "market_index"),
            ("markets", "symbol"),
            ("replica_groups", "name"),
        ):
            seen: set[object] = set()
            for i, item in enumerate(getattr(self, key)):
                value = getattr(item, attr)
                if value in seen:
                    yield f"{key}[{i}].{attr}", f"duplicate {value!r}"
                seen.add(value)
        cap = self.sequencer.config.max_batch_txs
        for i, group in enumerate(self.replica_groups):
            if group.replica.max_batch_txs > cap:
                yield (
                    f"replica_groups[{i}].max_batch_txs",
                    f"must be <= sequencer.max_batch_txs ({cap}), got "
                    f"{group.replica.max_batch_txs}",
                )


def load_spec(source: str | os.PathLike[str]) -> DeploySpec:
    """Load and validate a deploy spec from a path (``Path`` or a ``*.yaml``/``*.yml`` string, or
    any existing file) or from YAML text."""
    if isinstance(source, os.PathLike) or (
        "\n" not in source and (source.endswith((".yaml", ".yml")) or os.path.isfile(source))
    ):
        text = Path(source).read_text()
    else:
        text = source
    try:
        tree = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError("", f"invalid YAML: {exc}") from None
    _rename_keys(tree)
    return _build(DeploySpec, tree, "")


#: Keys that were renamed: old dotted path -> new key name in the same mapping.
RENAMED_KEYS: Mapping[str, str] = {
    # it names the data plane's port whichever plane serves it, not only gRPC
    "ports.grpc": "data",
}


def _rename_keys(tree: object) -> None:
    """Read each old key of ``RENAMED_KEYS`` as its new name, printing one line that says so."""
    for old, new in RENAMED_KEYS.items():
        *parents, key = old.split(".")
        node = tree
        for parent in parents:
            node = node.get(parent) if isinstance(node, dict) else None
        if not isinstance(node, dict) or key not in node:
            continue
        renamed = ".".join([*parents, new])
        if new in node:
            raise SpecError(old, f"the old name of {renamed}: write only {renamed}")
        node[new] = node.pop(key)
        print(
            f"raydex: deploy spec key {old} is deprecated, read as {renamed}: rename it",
            file=sys.stderr,
        )


# --- the generic, type-driven reader ------------------------------------------------------------
#
# A dataclass is read from a mapping of its field names. A field whose metadata has ``embed`` is
# a dataclass written inline (its keys at the parent's level, minus the wired ones); ``wired``
# (dotted paths below the dataclass being read) lists fields that are not keys at all: a required
# wired field gets a zero placeholder, the others keep their defaults, until the owner fills them.

_PLACEHOLDER: dict[Any, Any] = {str: "", int: 0, float: 0.0, bool: False}
#: readers of field types that are not dataclasses or plain scalars
_READERS: dict[Any, Callable[[object, str], Any]] = {CreateMarket: _build_market}


def _build(cls: type[_D], value: object, path: str, wired: Mapping[str, str] | None = None) -> _D:
    if not isinstance(value, Mapping):
        raise SpecError(path, f"expected a mapping, got {_show(value)}")
    wired = wired or {}
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    embeds = {n: f.metadata["embed"] for n, f in fields.items() if "embed" in f.metadata}
    own = [n for n in fields if n not in embeds and n not in wired]
    inline = {n: _keys_of(hints[n], embeds[n]) for n in embeds}
    known = [*own, *(k for keys in inline.values() for k in keys)]
    # a wired key of this dataclass or of an inline one is refused naming where it comes from
    sources = {k: v for e in embeds.values() for k, v in e.items()}
    _check_keys(value, known, {**sources, **wired}, path)
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        sub = _join(path, name)
        if name in embeds:
            part = {k: v for k, v in value.items() if k in inline[name]}
            kwargs[name] = _build(hints[name], part, path, embeds[name])
        elif name in wired:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                kwargs[name] = _PLACEHOLDER[hints[name]]
        elif name in value:
            kwargs[name] = _convert(value[name], hints[name], sub, _below(wired, name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise SpecError(sub, "required key missing")
    try:
        obj = cls(**kwargs)
    except (ValueError, TypeError) as exc:  # a dataclass's own check (__post_init__), named here
        raise SpecError(path, str(exc)) from None
    problems = getattr(obj, "_problems", None)
    for key, message in problems() if problems is not None else ():
        raise SpecError(_join(path, key), message)
    return obj


def _keys_of(tp: Any, wired: Mapping[str, str]) -> list[str]:
    return [f.name for f in dataclasses.fields(tp) if f.name not in wired]


def _check_keys(
    value: Mapping[Any, Any], known: list[str], wired: Mapping[str, str], path: str
) -> None:
    for key in value:
        if key in known:
            continue
        if key in wired:
            raise SpecError(_join(path, str(key)), f"not settable here: it is set by {wired[key]}")
        raise SpecError(_join(path, str(key)), f"unknown key (known: {', '.join(known)})")


def _below(wired: Mapping[str, str], name: str) -> dict[str, str]:
    prefix = name + "."
    return {k[len(prefix) :]: v for k, v in wired.items() if k.startswith(prefix)}


def _is_dataclass(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _convert(value: object, tp: Any, path: str, wired: Mapping[str, str] | None = None) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = (a for a in args if a is not type(None))
        return _convert(value, inner, path, wired)
    if origin is Literal:
        if value not in args:
            raise SpecError(path, f"expected one of {list(args)}, got {_show(value)}")
        return value
    if origin is tuple:
        return _convert_tuple(value, args, path)
    if tp in _READERS:
        return _READERS[tp](value, path)
    if _is_dataclass(tp):
        return _build(tp, value, path, wired)
    return _convert_scalar(value, tp, path)


def _convert_tuple(value: object, args: tuple[Any, ...], path: str) -> tuple[Any, ...]:
    if not isinstance(value, list):
        raise SpecError(path, f"expected a list, got {_show(value)}")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_convert(v, args[0], f"{path}[{i}]") for i, v in enumerate(value))
    if len(value) != len(args):
        raise SpecError(path, f"expected a list of {len(args)} items, got {len(value)}")
    return tuple(
        _convert(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True))
    )


def _convert_scalar(value: object, tp: Any, path: str) -> Any:
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value  # type: ignore[arg-type]
    elif tp is str:
        ok = isinstance(value, str)
    else:  # pragma: no cover - a field type this reader does not know is a bug here
        raise TypeError(f"{path}: unsupported field type {tp!r}")
    if not ok:
        raise SpecError(path, f"expected {tp.__name__}, got {_show(value)}")
    return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _show(value: object) -> str:
    return "null" if value is None else repr(value)
