"""The host's NUMA topology and the ``ray start`` flags that advertise it to Ray.

Source of truth: ``<root>/sys/devices/system/node/node<N>/cpulist`` (``"0-3,8-11"``) and
``.../node<N>/distance`` (one row of the SLIT matrix); ``root`` is a parameter so tests feed fake
trees. Without that folder (containers, non-Linux) the host is one NUMA node holding the CPUs this
process may run on.

Invariants of a ``Topology``: node ids unique and ascending; each node's ``cpus`` a sorted tuple of
unique CPU ids; ``distances`` one entry per node, in node order (10 to itself); CPU-less (memory
only) nodes are dropped.

``node_args`` renders ``--resources {"numa0":<cpus on node 0>,...}`` (one custom resource per
NUMA node, counted in CPUs, so a bundle ``{"CPU": k, "numa<N>": k}`` cannot oversubscribe a node)
and ``--labels raydex.io/host=<host>,raydex.io/role=<role>``. Cost: a few small file reads, once per
process start.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "HOST_LABEL",
    "ROLE_LABEL",
    "ROLES",
    "NumaNode",
    "Topology",
    "TopologyError",
    "init_kwargs",
    "label_value",
    "main",
    "node_args",
    "numa_resource",
    "parse_cpulist",
    "read_topology",
]

HOST_LABEL = "raydex.io/host"
ROLE_LABEL = "raydex.io/role"
ROLES = ("head", "worker")
_NODE_DIR = Path("sys/devices/system/node")
_NODE_NAME = re.compile(r"node(\d+)")
_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9_.-]")
_T = TypeVar("_T")


class TopologyError(ValueError):
    """A topology file that cannot be parsed, named by path."""


@dataclass(frozen=True, slots=True)
class NumaNode:
    """One NUMA node: its id, the CPUs on it (sorted), its distance to each node of the host."""

    id: int
    cpus: tuple[int, ...]
    distances: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Topology:
    """All NUMA nodes of one host that have CPUs, sorted by id."""

    nodes: tuple[NumaNode, ...]

    def node(self, node_id: int) -> NumaNode:
        """The node with this id; ``KeyError`` if the host has none."""
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(f"no NUMA node {node_id} on this host (has {self.node_ids})")

    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(n.id for n in self.nodes)

    @property
    def cpu_count(self) -> int:
        return sum(len(n.cpus) for n in self.nodes)

    def resources(self) -> dict[str, int]:
        """Ray custom resources for this host: ``{"numa<N>": cpus on node N}``."""
        return {numa_resource(n.id): len(n.cpus) for n in self.nodes}

    @classmethod
    def single(cls, cpus: Iterable[int]) -> Topology:
        """A one-node topology over ``cpus`` (the fallback, and handy in tests)."""
        return cls((NumaNode(0, tuple(sorted(set(cpus))), (10,)),))


def numa_resource(node_id: int) -> str:
    """The Ray custom resource name of NUMA node ``node_id``."""
    return f"numa{node_id}"


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse Linux cpulist syntax (``"0-3,8-11"``, ``"0-7:2"`` strides, ``""``) into sorted ids."""
    cpus: set[int] = set()
    for raw in text.strip().split(","):
        part = raw.strip()
        if not part:
            continue
        try:
            span, _, stride_s = part.partition(":")
            lo_s, dash, hi_s = span.partition("-")
            lo = int(lo_s)
            hi = int(hi_s) if dash else lo
            stride = int(stride_s) if stride_s else 1
        except ValueError:
            raise ValueError(f"bad cpulist entry {part!r} in {text!r}") from None
        if lo < 0 or hi < lo or stride < 1:
            raise ValueError(f"bad cpulist entry {part!r} in {text!r}")
        cpus.update(range(lo, hi + 1, stride))
    return tuple(sorted(cpus))


def read_topology(root: str | os.PathLike[str] = "/") -> Topology:
    """Read the NUMA topology under ``root``; one node of the allowed CPUs when it is missing."""
    base = Path(root) / _NODE_DIR
    found = sorted(
        (int(m.group(1)), p)
        for p in (base.iterdir() if base.is_dir() else ())
        if (m := _NODE_NAME.fullmatch(p.name)) and p.is_dir()
    )
    if not found:
        return Topology.single(os.sched_getaffinity(0))
    all_ids = [node_id for node_id, _ in found]
    nodes = []
    for node_id, path in found:
        cpus = _read(path / "cpulist", parse_cpulist)
        if not cpus:
            continue
        distances = _read(path / "distance", _parse_distances)
        if len(distances) != len(all_ids):
            raise TopologyError(
                f"{path / 'distance'}: {len(distances)} distances for {len(all_ids)} nodes"
            )
        nodes.append(NumaNode(node_id, cpus, distances))
    kept = {n.id for n in nodes}
    keep_idx = [i for i, node_id in enumerate(all_ids) if node_id in kept]
    return Topology(
        tuple(NumaNode(n.id, n.cpus, tuple(n.distances[i] for i in keep_idx)) for n in nodes)
    )


def _parse_distances(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split())


def _read(path: Path, parse: Callable[[str], _T]) -> _T:
    try:
        return parse(path.read_text())
    except (OSError, ValueError) as exc:
        raise TopologyError(f"{path}: {exc}") from exc


def label_value(text: str) -> str:
    """``text`` made a valid Ray label value: ``[A-Za-z0-9_.-]``, alnum at both ends, <= 63."""
    cleaned = _LABEL_VALUE_BAD.sub("-", text)[:63].strip("-_.")
    return cleaned or "unknown"


def node_args(topology: Topology, role: str, host: str | None = None) -> list[str]:
    """The ``ray start`` flags advertising this host: NUMA resources and host/role labels."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    host_value = label_value(host if host is not None else socket.gethostname())
    return [
        "--resources",
        json.dumps(topology.resources(), separators=(",", ":"), sort_keys=True),
        "--labels",
        f"{HOST_LABEL}={host_value},{ROLE_LABEL}={role}",
    ]


def init_kwargs(topology: Topology, role: str = "head", host: str | None = None) -> dict[str, Any]:
    """The same advertisement as ``node_args``, as ``ray.init`` keyword arguments (embedded Ray)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    host_value = label_value(host if host is not None else socket.gethostname())
    return {
        "resources": {k: float(v) for k, v in topology.resources().items()},
        "labels": {HOST_LABEL: host_value, ROLE_LABEL: role},
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``raydex node-args [--role R] [--root PATH] [--host H]``: print the flags on one line.

    The line is meant for ``ray start ... $(raydex node-args --role worker)``: a command
    substitution is word-split but not re-parsed for quotes, so the flags are printed unquoted and
    no token holds whitespace (compact JSON, sanitized label values).
    """
    parser = argparse.ArgumentParser(
        prog="raydex node-args", description="print `ray start` flags for this host"
    )
    parser.add_argument("--role", choices=ROLES, default="worker")
    parser.add_argument("--root", default="/", help="filesystem root holding sys/ (tests)")
    parser.add_argument("--host", default=None, help="host label (default: hostname)")
    args = parser.parse_args(argv)
    print(" ".join(node_args(read_topology(args.root), args.role, args.host)))
    return 0
