"""A Ray cluster of network namespaces on this machine: one "host" per namespace, a bridge between.

::

    root namespace: bridge rdxb<id> 10.X.Y.1/24 (the test process reaches every host from here)
      ├─ veth ─ netns rdx<id>-host-a  10.X.Y.2   ray start --head  $(raydex node-args --host host-a)
      ├─ veth ─ netns rdx<id>-host-b  10.X.Y.3   ray start --address=10.X.Y.2:6379 ... host-b
      └─ veth ─ netns rdx<id>-host-c  10.X.Y.4   ray start --address=10.X.Y.2:6379 ... host-c

Each namespace has its own network stack (ports never collide with the suite's shared Ray, this
machine's services or another run), no default route (so Ray needs ``--node-ip-address``, as on
a host with several or no routable addresses), and shares the hostname of the machine (so every
host needs ``raydex node-args --host``: the default label, the hostname, would merge them). Each
host's Ray has its own temp dir, and each host's processes their own temp folder (``TMPDIR``:
the sequencer's data-plane socket is named by port, and every cluster's sequencer has port 50051);
every Ray process runs with token authentication and this run's own token (``RAY_AUTH_TOKEN``),
never the user's ``~/.ray``.

``<id>`` is the creating process's pid: two runs at once use different names and a /24 that no
interface of the machine holds. ``close`` stops every process of every namespace by PID (``ip
netns pids``; nothing else runs there), deletes the namespaces, the veths and the bridge, and
removes the temp dirs; it never runs ``ray stop``. Commands run inside a host with ``run``
(``ip netns exec``); with ``RAYDEX_TEST_TIMING`` set each one's duration goes to stderr. Needs
root and iproute2: ``unavailable()`` says why not, for a skip.

Use: ``with netns_cluster() as c:`` (a module-scoped fixture's body; see
tests/integration/test_multihost.py); ``c.kill_host(label)`` and ``c.start_ray(label)`` take a host
down and back; tests/kit/multihost.py has the raydex side (spec, deploy, status, trades).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

BIN = Path(sys.executable).parent
READY_LINE = "This command will now block forever"
GCS_PORT = 6379
DASHBOARD_PORT = 8265


def _ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    argv = ["ip", *(("netns", "exec", netns, "ip") if netns else ()), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} -> {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def unavailable() -> str | None:
    """Why this machine cannot make the cluster (not root, no iproute2, namespaces refused), or
    None when it can: it creates and deletes a namespace and a bridge to find out."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    probe, bridge = f"rdxprobe{os.getpid()}", f"rdxp{os.getpid() % 100000}"
    try:
        _ip("netns", "add", probe)
        _ip("link", "add", bridge, "type", "bridge")
    except (RuntimeError, OSError) as exc:
        return f"cannot create a network namespace and a bridge here: {exc}"
    finally:
        _ip("link", "del", bridge, check=False)
        _ip("netns", "del", probe, check=False)
    return None


def _free_subnet() -> str:
    """``10.X.Y`` of a /24 no interface of this machine holds (X, Y from the pid)."""
    used = set(re.findall(r"inet (10\.\d+\.\d+)\.\d+", _ip("-o", "-4", "addr")))
    pid = os.getpid()
    for i in range(256):
        net = f"10.{200 + (pid + i) % 50}.{(pid // 50 + i) % 256}"
        if net not in used:
            return net
    raise RuntimeError("no free 10.x.y.0/24 for the namespaces' bridge")


@dataclass
class Host:
    """One namespace: its host label, namespace name, IP, Ray temp dir, and its ``ray start
    --block`` while it runs."""

    label: str
    netns: str
    ip: str
    temp_dir: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0


