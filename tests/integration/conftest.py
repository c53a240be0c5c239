"""One local Ray per test session (``ray.init`` costs 4-6 s here); every integration test shares it.

``ray_session`` starts it on first use and shuts it down at the end of the session. It advertises
this machine the way ``raydex node-args`` advertises a cluster host: one ``numa<N>`` resource per
NUMA node (counted in CPUs) and the labels ``raydex.io/host=SESSION_HOST``,
``raydex.io/role=head``, so placement plans for ``{SESSION_HOST: read_topology()}`` can be reserved
on it. ``num_cpus=4`` on a 2-core machine: actors are mostly idle in tests, and oversubscribing
Ray's CPU count lets several of them coexist. The dashboard is on: Ray's state API
(``ray.util.state.list_actors``, the actors' ``repr_name``) and the Jobs API are served by it.

Multi-node tests (``ray.cluster_utils.Cluster``) cannot share a process with this ``ray.init``: they
run their cluster in a child process (see ``test_placement.py``), so fixture order never matters.
Extend this file rather than adding a second session fixture.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import ray

from raydex.cluster.topology import Topology, init_kwargs, read_topology

SESSION_HOST = "test-host"


@pytest.fixture(scope="session")
def session_topology() -> Topology:
    """This machine's NUMA topology, as advertised to the session's Ray."""
    return read_topology()


@pytest.fixture(scope="session")
def session_host() -> str:
    """The host label of the session's Ray node (``raydex.io/host``)."""
    return SESSION_HOST


@pytest.fixture(scope="session")
def ray_session(session_topology: Topology) -> Iterator[None]:
    # address="local": always a new instance, never one found through ray_current_cluster.
    ray.init(
        address="local",
        num_cpus=4,
        **init_kwargs(session_topology, "head", SESSION_HOST),
        include_dashboard=True,
        log_to_driver=False,
    )
    try:
        yield
    finally:
        ray.shutdown()
