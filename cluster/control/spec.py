"""The deploy spec (``raydex.yaml``): what runs where, with which knobs. Validated on load.

Shape (every key below is optional unless marked *required*; defaults are the dataclass defaults)::

    chain_id: int                         # *required*; signed into every tx (WIRE.md)
    ports: {http: int, grpc: int}
    sequencer: {block_interval_ms, block_max_txs, wal_dir*, wal_fsync: block|none,
                host, numa_node, cpus, pin, realtime, gc}
    snapshot:  {every_blocks, every_seconds, dir*, host, numa_node, cpus, pin, realtime, gc}
    markets:   [{market_index*, symbol*, price_decimals*, size_decimals*, initial_mark*, ...}]
    replica_groups: [{name*, replicas_per_numa_node | replicas, numa_nodes, hosts,
                      cpus_per_replica, pin, realtime, gc, http_port}]

Semantics: a market mirrors the ``CreateMarket`` transaction (same field names and units: fees in
ppm of notional, margin fractions in bps, amounts in lots / micro-USDC) except ``initial_mark``,
a decimal price (``"3300.25"``) converted exactly to integer ticks; ``MarketSpec.create_market()``
builds the transaction the deployer submits. The integer domains are read from the wire
declaration of ``CreateMarket`` (never written twice). A replica group sets exactly one of
``replicas_per_numa_node`` (scale with the hardware) or ``replicas`` (a total, spread round-robin
over the hosts' NUMA nodes); ``numa_nodes``/``hosts`` absent means all of them.

Validation: ``load_spec`` raises ``SpecError`` for YAML syntax errors, unknown keys, missing
required keys, wrong types (``true`` is not an int, ``1`` is not a bool; ints are accepted where a
float is expected) and wrong values; the message starts with the key path, e.g.
``replica_groups[1].pin: expected bool, got 'yes'``. The first problem found is reported.

Cost: one YAML parse and a walk of the tree, milliseconds; done by the CLI and the controller, never
by a data-plane actor.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from raydex.codecs import MAX_48, CreateMarket, MarketIndex, MarketStatus, Range, spec_of

__all__ = [
    "DeploySpec",
    "GcSpec",
    "MarketSpec",
    "PortsSpec",
    "ReplicaGroupSpec",
    "SequencerSpec",
    "SnapshotSpec",
    "SpecError",
    "load_spec",
]

_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?")
_RESERVED_GROUP_NAMES = frozenset({"sequencer", "snapshot"})
_Problems = Iterator[tuple[str, str]]
_D = TypeVar("_D")


class SpecError(ValueError):
    """A deploy spec that cannot be used; the message starts with the offending key path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


@dataclass(frozen=True, slots=True)
class GcSpec:
    """CPython GC settings for one actor kind.

    Raising ``thresholds[0]`` makes young collections rarer but each one longer (fewer, bigger
    pauses); ``freeze_after_boot`` moves the boot-time heap (caches loaded from the snapshot) to the
    permanent generation so no collection ever traverses it again; ``gen2_disabled`` removes the
    longest pauses from the hot path at the price of cycles piling up until the scheduled full
    collection every ``collect_interval_s`` (taken between blocks, measured).
    """

    thresholds: tuple[int, int, int] = (700, 10, 10)
    freeze_after_boot: bool = False
    gen2_disabled: bool = False
    collect_interval_s: float = 0.0

    def _problems(self) -> _Problems:
        if any(t < 0 for t in self.thresholds):
            yield "thresholds", f"must be >= 0, got {list(self.thresholds)}"
        if self.collect_interval_s < 0:
            yield "collect_interval_s", f"must be >= 0, got {self.collect_interval_s}"
        if self.gen2_disabled and self.collect_interval_s <= 0:
            yield (
                "collect_interval_s",
                "must be > 0 when gen2_disabled (else cycles are never freed)",
            )


@dataclass(frozen=True, slots=True)
class PortsSpec:
    """Ports on every host: REST/WebSocket (shared by its replicas) and the gRPC data plane."""

    http: int = 8080
    grpc: int = 50051

    def _problems(self) -> _Problems:
        for key in ("http", "grpc"):
            if not 1 <= getattr(self, key) <= 65535:
                yield key, f"must be a port in 1..65535, got {getattr(self, key)}"
        if self.http == self.grpc:
            yield "grpc", f"must differ from http ({self.http})"


def _placement_problems(host: str | None, numa_node: int, cpus: int) -> _Problems:
    if host is not None and not host:
        yield "host", "must be a non-empty host label or absent"
    if numa_node < 0:
        yield "numa_node", f"must be >= 0, got {numa_node}"
    if cpus < 1:
        yield "cpus", f"must be >= 1, got {cpus}"


