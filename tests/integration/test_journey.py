"""What the README tells a user to run, run the way a user runs it: by path, venv not activated.

Every command is ``.venv/bin/raydex`` / ``.venv/bin/ray`` by absolute path with a ``PATH`` that
does not hold the virtualenv (and no ``VIRTUAL_ENV``), so a command that shells out to ``ray``
from ``PATH`` fails here as it failed for users (issue 8).

1. ``ray start --head`` with ``raydex node-args`` (its own port, temp dir, client-server and
   dashboard-agent ports, no dashboard), then ``raydex deploy raydex.yaml`` (bind 0.0.0.0, the
   default that crashed with ``KeyError: 'address'``), ``raydex deposit --l1-address`` twice
   (creates the account, prints its index; then credits it), a REST read and a WebSocket
   ``order_book`` subscription through the shared port, the replica count edited in a copy of
   the spec and deployed again (the open WebSocket and the sequencer survive: live), ``raydex
   status`` (per host oversubscription line on this small machine), ``raydex down``.
2. ``raydex up`` starting its own head (dashboard on, profiling, Prometheus/Grafana variables
   passed through), ``raydex status`` finding that head with no address given, and ``raydex down
   --stop-ray`` stopping that head and nothing else: the session's Ray still answers.
3. A simulated two-host cluster (``ray.cluster_utils.Cluster`` in a child process, as in
   test_placement.py): ``raydex up --address`` (the other ``KeyError``), replicas scaled from one
   host onto the second, the roomy host's bundle reserving the core it pins, ``raydex down``.

Each test stops what it started, by PID (the head's ``ray start --block`` leader, then its process
group), also when it fails; nothing outlives the test. They are ``slow``: each boots a Ray head
and the five actors (~40-80 s on 2 cores).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import ray
import yaml

from raydex.cluster.control.deploy import free_port
from raydex.cluster.control.head import group_members

pytestmark = [pytest.mark.slow, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv's bin: commands run from here, by path
CHAIN_ID = 777  # not the default 304: /info must say what the spec says (issue 8, defect 9)
STEP_TIMEOUT_S = 180
READY_TIMEOUT_S = 120.0


def user_env(**extra: str) -> dict[str, str]:
    """The caller's environment with the venv neither on PATH nor announced, plus ``extra``."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != BIN]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "RAY_ADDRESS")}
    return {**env, "PATH": os.pathsep.join(path), **extra}


def run(argv: list[str], env: dict[str, str], cwd: Path = REPO) -> str:
    done = subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=STEP_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, (
        f"{argv} -> {done.returncode}\n{done.stdout}\n{done.stderr[-4000:]}"
    )
    return done.stdout


def raydex(*args: str, env: dict[str, str]) -> str:
    return run([str(BIN / "raydex"), *args], env)


def write_spec(path: Path, state: Path, http: int, data_port: int, **group: Any) -> Path:
    """The repository's raydex.yaml with this test's folders, ports, chain id and one group."""
    tree = yaml.safe_load((REPO / "raydex.yaml").read_text())
    tree["chain_id"] = CHAIN_ID
    tree["ports"] = {"http": http, "data": data_port}
    tree["sequencer"]["wal_dir"] = str(state / "wal")
    tree["sequencer"]["oracle_interval_ms"] = 0
    tree["snapshot"]["dir"] = str(state / "snapshots")
    tree["markets"] = tree["markets"][:2]
    (base,) = tree["replica_groups"]
    if group:  # the group's own count replaces the repository's (one per NUMA node)
        base.pop("replicas", None)
        base.pop("replicas_per_numa_node", None)
    tree["replica_groups"] = [{**base, **group}]
    path.write_text(yaml.safe_dump(tree))
    return path


