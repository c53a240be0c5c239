"""Deploy and down, again and again, on the session's Ray: what a deployment creates is recorded,
``down`` removes exactly that (a user's own actor in the namespace survives, no placement group is
left), a plan the host cannot hold is refused before anything starts, naming the host and the
resource, and a deploy that fails after starting actors takes back what it started."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from raydex.cluster.control import deploy as dep
from raydex.cluster.control import record
from raydex.cluster.control.spec import DeploySpec, load_spec
from raydex.cluster.topology import Topology

pytestmark = pytest.mark.integration

NS = "raydex-lifecycle"
PLACED = {dep.SEQUENCER, dep.SNAPSHOT, dep.COMMITTER, "raydex-replica-api-0"}


def spec_for(tmp: Path, http: int, data: int) -> DeploySpec:
    return load_spec(f"""
chain_id: 304
ports: {{http: {http}, data: {data}}}
sequencer: {{wal_dir: {tmp}/wal, data_plane: tcp, oracle_interval_ms: 0}}
snapshot: {{dir: {tmp}/snap}}
markets:
  - {{market_index: 0, symbol: ETH, price_decimals: 2, size_decimals: 4, initial_mark: "3000.00"}}
replica_groups:
  - {{name: api, replicas: 1}}
""")


@ray.remote(num_cpus=0)
class Keeper:
    """A user's own actor in the deployment's namespace."""

    def ping(self) -> str:
        return "here"


class Said(logging.Handler):
    """What a logger let through (a logger's filters run before its handlers)."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def live_groups() -> list[str]:
    return sorted(name for _, name in record.leftover_groups(NS))


@pytest.fixture
def ports() -> tuple[int, int]:
    http = dep.free_port()
    return http, dep.free_port(pair=True, avoid={http})


@pytest.fixture
def place(session_topology: Topology, session_host: str) -> dict[str, Topology]:
    return {session_host: session_topology}


@pytest.fixture
def clean(ray_session: None) -> Iterator[None]:
    yield
    dep.down(NS)


@pytest.mark.usefixtures("clean")
def test_down_stops_exactly_what_the_deployment_created_and_leaves_no_group(
    tmp_path: Path, ports: tuple[int, int], place: dict[str, Topology]
) -> None:
    keeper = Keeper.options(name="my-own-actor", namespace=NS, lifetime="detached").remote()  # type: ignore[attr-defined]
    said = Said()
    logging.getLogger("ray.actor").addHandler(said)
    try:
        for cycle in range(2):  # down then deploy again: the same names, new groups
            spec = spec_for(tmp_path / str(cycle), *ports)
            result = dep.deploy(spec, namespace=NS, topologies=place)
            # Ray's warning that removing a group kills its actor: raydex's way to stop one
            assert not [m for m in said.messages if "detached actor with a placement" in m]
            assert set(result.created) == PLACED | {dep.MONITOR}
            rec = record.load(NS)
            assert rec is not None and set(rec.actors) == PLACED | {dep.MONITOR}
            assert all(rec.actors[n].placement_group for n in PLACED)
            assert live_groups() == sorted(record.group_name(NS, n) for n in PLACED)
            again = dep.deploy(spec, namespace=NS, topologies=place)
            assert (again.created, again.removed) == ((), ())

            stopped = dep.down(NS)
            assert set(stopped) == PLACED | {dep.MONITOR}
            assert live_groups() == []
            assert record.load(NS) is None
            assert dep.named_actors(NS) == {"my-own-actor"}
            assert ray.get(keeper.ping.remote(), timeout=30) == "here"
        assert dep.down(NS) == []  # nothing left to stop: a no-op
    finally:
        logging.getLogger("ray.actor").removeHandler(said)
        ray.kill(keeper)


@pytest.mark.usefixtures("clean")
def test_a_plan_the_host_cannot_hold_is_refused_before_anything_starts(
    tmp_path: Path, ports: tuple[int, int], place: dict[str, Topology], session_host: str
) -> None:
    free = ray.available_resources().get("numa0", 0.0)
    hogs = [Keeper.options(resources={"numa0": free}).remote()]  # type: ignore[attr-defined]
    try:
        ray.get(hogs[0].ping.remote(), timeout=30)  # it holds every free numa0 unit now
        # units an earlier test's groups still held when counted are freed a moment later (Ray's
        # count lags a removal, which deploy waits out for SHORTAGE_SETTLE_S): hold those too
        deadline = time.monotonic() + dep.SHORTAGE_SETTLE_S + 1
        while time.monotonic() < deadline:
            late = ray.available_resources().get("numa0", 0.0)
            if late > 0:
                hogs.append(Keeper.options(resources={"numa0": late}).remote())  # type: ignore[attr-defined]
                ray.get(hogs[-1].ping.remote(), timeout=30)
                free += late
            time.sleep(0.5)
        with pytest.raises(dep.DeployRefused, match=rf"host {session_host} lacks numa0"):
            dep.deploy(spec_for(tmp_path, *ports), namespace=NS, topologies=place)
    finally:
        for hog in hogs:
            ray.kill(hog)
        deadline = time.monotonic() + 30  # Ray frees its units a moment later
        while ray.available_resources().get("numa0", 0.0) < free and time.monotonic() < deadline:
            time.sleep(0.1)
    assert dep.named_actors(NS) == set()
    assert live_groups() == []
    assert record.load(NS) is None


@pytest.mark.usefixtures("clean")
def test_a_deploy_that_fails_after_starting_actors_takes_back_what_it_started(
    tmp_path: Path, ports: tuple[int, int], place: dict[str, Topology]
) -> None:
    """The replica cannot take its HTTP port (another program holds it without SO_REUSEPORT):
    the sequencer, holder and committer this deploy started go too, with their groups."""
    http, _ = ports
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", http))
        squatter.listen()
        with pytest.raises(Exception) as failed:
            dep.deploy(spec_for(tmp_path, *ports), namespace=NS, topologies=place,
                       timeout_s=90)  # fmt: skip
    notes = "\n".join(getattr(failed.value, "__notes__", ()))
    assert "rolled back what this deploy started" in notes
    assert dep.SEQUENCER in notes and "raydex-replica-api-0" in notes
    assert dep.named_actors(NS) == set()
    assert live_groups() == []
    assert record.load(NS) is None
