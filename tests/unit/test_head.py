"""``raydex up``'s head: its environment, and stopping exactly the recorded process group.

Real processes stand in for a Ray head here (no Ray: a leader in its own session with children,
one of which ignores SIGTERM); a bystander group of the same shape must survive every stop. The
real head is started and stopped by tests/integration/test_journey.py.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raydex.cluster.control import head as head_module
from raydex.cluster.control.head import (
    HeadRecord,
    group_members,
    head_env,
    ray_command,
    read_record,
    running,
    start_head,
    stop_head,
)
from raydex.cluster.control.head import write_record as write

# Stands in for `ray start --block`: starts two children (one ignores SIGTERM; with "named" both
# carry the GCS address in their argv, as raylet and client server do) and, on SIGTERM, terminates
# them and exits, as Ray's --block handler does.
LEADER = """
import signal, subprocess, sys, time
address, named = sys.argv[1], sys.argv[2] == "named"
extra = [f"--gcs-address={address}"] if named else []
kids = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", *extra])]
kids.append(subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ok', flush=True);"
    " time.sleep(600)", *extra], stdout=sys.stdout))
def stop(*_):
    for k in kids:
        k.terminate()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
time.sleep(600)
"""


def _group(address: str, named: bool = False) -> tuple[subprocess.Popen[str], HeadRecord]:
    argv = (sys.executable, "-c", LEADER, address, "named" if named else "plain")
    proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ok"
    while len(group_members(proc.pid)) < 3:  # the first child may still be starting
        time.sleep(0.05)
    record = HeadRecord(
        pid=proc.pid, argv=argv, address=address, port=1, temp_dir=None, log="",
        dashboard_url=None, auth_mode="disabled", started_at=time.time(),
    )  # fmt: skip
    return proc, record


@pytest.fixture
def groups() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        for pid in group_members(proc.pid):
            os.kill(pid, signal.SIGKILL)
        proc.wait()


def test_stopping_the_head_ends_its_whole_group_and_leaves_a_bystander_running(
    groups: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    mine, record = _group("10.0.0.1:6379")
    other, _ = _group("10.0.0.2:6379")
    groups += [mine, other]
    path = tmp_path / "head.json"
    write(record, path)
    assert read_record(path) == record and running(record)
    members = group_members(mine.pid)
    done = stop_head(record, grace_s=2.0, record=path)
    assert set(done.terminated) == set(members) and len(members) == 3
    assert len(done.killed) == 1  # the child that ignores SIGTERM
    assert group_members(mine.pid) == [] and not path.exists()
    assert len(group_members(other.pid)) == 3


def test_a_recycled_pid_running_another_command_is_never_signalled(
    groups: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    other, record = _group("10.0.0.2:6379")
    groups.append(other)
    # the recorded PID now runs something else, which names no address of ours
    stale = dataclasses.replace(
        record, argv=("ray", "start", "--head", "--block"), address="10.9.9.9:1"
    )
    assert not running(stale)
    done = stop_head(stale, grace_s=1.0, record=tmp_path / "head.json")
    assert done.terminated == () and done.killed == ()
    assert len(group_members(other.pid)) == 3


def test_the_orphans_of_a_dead_leader_are_stopped_only_when_they_name_its_address(
    groups: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    plain, plain_record = _group("10.0.0.3:6379")
    named, named_record = _group("10.0.0.4:6379", named=True)
    groups += [plain, named]
    for proc in (plain, named):  # the leaders die without stopping their children
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    left = group_members(plain.pid)
    assert len(left) == 2 and not running(plain_record) and not running(named_record)
    assert stop_head(plain_record, grace_s=1.0, record=tmp_path / "x.json").terminated == ()
    assert group_members(plain.pid) == left  # not ours: untouched
    orphans = group_members(named.pid)
    done = stop_head(named_record, grace_s=2.0, record=tmp_path / "x.json")
    assert set(done.terminated) == set(orphans) and len(orphans) == 2
    assert len(done.killed) == 1 and group_members(named.pid) == []


def test_the_head_environment_enables_profiling_and_passes_prometheus_and_grafana_through(
    tmp_path: Path,
) -> None:
    token = tmp_path / "token"
    base = {
        "RAY_PROMETHEUS_HOST": "http://127.0.0.1:9090",
        "RAY_GRAFANA_HOST": "http://127.0.0.1:3000",
        "RAY_GRAFANA_IFRAME_HOST": "http://grafana.example:3000",
        "RAY_AUTH_TOKEN_PATH": str(token),
    }
    env = head_env(base)
    assert env["RAY_DASHBOARD_ENABLE_PROFILING"] == "1"
    assert {k: env[k] for k in base} == base
    # the dashboard agent finds this environment's py-spy, as the profiling buttons need
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert shutil.which("py-spy", path=env["PATH"]) is not None
    assert env["RAY_AUTH_MODE"] == "disabled"  # no token: what `ray start` itself would do
    # no node drain on SIGTERM: a head's raylet never finishes one, so a stop took 30 s + SIGKILL
    assert env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] == "0"
    token.write_text("x" * 64)
    assert head_env(base)["RAY_AUTH_MODE"] == "token"
    explicit = {
        **base,
        "RAY_DASHBOARD_ENABLE_PROFILING": "0",
        "RAY_AUTH_MODE": "disabled",
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "30",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin"]),
    }
    assert head_env(explicit) == explicit


def test_ray_runs_from_this_interpreters_environment_not_from_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    cmd = ray_command()
    assert Path(cmd[0]).parent == Path(sys.executable).parent or cmd[:2] == [sys.executable, "-m"]
    done = subprocess.run([*cmd, "--version"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "ray" in done.stdout.lower()


# Stands in for `ray start --head --block`'s banner, written in two parts as Ray's own can reach its
# log: "Ray runtime started" first, the GCS address and the dashboard URL a moment later.
BANNER = """
import sys, time
print("Ray runtime started.", flush=True)
time.sleep(1.0)
print("  ray start --address='10.1.2.3:6390'", flush=True)
print("To monitor and debug Ray, view the dashboard at ", flush=True)
print("  127.0.0.1:28265", flush=True)
print("--block")
print("  This command will now block forever until terminated by a signal.", flush=True)
time.sleep(600)
"""


def test_start_head_reads_the_whole_banner_not_just_its_first_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(head_module, "ray_command", lambda: [sys.executable, "-c", BANNER])
    path = tmp_path / "head.json"
    head = start_head(port=6390, dashboard_port=28265, env={"PATH": "/usr/bin"}, record=path)
    try:
        assert head.address == "10.1.2.3:6390"
        assert head.dashboard_url == "http://127.0.0.1:28265"
        assert read_record(path) == head
    finally:
        os.killpg(head.pid, signal.SIGKILL)
        os.waitpid(head.pid, 0)
