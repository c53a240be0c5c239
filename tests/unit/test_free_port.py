"""``deploy.free_port``: listeners get ports no outgoing connection can hold (outside the
kernel's ephemeral range and Ray's worker ports), and the ports are really free."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from raydex.cluster.control import deploy
from raydex.cluster.control.spec import load_spec
from raydex.observability.loadtest.run import LoadtestOptions, build_spec, parse_ab


def _ephemeral() -> range:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = (int(x) for x in f.read().split())
    return range(low, high + 1)


def test_free_ports_lie_outside_the_ephemeral_range_and_rays_worker_ports_and_bind() -> None:
    ephemeral = _ephemeral()
    for pair in (False, True) * 20:
        port = deploy.free_port(pair=pair)
        assert port not in ephemeral
        assert port not in deploy.RAY_WORKER_PORTS
        for p in (port, port + 1) if pair else (port,):
            with socket.socket() as s:
                s.bind(("127.0.0.1", p))  # raises if taken


def test_a_taken_port_is_never_returned() -> None:
    held = []
    try:
        for _ in range(30):
            port = deploy.free_port()
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            s.listen()
            held.append(s)
        ports = [s.getsockname()[1] for s in held]
        assert len(set(ports)) == len(ports)
    finally:
        for s in held:
            s.close()


class _Draws:
    """``random.SystemRandom`` drawing the given ports in order."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = iter(ports)

    def randrange(self, start: int, stop: int) -> int:
        return next(self.ports)


def test_ports_chosen_but_not_yet_bound_are_avoided(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several ports chosen for one deployment all look free until it binds them: a loadtest once
    drew the same port twice, or the base spec's 8080 as the tx-log port (2 in 3,000 specs)."""
    candidates = [p for p in range(1024, 10000) if deploy._bindable(p) and deploy._bindable(p + 1)]
    a, b, c = candidates[:3]
    monkeypatch.setattr(deploy.random, "SystemRandom", lambda: _Draws([a, b]))
    assert deploy.free_port(avoid={a}) == b
    monkeypatch.setattr(deploy.random, "SystemRandom", lambda: _Draws([a, c]))
    assert deploy.free_port(pair=True, avoid={a + 1}) == c  # the pair's second port counts too
    monkeypatch.setattr(deploy.random, "SystemRandom", lambda: _Draws([a]))
    assert deploy.free_port() == a


def test_a_loadtests_ports_are_distinct_and_apart_from_the_base_specs(tmp_path: Path) -> None:
    base = load_spec("raydex.yaml")
    ab = parse_ab("pinned=pin:on,unpinned=pin:off")
    for _ in range(200):
        spec = build_spec(base, LoadtestOptions(markets=1, replicas=1, ab=ab), tmp_path)
        chosen = [g.http_port for g in spec.replica_groups]
        chosen += [spec.ports.http, spec.ports.grpc, spec.ports.grpc + 1]
        assert len(set(chosen)) == 5
        assert not set(chosen) & {base.ports.http, base.ports.grpc, base.ports.grpc + 1}
