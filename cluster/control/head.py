"""The local Ray head that ``raydex up`` starts, and stopping exactly that one.

``start_head`` runs ``ray start --head --block`` with this host's ``raydex node-args`` from the
interpreter's own environment (``<sys.executable's folder>/ray``, else ``python -m
ray.scripts.scripts``: a virtualenv works without being activated), detached in a new session,
output to a log file. ``--block`` keeps that ``ray start`` process alive as the parent of every
process of the head (GCS, raylet, dashboard, workers); on SIGTERM it shuts them all down through
Ray's own ``kill_all_processes``. When the log says the runtime started, the head is recorded in
a state file (JSON, ``head.json`` under ``state_dir()``): the leader's PID and exact argv, GCS
address, port, temp dir, log, dashboard URL, auth mode.

``stop_head`` stops only that head: it checks that the recorded PID still runs the recorded
command (so a recycled PID is never signalled), sends it SIGTERM, waits for it and every process
of its process group (the group is the leader's PID: ``start_new_session``) to exit, and after
``grace_s`` sends SIGKILL to what is left of that group. It never runs ``ray stop``, which stops
every Ray on the host. A group whose leader is gone is stopped only if a member's command line
names the recorded GCS address.

Environment of the head: the caller's, plus ``RAY_DASHBOARD_ENABLE_PROFILING=1`` unless set (the
dashboard's stack trace and flame graph buttons), ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0``
unless set (no node drain on SIGTERM: see ``head_env``), this interpreter's folder first on
``PATH`` (the dashboard agent runs the ``py-spy`` it finds there: a virtualenv that was not
activated would otherwise answer "py-spy is not installed"), and ``RAY_AUTH_MODE=token`` when a
Ray token is available and the mode is unset (what ``ray start`` itself would choose), so the
driver connecting by explicit address uses the same mode. ``RAY_PROMETHEUS_HOST``,
``RAY_GRAFANA_HOST`` and ``RAY_GRAFANA_IFRAME_HOST`` pass through as given.

Cost: starting waits for Ray (seconds); stopping is Ray's own shutdown without a drain, bounded by
``grace_s``. Linux only (``/proc``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..topology import node_args, read_topology

__all__ = [
    "PASSTHROUGH_ENV",
    "HeadError",
    "HeadRecord",
    "StopResult",
    "group_members",
    "head_env",
    "ray_command",
    "read_record",
    "record_path",
    "running",
    "start_head",
    "stop_head",
]

#: Ray's environment variables that ``raydex up`` passes to the head as the caller gave them.
PASSTHROUGH_ENV = ("RAY_PROMETHEUS_HOST", "RAY_GRAFANA_HOST", "RAY_GRAFANA_IFRAME_HOST")
#: ``ray start --block`` prints this after its whole banner (the GCS address, the dashboard URL):
#: waiting for "Ray runtime started" instead raced the lines that follow it.
_READY = "This command will now block forever"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class HeadError(RuntimeError):
    """The head did not start (the message carries the tail of its log) or cannot be stopped."""


@dataclass(frozen=True, slots=True)
class HeadRecord:
    """A head started by ``raydex up``, as written to the state file."""

    pid: int
    argv: tuple[str, ...]
    address: str
    port: int
    temp_dir: str | None
    log: str
    dashboard_url: str | None
    auth_mode: str
    started_at: float
    session_dir: str | None = None


@dataclass(frozen=True, slots=True)
class StopResult:
    """What ``stop_head`` did: the processes it signalled, and which of them needed SIGKILL."""

    terminated: tuple[int, ...]
    killed: tuple[int, ...]


def state_dir() -> Path:
    """``$RAYDEX_STATE_DIR``, else ``~/.raydex``."""
    return Path(os.environ.get("RAYDEX_STATE_DIR") or Path.home() / ".raydex")


def record_path() -> Path:
    return state_dir() / "head.json"


def ray_command() -> list[str]:
    """The ``ray`` CLI of this interpreter's environment (never the one on ``PATH``)."""
    script = Path(sys.executable).parent / "ray"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [sys.executable, "-m", "ray.scripts.scripts"]


def _token_available(env: Mapping[str, str]) -> bool:
    if env.get("RAY_AUTH_TOKEN"):
        return True
    path = env.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    return Path(path).is_file()


def head_env(base: Mapping[str, str]) -> dict[str, str]:
    """The head's environment (see the module docstring)."""
    env = dict(base)
    env.setdefault("RAY_DASHBOARD_ENABLE_PROFILING", "1")
    # the dashboard agent runs py-spy found on PATH: this environment's, activated or not
    here = str(Path(sys.executable).parent)
    path = env.get("PATH", "")
    if path.split(os.pathsep)[0] != here:
        env["PATH"] = os.pathsep.join(p for p in (here, path) if p)
    if "RAY_AUTH_MODE" not in env:
        env["RAY_AUTH_MODE"] = "token" if _token_available(env) else "disabled"
    # On SIGTERM, Ray (2.60) first drains the node, waiting up to this long for its raylet to go
    # idle and exit, which a head's raylet does not do: every `raydex down --stop-ray` took the
    # whole 30 s and ended in SIGKILL. raydex stops its actors itself before it stops the head.
    env.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
    return env