@dataclass
class NetnsCluster:
    """See the module docstring. ``labels``: the hosts, head first."""

    root: Path
    labels: Sequence[str] = ("host-a", "host-b", "host-c")
    object_store_bytes: int = 150_000_000
    token: str = field(default_factory=lambda: secrets.token_hex(32))
    #: the head's dashboard (port 8265 on its IP); off, it saves the machine a few processes
    dashboard: bool = False
    hosts: dict[str, Host] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.id = os.getpid() % 100000
        self.bridge = f"rdxb{self.id}"
        self.net = ""

    # --- the network ------------------------------------------------------------------------

    def create_network(self) -> None:
        self.net = _free_subnet()
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.net}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, label in enumerate(self.labels):
            netns = f"rdx{self.id}-{label}"
            outside, inside = f"rdx{self.id}v{i}", f"rdx{self.id}p{i}"
            ip = f"{self.net}.{i + 2}"
            _ip("netns", "add", netns)
            host = Host(label, netns, ip, self.root / label, self.root / f"{label}.log")
            self.hosts[label] = host
            (host.temp_dir / "tmp").mkdir(parents=True, exist_ok=True)
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", netns)
            _ip("link", "set", outside, "master", self.bridge, "up")
            _ip("link", "set", "lo", "up", netns=netns)
            _ip("addr", "add", f"{ip}/24", "dev", inside, netns=netns)
            _ip("link", "set", inside, "up", netns=netns)

    @property
    def head(self) -> Host:
        return self.hosts[self.labels[0]]

    @property
    def address(self) -> str:
        return f"{self.head.ip}:{GCS_PORT}"

    def env(self, **extra: str) -> dict[str, str]:
        """What every command of this cluster runs with: this run's Ray token, no drain on
        SIGTERM, the venv first on PATH (the dashboard agent looks for py-spy there), and no
        ``RAY_ADDRESS`` of the caller's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        return {
            **env,
            "PATH": os.pathsep.join((str(BIN), env.get("PATH", ""))),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": self.token,
            "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
            "RAY_DISABLE_USAGE_STATS": "1",
            "RAYDEX_STATE_DIR": str(self.root / "raydex-state"),
            **extra,
        }

    def host_env(self, label: str) -> dict[str, str]:
        """``env()`` with ``label``'s own temp folder (``TMPDIR``): the namespaces share one
        file system, and what a host keeps in its temp folder (the sequencer's data-plane Unix
        socket, ``raydex-dataplane-<port>.sock``) must not meet another host's, another
        cluster's or the machine's, as on separate machines it would not."""
        return self.env(TMPDIR=str(self.hosts[label].temp_dir / "tmp"))

    # --- commands inside a host -------------------------------------------------------------

    def run(
        self, label: str, argv: Sequence[str], *, timeout: float = 240, check: bool = True,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """``argv`` inside ``label``'s namespace, its output captured."""
        full = ["ip", "netns", "exec", self.hosts[label].netns, *argv]
        t0 = time.monotonic()
        done = subprocess.run(full, capture_output=True, text=True, timeout=timeout, check=False,
                              env=env or self.host_env(label), cwd=self.root)  # fmt: skip
        if os.environ.get("RAYDEX_TEST_TIMING"):  # each command's duration, on stderr
            what = " ".join(a.rsplit("/", 1)[-1] for a in argv)[:90]
            print(f"[timing] {time.monotonic() - t0:5.1f}s {what}", file=sys.stderr)
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} on {label} -> {done.returncode}\n{done.stdout[-3000:]}\n"
                f"{done.stderr[-5000:]}"
            )
        return done

    def raydex(
        self, *args: str, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """``raydex ARGS`` on the head, by path, as an operator would run it."""
        return self.run(self.labels[0], [str(BIN / "raydex"), *args], check=check,
                        timeout=timeout)  # fmt: skip

    # --- Ray on each host -------------------------------------------------------------------

    def start_ray(self, label: str, timeout_s: float = 180.0, as_host: str | None = None) -> None:
        """``ray start --block`` in ``label``'s namespace with ``raydex node-args --host
        <label>`` and ``--node-ip-address``; returns once it says it runs. ``as_host``: the host
        label it announces instead (another host's: two machines that share a hostname)."""
        self._await_ray(label, self._spawn_ray(label, as_host), timeout_s)

    def start_rays(self, labels: Sequence[str], timeout_s: float = 180.0) -> None:
        """``start_ray`` of several workers at once (the head must run already)."""
        started = [(label, self._spawn_ray(label, None)) for label in labels]
        for label, offset in started:
            self._await_ray(label, offset, timeout_s)

    def _spawn_ray(self, label: str, as_host: str | None) -> int:
        """Starts ``ray start --block`` in ``label``; the offset of its output in the host's log."""
        host = self.hosts[label]
        is_head = label == self.labels[0]
        role = "head" if is_head else "worker"
        flags = self.run(label, [str(BIN / "raydex"), "node-args", "--role", role,
                                 "--host", as_host or host.label]).stdout.split()  # fmt: skip
        argv = [
            str(BIN / "ray"), "start", "--block", f"--node-ip-address={host.ip}",
            f"--temp-dir={host.temp_dir}", f"--object-store-memory={self.object_store_bytes}",
            *flags,
        ]  # fmt: skip
        if is_head:
            argv[2:2] = ["--head", f"--port={GCS_PORT}"]
            argv[4:4] = (
                ["--include-dashboard=true", f"--dashboard-host={host.ip}",
                 f"--dashboard-port={DASHBOARD_PORT}"]
                if self.dashboard else ["--include-dashboard=false"]
            )  # fmt: skip
        else:
            argv.insert(2, f"--address={self.address}")
        (host.temp_dir / "tmp").mkdir(parents=True, exist_ok=True)
        host.starts += 1
        with open(host.log, "ab") as out:
            out.write(f"\n--- start {host.starts}: {' '.join(argv)}\n".encode())
            out.flush()
            offset = out.tell()
            host.proc = subprocess.Popen(
                ["ip", "netns", "exec", host.netns, *argv], stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, env=self.host_env(label),
                start_new_session=True,
            )  # fmt: skip
        return offset

    def _await_ray(self, label: str, offset: int, timeout_s: float) -> None:
        host = self.hosts[label]
        assert host.proc is not None
        deadline = time.monotonic() + timeout_s
        while True:
            text = host.log.read_bytes()[offset:].decode(errors="replace")
            if READY_LINE in text:
                return
            if host.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"ray start on {label} failed:\n{text[-4000:]}")
            time.sleep(0.2)

    def pids(self, label: str) -> list[int]:
        """Every process in ``label``'s namespace (all of them this cluster's)."""
        out = _ip("netns", "pids", self.hosts[label].netns, check=False)
        return [int(p) for p in out.split()]

    def kill_host(self, label: str, grace_s: float = 0.0) -> int:
        """Stop every process of ``label`` by PID (SIGTERM, then SIGKILL after ``grace_s``) and
        wait until none is left; how many there were. ``grace_s=0``: a host that dies at once."""
        host = self.hosts[label]
        pids = self.pids(label)
        first = signal.SIGTERM if grace_s > 0 else signal.SIGKILL
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, first)
        deadline = time.monotonic() + grace_s
        while self.pids(label) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in self.pids(label):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while self.pids(label) and time.monotonic() < deadline:
            time.sleep(0.05)
        if host.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                host.proc.wait(timeout=10)
            host.proc = None
        return len(pids)

    def close(self) -> None:
        """Stop everything this cluster started, by PID, and delete its network (idempotent)."""
        for label in reversed(list(self.hosts)):
            with contextlib.suppress(Exception):
                self.kill_host(label, grace_s=5.0 if label == self.labels[0] else 0.0)
        for i, host in enumerate(self.hosts.values()):
            _ip("link", "del", f"rdx{self.id}v{i}", check=False)
            _ip("netns", "del", host.netns, check=False)
        _ip("link", "del", self.bridge, check=False)


