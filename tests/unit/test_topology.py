"""NUMA topology from a sysfs tree, and the `ray start` flags that advertise it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ray._private.label_utils import parse_node_labels_string

from raydex.cluster.topology import (
    HOST_LABEL,
    ROLE_LABEL,
    NumaNode,
    Topology,
    TopologyError,
    init_kwargs,
    label_value,
    main,
    node_args,
    parse_cpulist,
    read_topology,
)


def write_tree(root: Path, nodes: dict[int, tuple[str, str]]) -> Path:
    """A fake ``sys/devices/system/node`` with ``{id: (cpulist, distance row)}``."""
    base = root / "sys/devices/system/node"
    base.mkdir(parents=True)
    (base / "online").write_text(f"0-{max(nodes)}\n")  # noise the reader must ignore
    for node_id, (cpulist, distance) in nodes.items():
        d = base / f"node{node_id}"
        d.mkdir()
        (d / "cpulist").write_text(cpulist + "\n")
        (d / "distance").write_text(distance + "\n")
    return root


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8-11", (0, 1, 2, 3, 8, 9, 10, 11)),
        ("5", (5,)),
        ("", ()),
        ("0-7:2", (0, 2, 4, 6)),
        ("3,1,2-2", (1, 2, 3)),
    ],
)
def test_cpulist_syntax_parses_to_sorted_cpu_ids(text: str, cpus: tuple[int, ...]) -> None:
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["a-b", "3-1", "-1", "0-3:0"])
def test_malformed_cpulist_is_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="bad cpulist"):
        parse_cpulist(text)


def test_two_node_tree_reads_cpus_and_distances(tmp_path: Path) -> None:
    write_tree(tmp_path, {0: ("0-3,8-11", "10 21"), 1: ("4-7,12-15", "21 10")})
    topo = read_topology(tmp_path)
    assert topo == Topology(
        (
            NumaNode(0, (0, 1, 2, 3, 8, 9, 10, 11), (10, 21)),
            NumaNode(1, (4, 5, 6, 7, 12, 13, 14, 15), (21, 10)),
        )
    )
    assert topo.cpu_count == 16
    assert topo.resources() == {"numa0": 8, "numa1": 8}


def test_four_node_tree_is_sorted_by_node_id_not_by_name(tmp_path: Path) -> None:
    rows = ["10 16 16 16", "16 10 16 16", "16 16 10 16", "16 16 16 10"]
    write_tree(tmp_path, {i: (f"{i * 4}-{i * 4 + 3}", rows[i]) for i in (3, 1, 2, 0)})
    (tmp_path / "sys/devices/system/node/node10x").mkdir()  # not a node directory
    topo = read_topology(str(tmp_path))
    assert topo.node_ids == (0, 1, 2, 3)
    assert topo.node(2).cpus == (8, 9, 10, 11)
    assert topo.node(3).distances == (16, 16, 16, 10)


def test_memory_only_node_is_dropped_with_its_distance_column(tmp_path: Path) -> None:
    write_tree(tmp_path, {0: ("0-1", "10 20 30"), 1: ("", "20 10 30"), 2: ("2-3", "30 20 10")})
    topo = read_topology(tmp_path)
    assert topo.node_ids == (0, 2)
    assert topo.node(0).distances == (10, 30)
    assert topo.node(2).distances == (30, 10)


def test_missing_sysfs_folder_falls_back_to_one_node_of_the_allowed_cpus(tmp_path: Path) -> None:
    topo = read_topology(tmp_path)
    assert topo == Topology((NumaNode(0, tuple(sorted(os.sched_getaffinity(0))), (10,)),))


def test_distance_row_of_the_wrong_length_names_the_file(tmp_path: Path) -> None:
    write_tree(tmp_path, {0: ("0-1", "10"), 1: ("2-3", "21 10")})
    with pytest.raises(TopologyError, match=r"node0/distance: 1 distances for 2 nodes"):
        read_topology(tmp_path)


def test_unparsable_cpulist_names_the_file(tmp_path: Path) -> None:
    write_tree(tmp_path, {0: ("zero", "10")})
    with pytest.raises(TopologyError, match=r"node0/cpulist"):
        read_topology(tmp_path)


def test_unknown_numa_node_lookup_says_which_nodes_exist() -> None:
    with pytest.raises(KeyError, match=r"no NUMA node 1 on this host \(has \(0,\)\)"):
        Topology.single([0, 1]).node(1)


def test_node_args_advertise_one_resource_per_numa_node_and_host_role_labels(
    tmp_path: Path,
) -> None:
    write_tree(tmp_path, {0: ("0-3", "10 21"), 1: ("4-7", "21 10")})
    args = node_args(read_topology(tmp_path), "worker", "host-b")
    assert args[0] == "--resources" and json.loads(args[1]) == {"numa0": 4, "numa1": 4}
    assert args[2] == "--labels"
    assert parse_node_labels_string(args[3]) == {HOST_LABEL: "host-b", ROLE_LABEL: "worker"}


def test_embedded_ray_gets_the_same_advertisement_as_ray_start() -> None:
    topo = Topology((NumaNode(0, (0, 1), (10, 21)), NumaNode(1, (2, 3), (21, 10))))
    kwargs = init_kwargs(topo, "head", "my host")
    args = node_args(topo, "head", "my host")
    assert kwargs["resources"] == json.loads(args[1]) == {"numa0": 2, "numa1": 2}
    assert kwargs["labels"] == parse_node_labels_string(args[3])
    assert kwargs["labels"] == {HOST_LABEL: "my-host", ROLE_LABEL: "head"}


def test_node_args_reject_an_unknown_role() -> None:
    with pytest.raises(ValueError, match="role must be one of"):
        node_args(Topology.single([0]), "leader", "h")


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("ip-10-0-0-1.ec2.internal", "ip-10-0-0-1.ec2.internal"),
        ("my host!", "my-host"),
        ("", "unknown"),
    ],
)
def test_host_names_become_valid_ray_label_values(raw: str, value: str) -> None:
    assert label_value(raw) == value
    parse_node_labels_string(f"k={label_value(raw)}")  # Ray's own validation accepts it


def test_main_prints_the_flags_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(tmp_path, {0: ("0-1", "10")})
    assert main(["--role", "head", "--root", str(tmp_path), "--host", "h1"]) == 0
    out = capsys.readouterr().out
    assert out == '--resources {"numa0":2} --labels raydex.io/host=h1,raydex.io/role=head\n'


def test_command_substitution_in_a_shell_yields_flags_ray_start_parses(tmp_path: Path) -> None:
    """ray_cluster.yaml runs `ray start ... $(raydex node-args ...)`: word splitting must give
    Ray exactly the flag values, with no stray quotes."""
    write_tree(tmp_path, {0: ("0-3", "10 21"), 1: ("4-7", "21 10")})
    cmd = f"from raydex.cluster.topology import main; main(['--root', {str(tmp_path)!r}])"
    script = f'printf "%s\\n" $({sys.executable} -c "{cmd}")'
    words = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert words[0] == "--resources" and json.loads(words[1]) == {"numa0": 4, "numa1": 4}
    assert words[2] == "--labels"
    assert parse_node_labels_string(words[3])[ROLE_LABEL] == "worker"