def start_head(
    *,
    port: int,
    temp_dir: str | None = None,
    dashboard: bool = True,
    dashboard_port: int = 8265,
    dashboard_host: str | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    record: Path | None = None,
    timeout_s: float = 180.0,
) -> HeadRecord:
    """Start the head (see the module docstring), wait until it runs, record it, return it."""
    record = record or record_path()
    if (old := read_record(record)) is not None and running(old):
        raise HeadError(
            f"a head started by `raydex up` still runs (pid {old.pid}, {old.address}; "
            f"{record}): `raydex down --stop-ray` first"
        )
    record.parent.mkdir(parents=True, exist_ok=True)
    argv = [*ray_command(), "start", "--head", "--block", "--disable-usage-stats", f"--port={port}"]
    if temp_dir is not None:
        argv.append(f"--temp-dir={os.path.abspath(temp_dir)}")
    if dashboard:
        argv += ["--include-dashboard=true", f"--dashboard-port={dashboard_port}"]
        if dashboard_host is not None:
            argv.append(f"--dashboard-host={dashboard_host}")
    else:
        argv.append("--include-dashboard=false")
    argv += [*node_args(read_topology(), "head"), *extra_args]
    full_env = head_env(os.environ if env is None else env)
    log = record.parent / f"ray-head-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
        )
    text = _wait_ready(proc, log, timeout_s)
    head = HeadRecord(
        pid=proc.pid,
        argv=tuple(argv),
        address=_address_in(text, port),
        port=port,
        temp_dir=os.path.abspath(temp_dir) if temp_dir is not None else None,
        log=str(log),
        dashboard_url=_dashboard_in(text) if dashboard else None,
        auth_mode=full_env["RAY_AUTH_MODE"],
        started_at=time.time(),
    )
    write_record(head, record)
    return head


def _wait_ready(proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        text = _ANSI.sub("", log.read_text(errors="replace"))
        if _READY in text:
            return text
        if proc.poll() is not None:
            raise HeadError(f"`ray start` exited with {proc.returncode}; {log}:\n{text[-3000:]}")
        if time.monotonic() > deadline:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
            raise HeadError(f"the head did not start within {timeout_s}s; {log}:\n{text[-3000:]}")
        time.sleep(0.2)


def _address_in(text: str, port: int) -> str:
    """The GCS address ``ray start`` printed (``ray start --address='IP:PORT'``)."""
    m = re.search(r"--address='([^']+)'", text)
    if m:
        return m.group(1)
    import ray  # pragma: no cover - only if Ray changes its banner

    return f"{ray.util.get_node_ip_address()}:{port}"  # type: ignore[no-untyped-call]


def _dashboard_in(text: str) -> str | None:
    m = re.search(r"view the dashboard at\s*\n(?:.*?--\s*)?\s*(\S+)", text)
    if not m:
        return None
    url = m.group(1)
    return url if url.startswith("http") else f"http://{url}"


def write_record(head: HeadRecord, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(head), indent=1))
    os.replace(tmp, path)


def read_record(path: Path | None = None) -> HeadRecord | None:
    """The recorded head, or None when there is no (readable) record."""
    path = path or record_path()
    try:
        data = json.loads(path.read_text())
        return HeadRecord(**{**data, "argv": tuple(data["argv"])})
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, process group) of ``pid``, None when it does not exist."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[2])


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes whose process group is ``pgid``."""
    out = []
    for p in Path("/proc").iterdir():
        st = _stat(int(p.name)) if p.name.isdigit() else None
        if st is not None and st[1] == pgid and st[0] not in ("Z", "X"):
            out.append(int(p.name))
    return sorted(out)


def running(head: HeadRecord) -> bool:
    """The recorded leader still runs the recorded command (a recycled PID does not)."""
    if not _alive(head.pid):
        return False
    cmd = _cmdline(head.pid)
    n = len(head.argv)
    # the interpreter may prefix a script's argv (``python .../ray start ...``)
    return n > 0 and (cmd[-n:] == list(head.argv) or cmd[-(n - 1) :] == list(head.argv[1:]))


def _orphans(head: HeadRecord) -> list[int]:
    """Members of a group whose leader is gone: ours only if one names our GCS address."""
    members = group_members(head.pid)
    named = [p for p in members if any(head.address in a for a in _cmdline(p))]
    return members if named else []


#: how long ``stop_head`` waits for SIGKILLed processes to be gone (s)
_KILL_WAIT_S = 10.0


def stop_head(head: HeadRecord, *, grace_s: float = 30.0, record: Path | None = None) -> StopResult:
    """Stop the recorded head and only it (see the module docstring); forget the record."""
    leader = running(head)
    targets = group_members(head.pid) if leader else _orphans(head)
    if leader:
        os.kill(head.pid, signal.SIGTERM)  # Ray's --block handler stops its processes in order
    for pid in targets if not leader else ():
        _signal(pid, signal.SIGTERM)
    left: list[int] = []
    if leader or targets:
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and (_alive(head.pid) or group_members(head.pid)):
            time.sleep(0.2)
        left = group_members(head.pid)
        for pid in left:
            _signal(pid, signal.SIGKILL)
        # SIGKILL is delivered asynchronously: wait (bounded) until the kernel has ended them,
        # so that when this returns none of the group runs any more
        deadline = time.monotonic() + _KILL_WAIT_S
        while left and time.monotonic() < deadline and group_members(head.pid):
            time.sleep(0.05)
    path = record or record_path()
    if (current := read_record(path)) is not None and current.pid == head.pid:
        path.unlink(missing_ok=True)
    return StopResult(tuple(targets), tuple(left))


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