def make_root() -> Path:
    """A short folder for the cluster (Ray's socket paths live under its temp dirs)."""
    return Path(tempfile.mkdtemp(prefix="rdxn", dir="/tmp"))


@contextlib.contextmanager
def netns_cluster(
    labels: Sequence[str] = ("host-a", "host-b", "host-c"), keep_root: bool = False
) -> Iterator[NetnsCluster]:
    """A running cluster for a ``with`` block (a pytest fixture's body, a script): the network
    made, Ray started on every host (the head, then the workers at once); on the way out,
    whatever happened, every process stopped by PID, the network deleted and, unless
    ``keep_root``, its folder removed. How long the start and the whole block took go to
    stderr. Check ``unavailable()`` first."""
    c = NetnsCluster(make_root(), labels=labels)
    started = time.monotonic()
    try:
        c.create_network()
        c.start_ray(c.labels[0])
        c.start_rays(c.labels[1:])
        print(f"\nnetns cluster: {len(labels)} Ray hosts up in {time.monotonic() - started:.1f} s",
              file=sys.stderr)  # fmt: skip
        yield c
    finally:
        c.close()
        print(f"netns cluster: used for {time.monotonic() - started:.1f} s", file=sys.stderr)
        if not keep_root:
            shutil.rmtree(c.root, ignore_errors=True)