def stop_group(leader: int, grace_s: float = 30.0) -> None:
    """SIGTERM the leader (``ray start --block`` stops its processes, after a node drain unless
    ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0``), then SIGKILL the rest of its process group
    after ``grace_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(leader, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while group_members(leader) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in group_members(leader):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class Head:
    """A ``ray start --head --block`` of this test: its leader PID, address and environment."""

    proc: subprocess.Popen[bytes]
    address: str
    env: dict[str, str]


@pytest.fixture
def scratch() -> Iterator[Path]:
    # short: Ray's socket paths live under the temp dir
    path = Path(tempfile.mkdtemp(prefix="rdxj", dir="/tmp"))
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


@pytest.fixture
def head(scratch: Path) -> Iterator[Head]:
    """``ray start --head $(raydex node-args --role head)`` on its own ports and temp dir."""
    # Ray's token auth, with this test's own token: raydex refuses a data plane on 0.0.0.0 without
    # it (`allow_unauthenticated_ray`), and the user's ~/.ray is not this test's business
    env = user_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
                   RAYDEX_STATE_DIR=str(scratch / "state"))  # fmt: skip
    # no node drain when stop_group SIGTERMs it (a head's drain waits its whole 30 s), as `raydex
    # up` starts its head (cluster/control/head.py head_env)
    env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"
    flags = run([str(BIN / "raydex"), "node-args", "--role", "head"], env).split()
    port = free_port()
    client = free_port(avoid={port})
    agent = free_port(avoid={port, client})
    argv = [
        str(BIN / "ray"), "start", "--head", "--block", "--disable-usage-stats",
        f"--port={port}", f"--temp-dir={scratch / 'ray'}", "--include-dashboard=false",
        f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent}",
        *flags,
    ]  # fmt: skip
    log = scratch / "head.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        text = wait_for_log(proc, log, "This command will now block forever")  # after the banner
        address = re.search(r"--address='([^']+)'", text)
        assert address, text
        yield Head(proc, address.group(1), {**env, "RAY_ADDRESS": address.group(1)})
    finally:
        stop_group(proc.pid)
        proc.wait(timeout=60)


def wait_for_log(proc: subprocess.Popen[bytes], log: Path, line: str) -> str:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))
        if line in text:
            return text
        assert proc.poll() is None, f"ray start exited with {proc.returncode}:\n{text[-3000:]}"
        assert time.monotonic() < deadline, f"no {line!r} in {READY_TIMEOUT_S}s:\n{text[-3000:]}"
        time.sleep(0.2)


# --- the client side: what a trader's program does through the shared port ----------------------


async def rest(port: int, path: str) -> Any:
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"http://127.0.0.1:{port}{path}", timeout=aiohttp.ClientTimeout(total=30)) as r,
    ):
        assert r.status == 200, await r.text()
        return await r.json()


async def subscribe(ws: aiohttp.ClientWebSocketResponse, market: int) -> dict[str, Any]:
    await ws.send_json({"type": "subscribe", "channel": f"order_book/{market}"})
    while True:
        msg = await asyncio.wait_for(ws.receive_json(), timeout=30)
        if msg.get("type") in ("subscribed/order_book", "error"):
            return dict(msg)


class Trader:
    """A REST reader plus one WebSocket kept open across a redeploy (one event loop)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.loop = asyncio.new_event_loop()
        self.session: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None

    def do(self, coro: Any) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout=60))

    def open(self) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            self.session = aiohttp.ClientSession()
            self.ws = await self.session.ws_connect(f"http://127.0.0.1:{self.port}/stream")
            first = await self.ws.receive_json()
            assert first["type"] == "connected", first
            return await subscribe(self.ws, 0)

        result: dict[str, Any] = self.do(go())
        return result

    def subscribe(self, market: int) -> dict[str, Any]:
        assert self.ws is not None
        result: dict[str, Any] = self.do(subscribe(self.ws, market))
        return result

    def close(self) -> None:
        async def go() -> None:
            if self.ws is not None:
                await self.ws.close()
            if self.session is not None:
                await self.session.close()

        self.do(go())
        self.loop.close()


def status_json(env: dict[str, str]) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(raydex("status", "--json", env=env))
    return decoded


# --- 1. the README's cluster path on this host -------------------------------------------------


def test_ray_start_then_raydex_deploy_serves_scales_live_reports_and_goes_down(
    head: Head, scratch: Path
) -> None:
    http = free_port()
    data_port = free_port(pair=True, avoid={http})
    spec = write_spec(scratch / "raydex.yaml", scratch, http, data_port, replicas=1)
    out = raydex("deploy", str(spec), env=head.env)  # --bind 0.0.0.0, the default
    assert "raydex-sequencer" in out and "raydex-replica-public-0" in out

    books = asyncio.run(rest(http, "/api/v1/orderBooks"))
    assert [b["symbol"] for b in books["order_books"]] == ["ETH", "BTC"]
    assert asyncio.run(rest(http, "/info"))["network_id"] == CHAIN_ID
    # a Lighter bot developer's step 2: fund the account of an L1 address (created here)
    l1 = "0x" + "5B" * 20
    index = int(raydex("deposit", "--l1-address", l1, "--amount", "1000", env=head.env))
    again = int(raydex("deposit", "--l1-address", l1.lower(), "--amount", "2.5", env=head.env))
    assert again == index
    found = asyncio.run(rest(http, f"/api/v1/accountsByL1Address?l1_address={l1}"))
    assert [(a["index"], a["collateral"]) for a in found["sub_accounts"]] == [
        (index, "1002.500000")
    ]
    trader = Trader(http)
    try:
        assert trader.open()["type"] == "subscribed/order_book"
        before = status_json(head.env)["actors"]

        scaled = write_spec(scratch / "raydex-3.yaml", scratch, http, data_port, replicas=2)
        out = raydex("deploy", str(scaled), env=head.env)
        assert "created: ['raydex-replica-public-1']" in out and "removed: []" in out
        # the WebSocket opened before the redeploy still answers: nothing restarted under it
        assert trader.subscribe(1)["type"] == "subscribed/order_book"
    finally:
        trader.close()

    text = raydex("status", env=head.env)
    after = status_json(head.env)["actors"]
    assert sorted(after) == [
        "raydex-committer", "raydex-monitor", "raydex-replica-public-0",
        "raydex-replica-public-1", "raydex-sequencer", "raydex-snapshot",
    ]  # fmt: skip
    assert status_json(head.env)["health"]["verdict"] == "healthy"
    for name in ("raydex-sequencer", "raydex-replica-public-0"):
        assert after[name]["pid"] == before[name]["pid"], f"{name} restarted"
    cores = os.cpu_count() or 1
    if cores < 5:  # this machine: sequencer, holder, committer and two replicas pin 5 cores
        assert re.search(rf"host \S+: {cores} cores, 5 pinned requests: oversubscribed, "
                         r"Ray reserves 0\.05 CPU per actor", text), text  # fmt: skip

    out = raydex("down", env=head.env)
    assert out.startswith("stopped: raydex-committer, raydex-monitor, raydex-replica-public-0")
    with pytest.raises(aiohttp.ClientConnectionError):
        asyncio.run(rest(http, "/info"))


