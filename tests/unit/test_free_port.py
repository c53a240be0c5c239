"""``deploy.free_port``: listeners get ports no outgoing connection can hold (outside the
kernel's ephemeral range and Ray's worker ports), and the ports are really free."""

from __future__ import annotations

import socket

from raydex.cluster.control import deploy


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
