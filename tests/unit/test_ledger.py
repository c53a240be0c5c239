"""The CPU ledger reads real /proc: processes spawned here burn a known amount of CPU (measured by
themselves) and the ledger must charge it to their role, a descendant's to its ancestor's role, a
process born inside the window in full; and the rows must add up to the machine's busy time
exactly. The Ray classification is checked on command lines as Ray 2.60 writes them."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from raydex.observability.loadtest.ledger import (
    CLK_TCK,
    OTHER,
    UNATTRIBUTED,
    CpuSample,
    ProcInfo,
    Rss,
    WindowSampler,
    build_ledger,
    classify_ray,
    format_ledger,
    machine_busy_ticks,
    machine_ticks,
    memory_by_role,
    proc_info,
    ray_session_of,
    sample_cpu,
)

TICK = 1.0 / CLK_TCK

#: A child that says "ready", waits for "go", burns CPU until its own process_time has grown by
#: the given seconds (optionally in a grandchild doing the same), prints what it burned, and
#: waits for EOF.
BURNER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    want, nested = float(sys.argv[1]), sys.argv[2] == "nested"
    print("ready", flush=True)
    sys.stdin.readline()
    if nested:
        child = subprocess.run([sys.executable, "-c",
                                "import time\\nt=time.process_time()\\n"
                                f"while time.process_time()-t<{want}: pass\\n"
                                "print(time.process_time()-t)"],
                               capture_output=True, text=True, check=True)
        print(child.stdout.strip(), flush=True)
    else:
        t = time.process_time()
        while time.process_time() - t < want:
            pass
        print(time.process_time() - t, flush=True)
    sys.stdin.read()
    """
)


@contextmanager
def burner(seconds: float, nested: bool = False) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", BURNER, str(seconds), "nested" if nested else "flat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"  # its start-up is over before any sample
    try:
        yield proc
    finally:
        if proc.stdin:
            proc.stdin.close()
        proc.wait(timeout=60)