# --- 2. raydex up / down --stop-ray --------------------------------------------------------------


@pytest.mark.usefixtures("ray_session")
def test_raydex_up_starts_its_own_head_and_down_stop_ray_stops_that_one_only(
    scratch: Path,
) -> None:
    state = scratch / "state"
    env = user_env(
        RAYDEX_STATE_DIR=str(state),
        RAY_PROMETHEUS_HOST="http://127.0.0.1:9090",
        RAY_GRAFANA_HOST="http://127.0.0.1:3000",
    )
    http = free_port()
    data_port = free_port(pair=True, avoid={http})
    dash = free_port(avoid={http, data_port, data_port + 1})
    gcs = free_port(avoid={http, data_port, data_port + 1, dash})
    spec = write_spec(scratch / "raydex.yaml", scratch, http, data_port, replicas=1)
    up = [
        "up", "--spec", str(spec), "--port", str(gcs), "--temp-dir", str(scratch / "ray"),
        "--dashboard-port", str(dash), "--",
        f"--ray-client-server-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
    ]  # fmt: skip
    try:
        out = raydex(*up, env=env)
        record = json.loads((state / "head.json").read_text())
        assert f"dashboard http://127.0.0.1:{dash} (profiling on; " in out
        assert "RAY_PROMETHEUS_HOST=http://127.0.0.1:9090" in out
        environ = Path(f"/proc/{record['pid']}/environ").read_bytes().split(b"\0")
        assert b"RAY_DASHBOARD_ENABLE_PROFILING=1" in environ
        assert b"RAY_GRAFANA_HOST=http://127.0.0.1:3000" in environ
        assert asyncio.run(rest(http, "/info"))["network_id"] == CHAIN_ID
        dashboard = asyncio.run(_get_status(f"http://127.0.0.1:{dash}/"))
        assert dashboard == 200

        st = status_json(env)  # no address: the head `raydex up` recorded
        assert "raydex-replica-public-0" in st["actors"]
        members = group_members(record["pid"])
        assert len(members) > 3
        # Ray's Jobs page (its REST API) names each raydex driver by what it did
        jobs = asyncio.run(_get_json(f"http://127.0.0.1:{dash}/api/jobs/", _ray_token(env)))
        names = [(j.get("metadata") or {}).get("job_name", "") for j in jobs]
        assert "raydex up: deploys raydex.yaml into namespace raydex (sequencer, snapshot " \
            "holder, committer; replica groups public x1)" in names, names  # fmt: skip
        assert "raydex status --json" in names, names

        out = raydex("down", "--stop-ray", env=env)
        assert "stopped the Ray head `raydex up` started (pid " in out
        assert "needed SIGKILL" not in out, out  # every process ended on its SIGTERM
        assert not any(_alive(p) for p in members)
        assert not (state / "head.json").exists()
    finally:
        if (state / "head.json").exists():  # failed midway: stop it by its recorded PID
            stop_group(json.loads((state / "head.json").read_text())["pid"])
    # the session's Ray, another Ray on this host, was left alone
    assert ray.get(ray.remote(lambda: 42).remote(), timeout=60) == 42