@dataclass(frozen=True, slots=True)
class SequencerSpec:
    """Block cadence, write-ahead log and placement of the sequencer.

    A block closes after ``block_interval_ms`` or ``block_max_txs`` txs, whichever comes first:
    a shorter interval lowers latency under light load, a larger cap raises throughput under heavy
    load at the cost of a longer block (and of a larger fsync). ``wal_fsync: block`` fsyncs once per
    block before acknowledging (durable, adds the fsync to block time); ``none`` leaves it to the
    page cache (faster; a host crash loses the unsynced tail). ``host`` absent: the first host given
    to placement (the head). ``oracle_interval_ms`` > 0 makes the sequencer stamp SetMarkPrice
    commands that move each mark toward its book mid, at most ``oracle_max_step_bps`` per step
    (0: marks change only by operator command).
    """

    wal_dir: str
    block_interval_ms: float = 1.0
    block_max_txs: int = 1000
    wal_fsync: Literal["block", "none"] = "block"
    oracle_interval_ms: float = 0.0
    oracle_max_step_bps: int = 50
    host: str | None = None
    numa_node: int = 0
    cpus: int = 1
    pin: bool = True
    realtime: bool = False
    gc: GcSpec = GcSpec()

    def _problems(self) -> _Problems:
        if not 0 < self.block_interval_ms <= 10_000:
            yield "block_interval_ms", f"must be in (0, 10000], got {self.block_interval_ms}"
        if not 1 <= self.block_max_txs <= 1_000_000:
            yield "block_max_txs", f"must be in 1..1000000, got {self.block_max_txs}"
        if not self.wal_dir:
            yield "wal_dir", "must be a non-empty path"
        if not 0 <= self.oracle_interval_ms <= 3_600_000:
            yield "oracle_interval_ms", f"must be in 0..3600000, got {self.oracle_interval_ms}"
        if not 1 <= self.oracle_max_step_bps <= 10_000:
            yield "oracle_max_step_bps", f"must be in 1..10000, got {self.oracle_max_step_bps}"
        yield from _placement_problems(self.host, self.numa_node, self.cpus)


@dataclass(frozen=True, slots=True)
class SnapshotSpec:
    """Snapshot cadence and placement of the snapshot holder.

    A snapshot is taken every ``every_blocks`` blocks or ``every_seconds`` seconds, whichever comes
    first: more often means a faster replica boot and a shorter WAL replay, at the cost of more
    Arrow materialization (CPU on the holder, object-store memory, disk writes).
    """

    dir: str
    every_blocks: int = 1000
    every_seconds: float = 5.0
    host: str | None = None
    numa_node: int = 0
    cpus: int = 1
    pin: bool = True
    realtime: bool = False
    gc: GcSpec = GcSpec()

    def _problems(self) -> _Problems:
        if self.every_blocks < 1:
            yield "every_blocks", f"must be >= 1, got {self.every_blocks}"
        if self.every_seconds <= 0:
            yield "every_seconds", f"must be > 0, got {self.every_seconds}"
        if not self.dir:
            yield "dir", "must be a non-empty path"
        yield from _placement_problems(self.host, self.numa_node, self.cpus)


def _decimal_text(value: object, path: str) -> object:
    """``initial_mark`` may be written unquoted (a YAML number): keep the digits as typed."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


@dataclass(frozen=True, slots=True)
class MarketSpec:
    """One perpetual market, in ``CreateMarket``'s fields and units (see the module docstring)."""

    market_index: int
    symbol: str
    price_decimals: int
    size_decimals: int
    initial_mark: str = field(metadata={"coerce": _decimal_text})
    min_base_amount: int = 1
    min_quote_amount: int = 0
    maker_fee: int = 0
    taker_fee: int = 0
    liquidation_fee: int = 0
    default_initial_margin_fraction: int = 500
    min_initial_margin_fraction: int = 200
    maintenance_margin_fraction: int = 120
    closeout_margin_fraction: int = 80
    max_price_deviation: int = 1000

    @property
    def mark_price(self) -> int:
        """``initial_mark`` in integer ticks (exact; validated on load)."""
        return int(Decimal(self.initial_mark).scaleb(self.price_decimals))

    def create_market(self) -> CreateMarket:
        """The operator transaction that creates this market, active."""
        return CreateMarket(
            market_index=MarketIndex(self.market_index),
            symbol=self.symbol,
            price_decimals=self.price_decimals,
            size_decimals=self.size_decimals,
            min_base_amount=self.min_base_amount,
            min_quote_amount=self.min_quote_amount,
            maker_fee=self.maker_fee,
            taker_fee=self.taker_fee,
            liquidation_fee=self.liquidation_fee,
            default_initial_margin_fraction=self.default_initial_margin_fraction,
            min_initial_margin_fraction=self.min_initial_margin_fraction,
            maintenance_margin_fraction=self.maintenance_margin_fraction,
            closeout_margin_fraction=self.closeout_margin_fraction,
            max_price_deviation=self.max_price_deviation,
            mark_price=self.mark_price,
            status=MarketStatus.ACTIVE,
        )

    def _problems(self) -> _Problems:
        own = {f.name for f in dataclasses.fields(self)}
        for f in spec_of(CreateMarket).fields:
            rng = f.range
            if rng is not None and f.name in own:
                yield from _range_problem(f.name, getattr(self, f.name), rng)
        if not self.symbol or not self.symbol.isascii() or len(self.symbol) > 16:
            yield "symbol", f"must be 1..16 ASCII characters, got {self.symbol!r}"
        if self.price_decimals + self.size_decimals > 6:
            yield "size_decimals", "price_decimals + size_decimals must be <= 6 (USDC decimals)"
        yield from self._mark_problems()
        yield from self._margin_problems()

    def _mark_problems(self) -> _Problems:
        try:
            mark = Decimal(self.initial_mark)
        except InvalidOperation:
            yield "initial_mark", f"expected a decimal price, got {self.initial_mark!r}"
            return
        ticks = mark.scaleb(self.price_decimals)
        if not mark.is_finite() or ticks != ticks.to_integral_value():
            places = self.price_decimals
            yield "initial_mark", f"{self.initial_mark!r} has more than {places} decimals"
        elif not 1 <= int(ticks) <= 2**32 - 1:
            yield "initial_mark", f"{self.initial_mark!r} is out of the uint32 tick range"

    def _margin_problems(self) -> _Problems:
        if self.min_initial_margin_fraction > self.default_initial_margin_fraction:
            yield "min_initial_margin_fraction", "must be <= default_initial_margin_fraction"
        if self.maintenance_margin_fraction >= self.min_initial_margin_fraction:
            yield "maintenance_margin_fraction", "must be < min_initial_margin_fraction"
        if self.closeout_margin_fraction >= self.maintenance_margin_fraction:
            yield "closeout_margin_fraction", "must be < maintenance_margin_fraction"
        if self.min_base_amount > MAX_48:
            yield "min_base_amount", f"must be <= {MAX_48}"


