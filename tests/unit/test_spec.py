"""The deploy spec: raydex.yaml loads, and every wrong key or value is an error naming its path."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from raydex.cluster.control.spec import DeploySpec, GcSpec, SpecError, load_spec
from raydex.codecs import CreateMarket, MarketStatus

REPO = Path(__file__).resolve().parents[2]

MINIMAL: dict[str, Any] = {
    "chain_id": 7,
    "sequencer": {"wal_dir": "/tmp/wal"},
    "snapshot": {"dir": "/tmp/snap"},
    "markets": [
        {
            "market_index": 0,
            "symbol": "ETH",
            "price_decimals": 2,
            "size_decimals": 4,
            "initial_mark": "3300.25",
        }
    ],
    "replica_groups": [
        {"name": "a", "replicas": 1},
        {"name": "b", "replicas_per_numa_node": 2, "pin": True},
    ],
}


def with_change(path: str, value: Any) -> str:
    """MINIMAL as YAML text with ``path`` (``a.b[1].c``; value ``...`` deletes) replaced."""
    tree = copy.deepcopy(MINIMAL)
    keys: list[Any] = []
    for part in path.split("."):
        name, _, rest = part.partition("[")
        keys.append(name)
        if rest:
            keys.append(int(rest.rstrip("]")))
    node = tree
    for k in keys[:-1]:
        node = node[k]
    if value is ...:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    text: str = yaml.safe_dump(tree)
    return text


def test_the_repository_raydex_yaml_loads() -> None:
    spec = load_spec(REPO / "raydex.yaml")
    assert isinstance(spec, DeploySpec)
    assert 3 <= len(spec.markets) <= 4
    (group,) = spec.replica_groups
    assert group.replicas == 2
    assert spec.sequencer.wal_fsync in ("block", "none")


def test_a_path_given_as_a_string_is_read_as_a_file(tmp_path: Path) -> None:
    f = tmp_path / "d.yaml"
    f.write_text(with_change("chain_id", 9))
    assert load_spec(str(f)).chain_id == 9


def test_defaults_fill_every_optional_key() -> None:
    spec = load_spec(yaml.safe_dump(MINIMAL))
    assert spec.ports.http == 8080 and spec.ports.grpc == 50051
    assert spec.sequencer.wal_fsync == "block" and spec.sequencer.block_interval_ms == 1.0
    assert spec.replica_groups[0].gc == GcSpec()
    assert spec.replica_groups[1].replicas_per_numa_node == 2


def test_a_market_becomes_the_create_market_transaction_with_its_mark_in_ticks() -> None:
    market = load_spec(yaml.safe_dump(MINIMAL)).markets[0]
    tx = market.create_market()
    assert isinstance(tx, CreateMarket)
    assert tx.mark_price == 330025
    assert tx.symbol == "ETH" and tx.status == MarketStatus.ACTIVE
    assert tx.default_initial_margin_fraction == market.default_initial_margin_fraction


def test_an_unquoted_numeric_mark_keeps_the_digits_as_written() -> None:
    text = with_change("markets[0].initial_mark", 0.1)
    text = text.replace("initial_mark: 0.1", "initial_mark: 0.10")
    assert load_spec(text).markets[0].mark_price == 10


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("replica_groups[1].pin", "yes", "replica_groups[1].pin: expected bool, got 'yes'"),
        ("chain_id", True, "chain_id: expected int, got True"),
        ("chain_id", ..., "chain_id: required key missing"),
        ("colour", "blue", "colour: unknown key (known: chain_id, sequencer"),
        ("sequencer.wal_fsync", "always", "sequencer.wal_fsync: expected one of ['block', 'none']"),
        ("sequencer.block_interval_ms", "1ms", "sequencer.block_interval_ms: expected float"),
        ("sequencer.block_interval_ms", 0, "sequencer.block_interval_ms: must be in (0, 10000]"),
        ("sequencer.wal_dir", ..., "sequencer.wal_dir: required key missing"),
        ("snapshot.every_blocks", 0, "snapshot.every_blocks: must be >= 1, got 0"),
        ("snapshot", [], "snapshot: expected a mapping, got []"),
        ("ports", {"http": 80, "grpc": 80}, "ports.grpc: must differ from http (80)"),
        ("ports", {"http": 70000}, "ports.http: must be a port in 1..65535, got 70000"),
        ("markets", [], "markets: at least one market is required"),
        ("markets[0].symbol", "X" * 17, "markets[0].symbol: must be 1..16 ASCII characters"),
        ("markets[0].taker_fee", 2_000_000, "markets[0].taker_fee: must be in 0..1000000"),
        ("markets[0].size_decimals", 5, "markets[0].size_decimals: price_decimals + size_decimals"),
        ("markets[0].initial_mark", "3300.255", "markets[0].initial_mark: '3300.255' has more"),
        ("markets[0].initial_mark", "cheap", "markets[0].initial_mark: expected a decimal price"),
        ("markets[0].initial_mark", "0", "markets[0].initial_mark: '0' is out of the uint32"),
        (
            "markets[0].maintenance_margin_fraction",
            300,
            "markets[0].maintenance_margin_fraction: must be < min_initial",
        ),
        ("markets[0].leverage", 5, "markets[0].leverage: unknown key"),
        ("replica_groups", {"name": "a"}, "replica_groups: expected a list, got {'name': 'a'}"),
        ("replica_groups[0].replicas_per_numa_node", 1, "replica_groups[0].replicas: set exactly"),
        ("replica_groups[0].replicas", ..., "replica_groups[0].replicas: set exactly one"),
        ("replica_groups[0].name", "Bad_Name", "replica_groups[0].name: must match"),
        ("replica_groups[0].name", "sequencer", "replica_groups[0].name: 'sequencer' is reserved"),
        ("replica_groups[1].name", "a", "replica_groups[1].name: duplicate 'a'"),
        ("replica_groups[0].numa_nodes", [0, 0], "replica_groups[0].numa_nodes: has duplicates"),
        ("replica_groups[0].numa_nodes", [0, "1"], "replica_groups[0].numa_nodes[1]: expected int"),
        (
            "replica_groups[0].cpus_per_replica",
            0,
            "replica_groups[0].cpus_per_replica: must be >= 1",
        ),
        (
            "replica_groups[0].gc",
            {"thresholds": [1, 2]},
            "replica_groups[0].gc.thresholds: expected",
        ),
        (
            "replica_groups[0].gc",
            {"gen2_disabled": True},
            "replica_groups[0].gc.collect_interval_s: must be > 0 when gen2_disabled",
        ),
    ],
)
def test_a_wrong_key_or_value_is_an_error_naming_its_path(
    path: str, value: Any, message: str
) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(with_change(path, value))
    assert str(info.value).startswith(message)


def test_yaml_syntax_errors_are_spec_errors() -> None:
    with pytest.raises(SpecError, match="invalid YAML"):
        load_spec("chain_id: [1,\n")


def test_a_document_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(SpecError, match="expected a mapping, got 'just text'"):
        load_spec("just text")


def test_a_missing_spec_file_is_a_file_not_found_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_spec(str(tmp_path / "nope.yaml"))


@settings(deadline=None, max_examples=50)
@given(st.sampled_from(["pin", "realtime"]), st.one_of(st.integers(), st.text(), st.none()))
def test_a_non_bool_switch_is_always_refused(key: str, value: object) -> None:
    with pytest.raises(SpecError, match=rf"replica_groups\[0\]\.{key}: expected bool"):
        load_spec(with_change(f"replica_groups[0].{key}", value))


@settings(deadline=None, max_examples=50)
@given(st.integers(min_value=1, max_value=10**9), st.integers(min_value=0, max_value=4))
def test_any_mark_with_at_most_price_decimals_is_exact_in_ticks(ticks: int, decimals: int) -> None:
    text = f"{ticks / 10**decimals:.{decimals}f}" if decimals else str(ticks)
    spec_text = (
        with_change("markets[0].initial_mark", text)
        .replace("price_decimals: 2", f"price_decimals: {decimals}")
        .replace("size_decimals: 4", "size_decimals: 0")
    )
    assert load_spec(spec_text).markets[0].mark_price == ticks