def _ray_token(env: dict[str, str]) -> dict[str, str]:
    """The bearer header Ray's dashboard API wants when the head runs with token auth (Ray's
    own lookup: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token)."""
    token = env.get("RAY_AUTH_TOKEN")
    path = Path(env.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    if not token and path.is_file():
        token = path.read_text().strip()
    return {"Authorization": f"Bearer {token}"} if token else {}


async def _get_json(url: str, headers: dict[str, str]) -> Any:
    async with (
        aiohttp.ClientSession(headers=headers) as s,
        s.get(url, timeout=aiohttp.ClientTimeout(total=30)) as r,
    ):
        assert r.status == 200, await r.text()
        return await r.json()


async def _get_status(url: str) -> int:
    async with (
        aiohttp.ClientSession() as s,
        s.get(url, timeout=aiohttp.ClientTimeout(total=30)) as r,
    ):
        return r.status


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


# --- 3. a simulated two-host cluster ------------------------------------------------------------


def serve_cluster() -> None:
    """Child process: a two-node ``Cluster`` (host-a head, host-b worker, this machine's cores
    and NUMA resources each); prints its address, runs until stdin closes, then shuts down."""
    from ray.cluster_utils import Cluster

    from raydex.cluster.topology import HOST_LABEL, ROLE_LABEL, read_topology

    topology = read_topology()
    cluster = Cluster()
    try:
        for host, role in (("host-a", "head"), ("host-b", "worker")):
            cluster.add_node(
                num_cpus=topology.cpu_count,
                resources={k: float(v) for k, v in topology.resources().items()},
                labels={HOST_LABEL: host, ROLE_LABEL: role},
                include_dashboard=False,
                dashboard_agent_listen_port=free_port(),
            )
        cluster.wait_for_nodes()
        print(json.dumps({"address": cluster.address}), flush=True)
        sys.stdin.read()
    finally:
        cluster.shutdown()  # type: ignore[no-untyped-call]


@pytest.fixture
def two_hosts(scratch: Path) -> Iterator[tuple[str, dict[str, str]]]:
    token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    child_env = {**os.environ, "TMPDIR": str(scratch), "RAY_ADDRESS": "", **token}
    with open(scratch / "cluster.log", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, __file__], env=child_env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=err, start_new_session=True,
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT_S)
        line = proc.stdout.readline() if ready else b""
        log = (scratch / "cluster.log").read_text(errors="replace")[-3000:]
        assert line, f"the cluster did not come up:\n{log}"
        address = json.loads(line)["address"]
        yield address, user_env(**token, RAYDEX_STATE_DIR=str(scratch / "state"))
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
        stop_group(proc.pid, grace_s=5.0)
        proc.wait(timeout=30)


def test_raydex_up_on_a_two_host_cluster_scales_onto_the_second_host_and_reserves_honestly(
    two_hosts: tuple[str, dict[str, str]], scratch: Path
) -> None:
    address, env = two_hosts
    http = free_port()
    data_port = free_port(pair=True, avoid={http})
    spec = write_spec(scratch / "raydex.yaml", scratch, http, data_port, replicas=1)
    out = raydex("up", "--address", address, "--spec", str(spec), env=env)  # bind 0.0.0.0
    assert "raydex is up: replicas raydex-replica-public-0" in out
    books = asyncio.run(rest(http, "/api/v1/orderBooks"))
    assert [b["symbol"] for b in books["order_books"]] == ["ETH", "BTC"]
    trader = Trader(http)
    try:
        assert trader.open()["type"] == "subscribed/order_book"
        scaled = write_spec(scratch / "raydex-2.yaml", scratch, http, data_port, replicas=2)
        out = raydex("deploy", str(scaled), "--address", address, env=env)
        assert "created: ['raydex-replica-public-1']" in out
        assert trader.subscribe(1)["type"] == "subscribed/order_book"
    finally:
        trader.close()

    st = json.loads(raydex("status", "--json", "--address", address, env=env))
    hosts = {h["host"]: h for h in st["hosts"]}
    assert hosts["host-a"]["actors"] == [
        "raydex-committer", "raydex-replica-public-0", "raydex-sequencer", "raydex-snapshot"
    ]  # fmt: skip
    assert hosts["host-b"]["actors"] == ["raydex-replica-public-1"]
    cores = hosts["host-b"]["cores"]
    # host-b has room: its replica's bundle reserves the core it pins
    assert hosts["host-b"]["pinned"] == 1 and hosts["host-b"]["reserved"] == [1.0]
    assert not hosts["host-b"]["oversubscribed"]
    if cores < 4:  # host-a pins 4 cores: oversubscribed, and status says so
        assert hosts["host-a"]["oversubscribed"] and hosts["host-a"]["reserved"] == [0.05]
        assert "oversubscribed, Ray reserves 0.05 CPU per actor" in hosts["host-a"]["line"]

    out = raydex("down", "--address", address, env=env)
    assert "raydex-replica-public-1" in out and "raydex-sequencer" in out


if __name__ == "__main__":
    serve_cluster()