def burn(proc: subprocess.Popen[str]) -> float:
    """Tell the burner to go; the CPU seconds it says it burned."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    return float(proc.stdout.readline())


def test_a_process_reads_its_own_ticks_and_identity() -> None:
    me = proc_info(os.getpid())
    assert me is not None
    assert me.pid == os.getpid() and me.ppid == os.getppid()
    assert "python" in me.comm or "pytest" in me.comm
    assert me.ticks >= 0 and me.start > 0
    assert proc_info(2**22 + 12345) is None  # no such pid: None, not an error


def test_the_machine_counters_only_grow_and_busy_is_part_of_total() -> None:
    b0, t0 = machine_busy_ticks()
    with burner(0.2) as p:
        burn(p)
    b1, t1 = machine_busy_ticks()
    assert 0 <= b0 <= t0 and 0 <= b1 <= t1
    assert b1 - b0 >= 0.2 * CLK_TCK - 2  # at least what the burner used (whole ticks)
    assert t1 >= t0


def test_a_role_is_charged_what_its_process_burned_in_the_window() -> None:
    with burner(0.4) as p:
        before = sample_cpu()
        burned = burn(p)
        after = sample_cpu()
        led = build_ledger(before, after, {p.pid: "worker"}, committed_txs=1000)
    got = led.by_role["worker"]
    # per-process ticks round down at both ends: within two ticks of what it measured itself
    assert burned - 2 * TICK <= got <= burned + 2 * TICK
    assert led.us_per_tx()["worker"] == pytest.approx(got * 1e6 / 1000, abs=0.1)


def test_the_rows_add_up_to_the_machine_busy_time() -> None:
    with burner(0.2) as p:
        before = sample_cpu()
        burn(p)
        after = sample_cpu()
    led = build_ledger(before, after, {p.pid: "worker", os.getpid(): "loadgen"}, 500)
    assert sum(led.by_role.values()) == pytest.approx(led.busy_s, abs=1e-9)
    per = led.us_per_tx()
    parts = sum(v for k, v in per.items() if k != "total")
    assert parts == pytest.approx(per["total"], abs=0.1 * len(per))
    assert UNATTRIBUTED in led.by_role and OTHER in led.by_role
    assert led.busy_s == (after.busy - before.busy) / CLK_TCK


#: A parent whose child (it inherits the pipes) burns 0.3 s of CPU, prints it and waits for EOF.
PARENT = textwrap.dedent(
    """
    import subprocess, sys
    code = ("import sys, time\\nsys.stdin.readline()\\nt = time.process_time()\\n"
            "while time.process_time() - t < 0.3: pass\\n"
            "print(time.process_time() - t, flush=True)\\nsys.stdin.read()")
    subprocess.run([sys.executable, "-c", code])
    """
)


def test_a_live_descendant_is_charged_to_its_ancestors_role() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        before = sample_cpu()
        burned = burn(parent)  # the child reads "go" from the shared stdin
        after = sample_cpu()
        led = build_ledger(before, after, {parent.pid: "parent role"}, 1)
        kids = [q.pid for q in after.procs.values() if q.ppid == parent.pid]
    finally:
        assert parent.stdin is not None
        parent.stdin.close()
        parent.wait(timeout=60)
    assert kids and kids[0] in led.pids["parent role"]
    assert led.by_role["parent role"] >= burned - 2 * TICK


def test_cpu_of_a_process_that_exited_in_the_window_is_reported_unattributed() -> None:
    with burner(0.3, nested=True) as p:
        before = sample_cpu()
        burned = burn(p)  # a grandchild burned it and exited: no live process holds the ticks
        after = sample_cpu()
    led = build_ledger(before, after, {p.pid: "worker"}, 1)
    assert led.by_role["worker"] < burned / 2
    assert led.by_role[UNATTRIBUTED] >= burned - 5 * TICK


def test_a_process_born_inside_the_window_is_counted_in_full() -> None:
    before = sample_cpu()
    with burner(0.3) as p:
        burned = burn(p)
        after = sample_cpu()
        assert p.pid not in before.procs
        led = build_ledger(before, after, {p.pid: "newcomer"}, 1)
    # all its ticks since birth: what it burned plus its interpreter's start-up
    assert led.by_role["newcomer"] >= burned - 2 * TICK


def test_a_reused_pid_is_not_charged_its_predecessors_ticks() -> None:
    old = ProcInfo(4242, 1, "old", ticks=900, start=100, cmdline="old")
    new = ProcInfo(4242, 1, "new", ticks=30, start=5000, cmdline="new")
    before = CpuSample(0, 1000, 4000, {4242: old})
    after = CpuSample(10**9, 1100, 4200, {4242: new})
    led = build_ledger(before, after, {4242: "x"}, 10)
    assert led.by_role["x"] == 30 / CLK_TCK
    assert led.by_role[UNATTRIBUTED] == 70 / CLK_TCK


def test_steal_and_interrupt_time_are_reported_apart_and_the_rows_add_up() -> None:
    p = ProcInfo(77, 1, "seq", ticks=500, start=100, cmdline="seq")
    before = CpuSample(0, 10_000, 40_000, {77: p}, steal=1_000, interrupts=300)
    later = dataclasses.replace(p, ticks=900)
    # 1,000 busy ticks: 400 the process's, 600 no live process accounts for; 250 were stolen by
    # the hypervisor and 50 were irq + softirq (each in the rows or in the remainder: facts, not
    # rows, since a kernel without IRQ time accounting also charges an interrupt's tick to the
    # task it interrupted)
    after = CpuSample(10**9, 11_000, 42_000, {77: later}, steal=1_250, interrupts=350)
    led = build_ledger(before, after, {77: "sequencer"}, 10)
    assert set(led.by_role) == {"sequencer", OTHER, UNATTRIBUTED}
    assert led.by_role[UNATTRIBUTED] == 600 / CLK_TCK
    assert abs(sum(led.by_role.values()) - 1_000 / CLK_TCK) < 1e-9
    assert (led.steal_s, led.interrupts_s) == (250 / CLK_TCK, 50 / CLK_TCK)
    assert list(led.by_role)[-1] == UNATTRIBUTED
    js = led.as_json()
    assert js["steal_s"] == round(250 / CLK_TCK, 3) and js["steal_pct"] > 0
    assert js["interrupts_s"] == round(50 / CLK_TCK, 3) and js["interrupts_pct"] > 0
    table = "\n".join(format_ledger(js))
    assert f"| of it hypervisor steal | {250 / CLK_TCK:.2f} |" in table
    assert f"| of it irq + softirq | {50 / CLK_TCK:.2f} |" in table


def test_machine_ticks_read_steal_and_interrupts_from_proc_stat(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text(
        "cpu  100 5 40 1000 7 3 2 11 0 0\ncpu0 50 2 20 500 3 1 1 5 0 0\n"
    )
    busy, total, steal, irq = machine_ticks(tmp_path)
    assert (busy, total, steal, irq) == (100 + 5 + 40 + 3 + 2 + 11, 161 + 1000 + 7, 11, 5)


SESSION = "session_2026-12-03_06-03-26_495985_10476"
VENV = "/v/lib/python3.11/site-packages/ray"


def _procs() -> dict[int, ProcInfo]:
    tmp = f"ray-temp/{SESSION}"  # command-line text only: nothing on disk is read
    rows = [
        (100, 1, "python", "python driver.py"),
        (101, 100, "gcs_server", f"{VENV}/core/src/ray/gcs/gcs_server --log_dir={tmp}/logs"),
        (102, 100, "raylet", f"{VENV}/core/src/ray/raylet/raylet --socket={tmp}/sockets/raylet"),
        (103, 100, "python", f"python {VENV}/dashboard/dashboard.py --session-dir={tmp}"),
        (104, 100, "python", f"python -u {VENV}/_private/log_monitor.py --session-dir={tmp}"),
        (105, 102, "ray::DashboardAg", "ray::DashboardAgent"),
        (106, 102, "ray::IDLE", "ray::IDLE"),
        (107, 102, "ray::Sequencer", "ray::SequencerActor.status"),
        (108, 102, "ray::Replica", "ray::ReplicaActor"),
        (109, 100, "py-spy", "py-spy record --pid 107"),
        (110, 1, "pip", "python -m pip install"),
        (111, 107, "python", "python -c helper"),
    ]  # fmt: skip
    return {pid: ProcInfo(pid, pp, comm, 0, 1, cmd) for pid, pp, comm, cmd in rows}


def test_ray_processes_are_found_through_the_actors_raylet_and_classified() -> None:
    procs = _procs()
    assert ray_session_of(procs, [107]) == SESSION
    assert ray_session_of(procs, [110]) is None
    assert classify_ray(procs[101].cmdline) == "ray gcs"
    assert classify_ray(procs[102].cmdline) == "ray raylet"
    assert classify_ray(procs[103].cmdline) == "ray dashboard + agents"
    assert classify_ray(procs[104].cmdline) == "ray monitors"
    assert classify_ray("ray::IDLE") == "ray idle workers"


def test_every_process_gets_the_role_its_place_in_the_tree_gives_it() -> None:
    procs = _procs()
    before = CpuSample(0, 0, 0, procs)
    later = {p: ProcInfo(p, i.ppid, i.comm, 10, 1, i.cmdline) for p, i in procs.items()}
    after = CpuSample(10**9, 12 * 10, 800, later)
    roles = {100: "loadgen", 107: "sequencer", 108: "replica main-0"}
    led = build_ledger(before, after, roles, 100, session=SESSION)
    tick = 10 / CLK_TCK
    assert led.by_role["loadgen"] == tick  # the driver only: its Ray children are Ray's
    assert led.by_role["sequencer"] == 2 * tick  # with its helper child
    assert led.by_role["replica main-0"] == tick
    assert led.by_role["ray gcs"] == led.by_role["ray raylet"] == tick
    assert led.by_role["ray dashboard + agents"] == 2 * tick
    assert led.by_role["ray monitors"] == led.by_role["ray idle workers"] == tick
    assert led.by_role["profiler (py-spy)"] == tick
    assert led.by_role[OTHER] == tick and led.top_other[0][0] == "python -m pip install"
    assert led.by_role[UNATTRIBUTED] == 0
    assert list(led.by_role)[:3] == ["sequencer", "replica main-0", "loadgen"]
    table = "\n".join(format_ledger(led.as_json()))
    assert "| sequencer |" in table and "**total (machine busy)**" in table
    assert led.us_per_tx()["total"] == pytest.approx(120 / CLK_TCK * 1e6 / 100)


def test_the_window_sampler_keeps_the_cpu_of_processes_that_exit_inside_the_window() -> None:
    sampler = WindowSampler()
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        sampler.begin()
        burned = burn(parent)
        sampler.tick()  # the child is alive (waiting for EOF) and has burned
    finally:
        assert parent.stdin is not None
        parent.stdin.close()
        parent.wait(timeout=60)
    before, after = sampler.end()
    assert parent.pid in after.procs  # gone, but remembered
    led = build_ledger(before, after, {parent.pid: "parent role"}, 1)
    assert led.by_role["parent role"] >= burned - 2 * TICK


def test_a_role_is_charged_every_process_that_held_it_when_one_is_killed_and_replaced() -> None:
    """A sequencer killed inside the window and started again (a new pid, as Ray's restart
    gives it): the role keeps the first process's CPU until its last sample and gets all of the
    new one's; followed from the start pid only, the new process's CPU would be lost."""
    first = subprocess.Popen(
        [sys.executable, "-c", BURNER, "0.3", "flat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert first.stdout is not None and first.stdout.readline() == "ready\n"
    sampler = WindowSampler({first.pid: "sequencer"})
    sampler.begin()
    burned_first = burn(first)
    sampler.tick()  # its last sight
    first.kill()
    first.wait(timeout=60)
    with burner(0.3) as second:  # the restarted one, born inside the window
        sampler.follow({second.pid: "sequencer"})
        burned_second = burn(second)
        before, after = sampler.end()
    led = build_ledger(before, after, sampler.roles, 1)
    assert set(led.pids["sequencer"]) == {first.pid, second.pid}
    assert led.by_role["sequencer"] >= burned_first + burned_second - 4 * TICK
    start_only = build_ledger(before, after, {first.pid: "sequencer"}, 1)
    assert start_only.by_role["sequencer"] < burned_first + burned_second - 4 * TICK
    # its memory row is the process holding the role at the end
    assert memory_by_role(sampler.memory, sampler.roles)["sequencer"]["end_mib"] == round(
        sampler.memory[second.pid].end / (1 << 20), 1
    )


#: A child that grows its heap by 64 MiB when told, then frees it when told again.
GROWER = textwrap.dedent(
    """
    import sys
    print("ready", flush=True)
    sys.stdin.readline()
    blob = bytearray(64 << 20)  # zero-filled: every page touched
    print("grown", flush=True)
    sys.stdin.readline()
    del blob
    print("freed", flush=True)
    sys.stdin.read()
    """
)


def test_the_window_sampler_tracks_each_processs_resident_memory_start_end_and_peak() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", GROWER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        sampler = WindowSampler()
        sampler.begin()
        child.stdin.write("grow\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "grown"
        sampler.tick()
        child.stdin.write("free\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "freed"
        sampler.end()
    finally:
        child.stdin.close()
        child.wait(timeout=60)
    mem = memory_by_role(sampler.memory, {child.pid: "grower", 2**22 + 7: "never seen"})
    assert list(mem) == ["grower"]  # a role whose process was never seen is left out
    m = mem["grower"]
    assert m["peak_mib"] >= m["start_mib"] + 60  # the 64 MiB were resident at the tick
    assert m["end_mib"] < m["peak_mib"] - 60  # and returned to the OS when freed
    assert m["growth_mib"] == pytest.approx(m["end_mib"] - m["start_mib"], abs=0.2)
    # three sights (begin, the tick, end): up by the 64 MiB in the first third(s), down after
    thirds = m["growth_by_third_mib"]
    assert len(thirds) == 3 and sum(thirds) == pytest.approx(m["growth_mib"], abs=0.3)
    assert max(thirds) >= 60 and min(thirds) <= -60


def test_growth_by_third_tells_a_filling_cache_from_a_leak() -> None:
    mib = 1 << 20
    filling = Rss(100 * mib, 100 * mib, 100 * mib, [100 * mib])
    leaking = Rss(100 * mib, 100 * mib, 100 * mib, [100 * mib])
    for t in range(1, 91):
        filling.see(100 * mib + min(t, 40) * mib)  # fills for 40 s, then flat
        leaking.see(100 * mib + t * mib)
    assert filling.growth_by_third() == (30 * mib, 10 * mib, 0)
    assert leaking.growth_by_third() == (30 * mib, 30 * mib, 30 * mib)
    lone = Rss(5, 5, 5)  # never seen again: no growth
    assert lone.growth_by_third() == (0, 0, 0)


def test_the_ledger_splits_each_roles_cpu_into_user_and_kernel_time() -> None:
    """A process busy in syscalls is charged mostly system time; one computing in Python, user
    time: the ``system_pct`` column tells per-message kernel work from Python work."""
    code = textwrap.dedent(
        """
        import os, sys, time
        print("ready", flush=True)
        sys.stdin.readline()
        t = time.process_time()
        fd, buf = os.open("/dev/zero", os.O_RDONLY), bytearray(1 << 20)
        while time.process_time() - t < 0.5:
            if sys.argv[1] == "kernel":  # the kernel zeroes 1 MiB into our buffer
                os.readv(fd, [buf])
            else:
                sum(range(20000))
        print("done", flush=True)
        sys.stdin.read()
        """
    )
    kids = {
        kind: subprocess.Popen(
            [sys.executable, "-c", code, kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for kind in ("kernel", "user")
    }
    try:
        for p in kids.values():
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        before = sample_cpu()
        for p in kids.values():
            assert p.stdin is not None and p.stdout is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in kids.values():
            assert p.stdout is not None and p.stdout.readline().strip() == "done"
        after = sample_cpu()
    finally:
        for p in kids.values():
            assert p.stdin is not None
            p.stdin.close()
            p.wait(timeout=60)
    led = build_ledger(before, after, {p.pid: k for k, p in kids.items()}, 1).as_json()
    kernel, user = led["by_role"]["kernel"], led["by_role"]["user"]
    assert kernel["cpu_s"] >= 0.4 and user["cpu_s"] >= 0.4
    assert kernel["system_pct"] > 50 > user["system_pct"]
    assert "of it in the kernel" in format_ledger(led)[0]