def _range_problem(key: str, value: int, rng: Range) -> _Problems:
    if not rng.lo <= value <= rng.hi:
        yield key, f"must be in {rng.lo}..{rng.hi}, got {value}"


@dataclass(frozen=True, slots=True)
class ReplicaGroupSpec:
    """A set of identical API replicas, placed per NUMA node (or a total spread over them).

    More replicas per NUMA node serve more connections and parallel dry-runs, but each one applies
    every block (CPU per replica is constant, not divided). ``cpus_per_replica`` > 1 leaves room for
    the replica's extra threads (gRPC, GC) on its own cores. ``pin`` keeps caches warm and avoids
    migrations (less jitter) but stops the kernel from balancing load; ``realtime`` (SCHED_FIFO)
    cuts scheduling latency but can starve everything else on those cores.
    """

    name: str
    replicas_per_numa_node: int | None = None
    replicas: int | None = None
    numa_nodes: tuple[int, ...] | None = None
    hosts: tuple[str, ...] | None = None
    cpus_per_replica: int = 1
    pin: bool = True
    realtime: bool = False
    gc: GcSpec = GcSpec()
    #: this group's own REST/WS port (absent: ``ports.http``, shared with the other groups); an
    #: A/B loadtest gives each group its own so both can be driven and measured apart
    http_port: int | None = None

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


@dataclass(frozen=True, slots=True)
class DeploySpec:
    """A whole deployment: chain, ports, sequencer, snapshot holder, markets, replica groups."""

    chain_id: int
    sequencer: SequencerSpec
    snapshot: SnapshotSpec
    markets: tuple[MarketSpec, ...]
    replica_groups: tuple[ReplicaGroupSpec, ...] = ()
    ports: PortsSpec = PortsSpec()

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
    return _build(DeploySpec, tree, "")


# --- the generic, type-driven reader ------------------------------------------------------------


def _build(cls: type[_D], value: object, path: str) -> _D:
    if not isinstance(value, Mapping):
        raise SpecError(path, f"expected a mapping, got {_show(value)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    for key in value:
        if key not in fields:
            raise SpecError(_join(path, str(key)), f"unknown key (known: {', '.join(fields)})")
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        sub = _join(path, name)
        if name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SpecError(sub, "required key missing")
            continue
        raw = value[name]
        coerce = f.metadata.get("coerce")
        if coerce is not None:
            raw = coerce(raw, sub)
        kwargs[name] = _convert(raw, hints[name], sub)
    obj = cls(**kwargs)
    for key, message in obj._problems():  # type: ignore[attr-defined]
        raise SpecError(_join(path, key), message)
    return obj


def _convert(value: object, tp: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = (a for a in args if a is not type(None))
        return _convert(value, inner, path)
    if origin is Literal:
        if value not in args:
            raise SpecError(path, f"expected one of {list(args)}, got {_show(value)}")
        return value
    if origin is tuple:
        return _convert_tuple(value, args, path)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build(tp, value, path)
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
