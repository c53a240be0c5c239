"""The deploy spec: raydex.yaml loads, and every wrong key or value is an error naming its path.

The spec embeds the actors' own config dataclasses and the ``CreateMarket`` transaction: these
tests also pin that each knob is declared once (a field of the actor config is a key of the spec
with the actor's default) and that the one ``chain_id`` reaches every place that uses it.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from raydex.actors.replica import ApiConfig, ReplicaConfig
from raydex.actors.sequencer import SequencerConfig
from raydex.actors.snapshot import SnapshotConfig
from raydex.actors.transport import DEFAULT_DATA_PLANE
from raydex.cluster.control.spec import MARKET_DEFAULTS, DeploySpec, GcSpec, SpecError, load_spec
from raydex.codecs import CreateMarket, MarketStatus, spec_of

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
        node = node.setdefault(k, {}) if isinstance(node, dict) else node[k]
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
    assert (group.replicas_per_numa_node, group.replicas) == (1, None)
    assert spec.sequencer.config.wal_fsync in ("block", "none")
    assert spec.sequencer.config.oracle_interval_ms == 1000.0


def test_the_knobs_raydex_yaml_shows_commented_out_are_valid_keys_when_uncommented() -> None:
    text = (REPO / "raydex.yaml").read_text()
    knobs = r"ring_size|max_batch_txs|api|max_batch|ws_queue_limit"
    uncommented, n = re.subn(rf"^(\s*)# (\s*(?:{knobs}):)", r"\1\2", text, flags=re.M)
    assert n == 5
    spec = load_spec(uncommented)
    (group,) = spec.replica_groups
    assert (group.api.max_batch, group.api.ws_queue_limit, group.replica.max_batch_txs) == (
        50, 256, 500
    )  # fmt: skip
    assert spec.sequencer.config.ring_size == 4096


def test_a_path_given_as_a_string_is_read_as_a_file(tmp_path: Path) -> None:
    f = tmp_path / "d.yaml"
    f.write_text(with_change("chain_id", 9))
    assert load_spec(str(f)).chain_id == 9


def test_defaults_fill_every_optional_key() -> None:
    spec = load_spec(yaml.safe_dump(MINIMAL))
    assert spec.ports.http == 8080 and spec.ports.data == 50051
    assert spec.replica_groups[0].gc == GcSpec()
    assert spec.replica_groups[1].replicas_per_numa_node == 2


def test_an_embedded_config_takes_the_actors_own_defaults_for_every_unwritten_knob() -> None:
    spec = load_spec(yaml.safe_dump(MINIMAL))
    seq = SequencerConfig(wal_dir="/tmp/wal", snapshot_dir="/tmp/snap")
    wired_seq = {"chain_id": 7, "data_port": 50051, "txlog_port": 50052, "replication_port": 50053}
    assert spec.sequencer.config == dataclasses.replace(seq, **wired_seq)
    assert spec.snapshot.config == SnapshotConfig(dir="/tmp/snap")
    replica = spec.replica_groups[0].replica
    template = ReplicaConfig(name="", sequencer_target="")
    wired = {"chain_id": 7, "group": "a", "http_port": 8080, "api": ApiConfig(network_id=7)}
    assert replica == dataclasses.replace(template, **wired)


def test_every_actor_config_knob_is_a_spec_key_without_a_second_declaration() -> None:
    text = with_change("sequencer.ring_size", 123)
    tree = yaml.safe_load(text)
    tree["snapshot"]["keep"] = 5
    tree["replica_groups"][0]["max_batch_txs"] = 77
    tree["replica_groups"][0]["api"] = {"max_batch": 9, "ws_send_buffer_bytes": 4096}
    spec = load_spec(yaml.safe_dump(tree))
    assert spec.sequencer.config.ring_size == 123
    assert spec.snapshot.config.keep == 5
    group = spec.replica_groups[0]
    assert group.replica.max_batch_txs == 77
    assert (group.api.max_batch, group.api.ws_send_buffer_bytes) == (9, 4096)
    assert group.api.max_body_bytes == ApiConfig().max_body_bytes
    assert spec.replica_groups[1].api == ApiConfig(network_id=7)  # the other group's own


def test_the_one_chain_id_reaches_the_sequencer_every_replica_and_the_info_network_id() -> None:
    spec = load_spec(with_change("chain_id", 4242))
    assert spec.sequencer.config.chain_id == 4242
    for group in spec.replica_groups:
        assert group.replica.chain_id == 4242 and group.replica.api.network_id == 4242
    # also after a replace: the wired fields follow the spec's own
    moved = dataclasses.replace(spec, chain_id=5, ports=dataclasses.replace(spec.ports, data=6000))
    assert moved.sequencer.config.chain_id == 5 and moved.replica_groups[1].api.network_id == 5
    assert (moved.sequencer.config.data_port, moved.sequencer.config.txlog_port) == (6000, 6001)


def test_ports_and_the_snapshot_folder_are_wired_into_the_configs_that_use_them() -> None:
    tree = yaml.safe_load(with_change("ports", {"http": 9000, "data": 9100}))
    tree["replica_groups"][1]["http_port"] = 9001
    spec = load_spec(yaml.safe_dump(tree))
    assert spec.sequencer.config.snapshot_dir == spec.snapshot.config.dir == "/tmp/snap"
    assert [g.replica.http_port for g in spec.replica_groups] == [9000, 9001]
    assert all(g.replica.reuse_port for g in spec.replica_groups)


def test_the_data_port_read_under_its_old_name_grpc_is_wired_alike_with_one_notice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = load_spec(with_change("ports", {"http": 9000, "grpc": 9100}))
    assert (spec.ports.data, spec.sequencer.config.data_port) == (9100, 9100)
    notice = capsys.readouterr().err
    assert (
        notice
        == "raydex: deploy spec key ports.grpc is deprecated, read as ports.data: rename it\n"
    )
    load_spec(with_change("ports", {"http": 9000, "data": 9100}))
    assert capsys.readouterr().err == ""  # the new name: no notice


def test_a_spec_that_names_no_data_plane_gets_the_one_default() -> None:
    spec = load_spec(yaml.safe_dump(MINIMAL))
    assert (
        spec.sequencer.config.data_plane == DEFAULT_DATA_PLANE == SequencerConfig("", "").data_plane
    )
    assert load_spec(REPO / "raydex.yaml").sequencer.config.data_plane == "tcp"  # its own choice


def test_a_market_is_the_create_market_transaction_with_its_mark_in_ticks() -> None:
    tx = load_spec(yaml.safe_dump(MINIMAL)).markets[0]
    assert isinstance(tx, CreateMarket)
    assert tx.mark_price == 330025
    assert tx.symbol == "ETH" and tx.status == MarketStatus.ACTIVE
    assert tx.default_initial_margin_fraction == MARKET_DEFAULTS["default_initial_margin_fraction"]


def test_market_keys_are_the_wire_fields_of_create_market_except_mark_and_status() -> None:
    wire = [f.name for f in spec_of(CreateMarket).fields]
    with pytest.raises(SpecError) as info:
        load_spec(with_change("markets[0].leverage", 5))
    known = str(info.value).split("(known: ")[1].rstrip(")").split(", ")
    assert known == [*(n for n in wire if n not in ("mark_price", "status")), "initial_mark"]
    assert set(MARKET_DEFAULTS) <= set(wire)


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
        ("ports", {"http": 80, "data": 80}, "ports.data: must differ from http (80)"),
        ("ports", {"data": 1, "grpc": 2}, "ports.grpc: the old name of ports.data: write only"),
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
        ("markets[0].mark_price", 5, "markets[0].mark_price: not settable here: it is set by"),
        ("markets[0].min_base_amount", 0, "markets[0].min_base_amount: must be in 1.."),
        ("sequencer.chain_id", 5, "sequencer.chain_id: not settable here: it is set by the top"),
        ("sequencer.data_port", 5, "sequencer.data_port: not settable here: it is set by ports"),
        ("sequencer.snapshot_dir", "/x", "sequencer.snapshot_dir: not settable here"),
        ("sequencer.ring_size", 0, "sequencer.ring_size: must be >= 1, got 0"),
        ("sequencer.verify_signatures", 1, "sequencer.verify_signatures: expected bool"),
        ("snapshot.keep", 0, "snapshot.keep: must be >= 1, got 0"),
        ("committer.cpus", 0, "committer.cpus: must be >= 1, got 0"),
        ("committer.wal_dir", "/x", "committer.wal_dir: unknown key"),
        ("replica_groups[0].max_batch_txs", 0, "replica_groups[0].max_batch_txs: must be >= 1"),
        (
            "replica_groups[0].max_batches_in_flight",
            5,
            "replica_groups[0].max_batches_in_flight: must be in 1..4",
        ),
        (
            "replica_groups[0].max_batches_in_flight",
            0,
            "replica_groups[0].max_batches_in_flight: must be in 1..4",
        ),
        ("replica_groups[0].chain_id", 1, "replica_groups[0].chain_id: not settable here"),
        ("replica_groups[0].api", {"network_id": 1}, "replica_groups[0].api.network_id: not set"),
        ("replica_groups[0].api", {"max_batch": 0}, "replica_groups[0].api.max_batch: must be >="),
        ("replica_groups[0].api", {"ws_close_timeout_s": "1s"}, "replica_groups[0].api.ws_close"),
        ("replica_groups[0].api", {"colour": 1}, "replica_groups[0].api.colour: unknown key"),
        ("replica_groups[0].api", [], "replica_groups[0].api: expected a mapping, got []"),
        ("replica_groups", {"name": "a"}, "replica_groups: expected a list, got {'name': 'a'}"),
        ("replica_groups[0].replicas_per_numa_node", 1, "replica_groups[0].replicas: set exactly"),
        ("replica_groups[0].replicas", ..., "replica_groups[0].replicas: set exactly one"),
        ("replica_groups[0].name", "Bad_Name", "replica_groups[0].name: must match"),
        ("replica_groups[0].name", "sequencer", "replica_groups[0].name: 'sequencer' is reserved"),
        ("replica_groups[0].name", "committer", "replica_groups[0].name: 'committer' is reserved"),
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


def test_a_value_an_embedded_config_refuses_is_a_spec_error_naming_its_place() -> None:
    """ApiConfig checks its own values in __post_init__; that ValueError reaches the user as a
    SpecError with the path of the block it came from, not as a bare traceback."""
    with pytest.raises(SpecError, match=r"replica_groups\[0\].*outcome_timeout_s must be > 0"):
        load_spec(with_change("replica_groups[0].api", {"outcome_timeout_s": 0}))
