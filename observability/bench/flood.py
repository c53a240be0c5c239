"""``raydex bench flood``: connections without credentials against the sequencer's data plane and a
replica's HTTP port; what they leave held there, and whether honest clients are still answered.

::

    this process                                        child processes (measured: RSS, files)
    ┌──────────────────────────────────────┐  TCP   ┌─────────────────────────────────────────┐
    │ strangers, from 127.0.0.10.. (many   ├───────►│ sequencer: SequencerService, TCP plane, │
    │  peers): silent connections, HELLOs  │        │  a secret (data_port)                   │
    │  announcing 8 MiB with 1 MiB sent    │        └─────────────────────────────────────────┘
    │ a member (the secret): 1 order/20 ms ├───────►  answered? how fast?
    │                                      │  HTTP  ┌─────────────────────────────────────────┐
    │ slowloris: heads trickling 1 B/s,    ├───────►│ replica: ReplicaService (with its own    │
    │  from many peers                     │        │  sequencer and holder), RLIMIT_NOFILE   │
    │ an honest client from 127.0.0.2:     ├───────►│  lowered to --replica-nofile            │
    │  GET /api/v1/orderBooks every 20 ms  │        └─────────────────────────────────────────┘
    └──────────────────────────────────────┘

Each child runs the production services (no copy of them) and writes its ``status()`` to a file
twice a second; its log goes to a file whose size is reported. Sampled every 100 ms: the child's
RSS (``VmRSS``) and open descriptors (``/proc/PID/fd``), before, at the peak during the flood,
and after the pre-auth / head deadline has passed; the refusals the child counted; the honest
client's answers (count, p50 and max latency). Bounded: about a minute. Figures go to
docs/performance.md; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SAMPLE_S = 0.1
TIMEOUT_S = 60.0
HELLO = 8  # the TCP plane's HELLO kind (actors/transport/tcp_plane.py)


# ---- the children ------------------------------------------------------------------------------


async def _serve_sequencer(spec: dict[str, Any]) -> None:
    from raydex.actors.local import Trader, eth_market
    from raydex.actors.sequencer import SequencerConfig, SequencerService

    cfg = SequencerConfig(**spec["config"])
    svc = SequencerService(cfg)
    port = await svc.start()
    trader = Trader(1)
    trader.seed, trader.pub = bytes.fromhex(spec["seed"]), bytes.fromhex(spec["pub"])
    await svc.submit([eth_market(), *trader.setup(10**12)], operator=True)
    await _report_forever(spec["status"], svc.status, f"READY {port}")


async def _serve_replica(spec: dict[str, Any]) -> None:
    from raydex.actors.local import eth_market
    from raydex.actors.replica import ApiConfig
    from raydex.actors.replica.service import ReplicaConfig, ReplicaService
    from raydex.actors.sequencer import SequencerConfig, SequencerService
    from raydex.actors.snapshot import SnapshotConfig, SnapshotService

    tmp = Path(spec["dir"])
    seq = SequencerService(SequencerConfig(wal_dir=str(tmp / "wal"), snapshot_dir=str(tmp / "s")))
    await seq.start()
    await seq.submit([eth_market()], operator=True)
    tables: dict[str, Any] = {}
    holder = SnapshotService(
        SnapshotConfig(dir=str(tmp / "s"), every_seconds=600),
        on_tables=lambda s, h, t: tables.__setitem__("latest", (s, h, t)),
    )
    await holder.start(f"127.0.0.1:{seq.port}", f"127.0.0.1:{seq.txlog_port}")
    while holder.seq < 1:
        await asyncio.sleep(0.05)
    holder.snapshot()

    async def fetch() -> Any:
        return tables["latest"]

    api = ApiConfig(**spec["api"])
    replica = ReplicaService(
        ReplicaConfig(name="flood", sequencer_target=f"127.0.0.1:{seq.port}", api=api),
        fetch,
        lambda s: holder.blocks_since(s, timeout_s=0.01),
    )
    await replica.start()
    await _report_forever(spec["status"], replica.status, f"READY {replica.direct_port}")


async def _report_forever(path: str, status: Any, ready: str) -> None:
    print(ready, flush=True)
    while True:
        Path(path + ".tmp").write_text(json.dumps(status(), default=str))
        os.replace(path + ".tmp", path)
        await asyncio.sleep(0.5)


def _child_main(role: str, spec_json: str) -> None:
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")  # fmt: skip
    spec = json.loads(spec_json)
    nofile = spec.get("nofile")
    if nofile:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (int(nofile), hard))
    serve = _serve_sequencer if role == "sequencer" else _serve_replica
    asyncio.run(serve(spec))


class Child:
    """One measured child process (``python -m raydex.observability.bench.flood --child``)."""

    def __init__(self, role: str, spec: dict[str, Any], folder: Path) -> None:
        self.status_path = folder / f"{role}.status.json"
        self.log_path = folder / f"{role}.log"
        spec = {**spec, "status": str(self.status_path)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "raydex.observability.bench.flood", "--child", role,
             json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=open(self.log_path, "wb"),  # noqa: SIM115  # the child's until it exits
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if not line.startswith("READY"):
            raise RuntimeError(f"{role} child did not start: {line!r}\n{self.log_path.read_text()}")
        self.port = int(line.split()[1])

    def sample(self) -> dict[str, int]:
        """RSS (KiB) and open descriptors of the child now."""
        rss = 0
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
        return {"rss_kib": rss, "fds": len(os.listdir(f"/proc/{self.proc.pid}/fd"))}

    def status(self) -> dict[str, Any]:
        time.sleep(0.6)  # the next status write
        out: dict[str, Any] = json.loads(self.status_path.read_text())
        return out

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


# ---- the flood ---------------------------------------------------------------------------------


class Peak:
    """The largest RSS and descriptor count seen while sampling."""

    def __init__(self, child: Child) -> None:
        self.child = child
        self.max = child.sample()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            now = self.child.sample()
            self.max = {k: max(v, now[k]) for k, v in self.max.items()}
            await asyncio.sleep(SAMPLE_S)

    def __enter__(self) -> Peak:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()


def _peer(i: int, peers: int = 1 << 30) -> str:
    """The loopback source address of connection ``i`` spread over ``peers`` addresses:
    127.0.10.1 and up."""
    k = i % peers
    return f"127.0.{10 + k // 250}.{k % 250 + 1}"


async def _open(port: int, peer: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    try:
        return await asyncio.open_connection("127.0.0.1", port, local_addr=(peer, 0))
    except OSError:
        return None


async def _closed_soon(reader: asyncio.StreamReader, within: float) -> bool:
    """The server closed the connection within ``within`` seconds (read EOF or a reset)."""
    try:
        while await asyncio.wait_for(reader.read(65536), within):
            pass
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


def _lat(xs: list[float]) -> dict[str, Any]:
    if not xs:
        return {"answered": 0}
    return {"answered": len(xs), "p50_ms": round(statistics.median(xs) * 1e3, 2),
            "max_ms": round(max(xs) * 1e3, 2)}  # fmt: skip


async def _sequencer_flood(
    child: Child, secret: str, trader: Any, silent: int, big: int, same_peer: int
) -> Any:
    from raydex.actors.transport import TcpTxChannel
    from raydex.codecs import decode_outcomes, encode_batch

    before = child.sample()
    member = TcpTxChannel(f"127.0.0.1:{child.port}", secret=secret)
    lat: list[float] = []
    failed = 0
    stop = asyncio.Event()

    async def honest() -> None:
        nonlocal failed
        i = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                reply = await asyncio.wait_for(
                    member.submit(encode_batch([trader.order(280_000 + i % 100, 1, 0)])), 5
                )
                decode_outcomes(reply)
                lat.append(time.perf_counter() - t0)
            except Exception:  # counted: an honest client not answered
                failed += 1
            i += 1
            await asyncio.sleep(0.02)

    held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    with Peak(child) as peak:
        client = asyncio.get_running_loop().create_task(honest())
        for _ in range(same_peer):  # one peer alone: its share is capped
            conn = await _open(child.port, "127.0.9.1")
            if conn is not None:
                held.append(conn)
        for i in range(big):  # an unfinished HELLO announcing 8 MiB, 1 MiB of it sent
            conn = await _open(child.port, _peer(i))
            if conn is not None:
                conn[1].write((8 << 20).to_bytes(4, "little") + bytes([HELLO]) + bytes(1 << 20))
                held.append(conn)
        for i in range(silent):  # silent ones from many peers: the cap in all
            conn = await _open(child.port, _peer(i))
            if conn is not None:
                held.append(conn)
        await asyncio.sleep(1.0)
        during = child.sample()
        await asyncio.sleep(6.0)  # past hello_timeout_s (5 s)
        stop.set()
        await client
    after = child.sample()
    open_after = 0
    for r, w in held:
        open_after += not await _closed_soon(r, 0.05)
        w.close()
    await member.close()
    status = child.status()
    return {
        "connections": {"silent": silent, "one_peer": same_peer, "hello_8MiB": big,
                        "still_open_after": open_after},
        "before": before, "during": during, "peak": peak.max, "after": after,
        "preauth_refused": status["data_plane"]["preauth_refused"],
        "member": {**_lat(lat), "failed": failed},
        "log_bytes": child.log_path.stat().st_size,
    }  # fmt: skip


async def _replica_flood(child: Child, slowloris: int, peers: int, honest_peer: str) -> Any:
    import aiohttp

    refused_before = child.status()["http"]["refused"]
    before = child.sample()
    lat: list[float] = []
    failed = 0
    stop = asyncio.Event()

    async def honest() -> None:
        nonlocal failed
        conn = aiohttp.TCPConnector(local_addr=(honest_peer, 0), force_close=True)
        url = f"http://127.0.0.1:{child.port}/api/v1/orderBooks"
        async with aiohttp.ClientSession(connector=conn) as http:
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    async with http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
                        await r.read()
                        ok = r.status == 200
                except Exception:  # counted: an honest client not answered
                    ok = False
                if ok:
                    lat.append(time.perf_counter() - t0)
                else:
                    failed += 1
                await asyncio.sleep(0.02)

    held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def trickle() -> None:
        while not stop.is_set():
            for _, w in held:
                if not w.is_closing():
                    with contextlib.suppress(ConnectionError, RuntimeError):
                        w.write(b"a")
            await asyncio.sleep(1.0)

    with Peak(child) as peak:
        client = asyncio.get_running_loop().create_task(honest())
        for i in range(slowloris):
            conn = await _open(child.port, _peer(i, peers))
            if conn is not None:
                conn[1].write(b"GET /api/v1/info HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                held.append(conn)
        dripping = asyncio.get_running_loop().create_task(trickle())
        await asyncio.sleep(1.0)
        during = child.sample()
        await asyncio.sleep(11.0)  # past http_head_timeout_s (10 s), bytes still trickling
        stop.set()
        await client
        await dripping
    after = child.sample()
    open_after = 0
    for r, w in held:
        open_after += not await _closed_soon(r, 0.05)
        w.close()
    status = child.status()
    return {
        "connections": {"slowloris": slowloris, "peers": peers, "opened": len(held),
                        "still_open_after": open_after},
        "before": before, "during": during, "peak": peak.max, "after": after,
        "refused": {k: v - refused_before.get(k, 0) for k, v in status["http"]["refused"].items()},
        "gate": {k: status["http"][k] for k in ("max", "max_per_ip", "logs_suppressed")},
        "honest": {**_lat(lat), "failed": failed},
        "log_bytes": child.log_path.stat().st_size,
    }  # fmt: skip


def run(
    silent: int, big: int, same_peer: int, slowloris: int, replica_nofile: int
) -> dict[str, Any]:
    from raydex.actors.local import Trader
    from raydex.cluster.control.deploy import free_port

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the flood's own sockets
    report: dict[str, Any] = {"file_limit_here": hard}
    with tempfile.TemporaryDirectory(prefix="raydex-bench-flood-") as tmp:
        folder = Path(tmp)
        secret = secrets.token_hex(32)
        trader = Trader(1)
        cfg = {
            "wal_dir": str(folder / "wal"), "snapshot_dir": str(folder / "snap"),
            "data_plane": "tcp", "unix_sockets": False, "data_plane_secret": secret,
            "data_port": free_port(), "txlog_port": free_port(),
        }  # fmt: skip
        seq = Child(
            "sequencer",
            {"config": cfg, "seed": trader.seed.hex(), "pub": trader.pub.hex()},
            folder,
        )
        try:
            report["sequencer"] = asyncio.run(
                asyncio.wait_for(
                    _sequencer_flood(seq, secret, trader, silent, big, same_peer), TIMEOUT_S
                )
            )
        finally:
            seq.stop()
        # the honest client's address is exempt from the request budgets (it polls every 20 ms);
        # the flood's addresses are not
        api = {"rate_limit_exempt": ["127.0.0.2"], "fast_lane": True}
        rep = Child("replica", {"dir": str(folder / "r"), "api": api, "nofile": replica_nofile},
                    folder)  # fmt: skip
        try:
            # a few peers: each is held to its share, the others are served; then a peer per
            # connection (a botnet): the global cap keeps the descriptors below the file limit
            for part, peers in (("replica, 4 peers", 4), ("replica, a peer each", slowloris)):
                report[part] = asyncio.run(
                    asyncio.wait_for(_replica_flood(rep, slowloris, peers, "127.0.0.2"), TIMEOUT_S)
                )
                report[part]["file_limit"] = replica_nofile
        finally:
            rep.stop()
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return report


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        _child_main(argv[1], argv[2])
        return 0
    p = argparse.ArgumentParser(
        prog="raydex bench flood", description=__doc__.split("\n")[0] if __doc__ else None
    )
    p.add_argument("--silent", type=int, default=1000, help="silent data-plane connections")
    p.add_argument("--big", type=int, default=24, help="unfinished 8 MiB HELLOs (the issue's 24)")
    p.add_argument("--one-peer", type=int, default=40, help="silent connections from one peer")
    p.add_argument("--slowloris", type=int, default=5000, help="trickling HTTP heads")
    p.add_argument("--replica-nofile", type=int, default=4096, help="the replica's file limit")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    report = run(args.silent, args.big, args.one_peer, args.slowloris, args.replica_nofile)
    if args.json:
        print(json.dumps(report))
    else:
        for part in report:
            if not isinstance(report[part], dict):
                continue
            print(f"-- {part}")
            for k, v in report[part].items():
                print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
