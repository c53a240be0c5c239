"""The CPU ledger: where the machine's CPU went during a loadtest's timed window, per committed tx.

::

    sample_cpu()  (t0: load starts)          sample_cpu()  (the last answer is in)
      /proc/stat "cpu" line: busy ticks        same
      /proc/<pid>/stat of every process:       same
      utime + stime, ppid, start time, cmd
                         └──────── build_ledger(before, after, roles, committed_txs) ────────┘
                             per role: CPU seconds, % of the machine, µs per committed tx

**Roles.** ``roles`` names the deployment's processes by pid (sequencer, snapshot holder,
committer, each replica, the load generator). A role follows its processes: an actor that Ray
restarts inside the window comes back as a new process, and every pid seen holding the role
(:meth:`WindowSampler.follow`, fed by ``roles.RoleFollower``) is charged to it, each for its own
ticks in the window (the new one, born inside it, in full). Every other process is classified,
first match wins: Ray's own processes (every process whose command line names the Ray session's
folder, and their descendants, :func:`ray_session_of`), py-spy (``profiler``, with ``--profile``), a
descendant of a named process (its role), else ``other processes``.

**It adds up.** The machine's busy time in the window (``/proc/stat``: user + nice + system + irq +
softirq + steal, over all cores) is the total; the roles, ``other processes`` and ``unattributed``
sum to it exactly. ``unattributed`` is what no live process accounts for (processes that exited
in the window, rounding, interrupt time that landed on an idle core); it can be slightly negative
when per-process and machine counters round differently, and is reported, never spread over the
roles. :class:`WindowSampler` walks ``/proc`` every second, so a process that exits in the window is
charged what it had used when last seen.

**Interrupts and steal, reported apart** (``interrupts_s``/``_pct``, ``steal_s``/``_pct``), not as
rows: without ``CONFIG_IRQ_TIME_ACCOUNTING`` an interrupt's tick is also charged to the task it
interrupted, and Linux charges part or all of a vCPU's steal to the task that was running, so rows
would count them twice. Read ``unattributed`` against them; a phase of heavy steal inflates every
role's µs per tx.

**Per tx.** Every figure is divided by the txs committed in the window (sequenced into a block,
accepted or rejected by the engine): what one more tx costs a role at this load.

Limits: one clock tick (``SC_CLK_TCK``) per process and sample, so a window of a few seconds is
needed; only this host's processes are seen (a multi-node ``--address`` run ledgers the head
only). Cost: one walk of ``/proc`` per sample.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "LEDGER_NOTE",
    "RAY_ROLES",
    "CpuSample",
    "Ledger",
    "ProcInfo",
    "Rss",
    "WindowSampler",
    "build_ledger",
    "classify_ray",
    "format_ledger",
    "machine_busy_ticks",
    "machine_ticks",
    "memory_by_role",
    "proc_info",
    "ray_session_of",
    "sample_cpu",
]

CLK_TCK: int = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE: int = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

OTHER = "other processes"
UNATTRIBUTED = "unattributed"
PROFILER = "profiler (py-spy)"
#: Ray's processes by what their command line contains (first match wins), as roles
RAY_ROLES: tuple[tuple[str, str], ...] = (
    ("gcs_server", "ray gcs"),
    ("/raylet/raylet", "ray raylet"),
    ("dashboard/agent.py", "ray dashboard + agents"),
    ("ray::DashboardAgent", "ray dashboard + agents"),
    ("ray::RuntimeEnvAgent", "ray dashboard + agents"),
    ("runtime_env/agent", "ray dashboard + agents"),
    ("dashboard/dashboard.py", "ray dashboard + agents"),
    ("log_monitor.py", "ray monitors"),
    ("autoscaler/_private/monitor.py", "ray monitors"),
    ("ray::IDLE", "ray idle workers"),
    ("default_worker.py", "ray idle workers"),
)
RAY_OTHER = "ray other"

LEDGER_NOTE = (
    "CPU (user+system, /proc) of every process over the timed window, per committed tx. The "
    "rows add up to the machine's busy time (/proc/stat); 'unattributed' is what no live "
    "process accounts for (processes that exited in the window, tick rounding, interrupts on an "
    "idle core), and 'other processes' is everything on the machine that is not the "
    "deployment. Hypervisor steal (steal_s) and irq + softirq (interrupts_s) are reported "
    "apart: part or all of each is inside the rows (a task's CPU time runs on while the host "
    "holds its vCPU; an interrupt's tick is charged to the task it interrupted unless the "
    "kernel accounts IRQ time), the rest is in 'unattributed'."
)

_SESSION = re.compile(r"/session_[0-9][^/\s\x00]*")


@dataclasses.dataclass(frozen=True, slots=True)
class ProcInfo:
    """One process as ``/proc/<pid>/stat`` and ``cmdline`` show it."""

    pid: int
    ppid: int
    comm: str
    ticks: int  # utime + stime, in clock ticks
    start: int  # start time, clock ticks after boot (tells a reused pid apart)
    cmdline: str
    rss: int = 0  # resident set size, bytes
    sys_ticks: int = 0  # stime alone (inside ``ticks``): the kernel's share


@dataclasses.dataclass(frozen=True, slots=True)
class CpuSample:
    at_ns: int  # time.monotonic_ns()
    busy: int  # machine busy ticks, all cores
    total: int  # machine ticks, idle included
    procs: Mapping[int, ProcInfo]
    steal: int = 0  # inside ``busy``: ticks the hypervisor ran something else
    interrupts: int = 0  # inside ``busy``: irq + softirq ticks


def proc_info(pid: int, proc: Path = Path("/proc")) -> ProcInfo | None:
    """``pid``'s CPU ticks and identity, or None when it is gone (or unreadable)."""
    try:
        stat = (proc / str(pid) / "stat").read_bytes().decode(errors="replace")
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    # comm is in parentheses and may hold spaces or ')': split at the last ')'
    head, _, rest = stat.rpartition(")")
    fields = rest.split()
    # fields[0] is state (field 3); ppid field 4, utime 14, stime 15, starttime 22, rss 24
    return ProcInfo(
        pid=pid,
        ppid=int(fields[1]),
        comm=head.partition("(")[2],
        ticks=int(fields[11]) + int(fields[12]),
        start=int(fields[19]),
        cmdline=raw.replace(b"\x00", b" ").decode(errors="replace").strip(),
        rss=int(fields[21]) * PAGE_SIZE,
        sys_ticks=int(fields[12]),
    )


def machine_ticks(proc: Path = Path("/proc")) -> tuple[int, int, int, int]:
    """(busy, total, steal, irq + softirq) ticks of all cores from ``/proc/stat``'s ``cpu`` line.
    Busy is user + nice + system + irq + softirq + steal (guest time is already inside user)."""
    for line in (proc / "stat").read_text().splitlines():
        if line.startswith("cpu "):
            v = [int(x) for x in line.split()[1:]]
            v += [0] * (8 - len(v))
            user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
            busy = user + nice + system + irq + softirq + steal
            return busy, busy + idle + iowait, steal, irq + softirq
    raise RuntimeError(f"{proc / 'stat'} has no 'cpu' line")


def machine_busy_ticks(proc: Path = Path("/proc")) -> tuple[int, int]:
    """(busy, total) ticks of all cores (:func:`machine_ticks`)."""
    busy, total, _, _ = machine_ticks(proc)
    return busy, total


def sample_cpu(proc: Path = Path("/proc")) -> CpuSample:
    """Every process's ticks and the machine's, read as close together as one walk allows."""
    at = time.monotonic_ns()
    busy0, total0, steal0, irq0 = machine_ticks(proc)
    procs = {}
    for entry in os.scandir(proc):
        if entry.name.isdigit():
            info = proc_info(int(entry.name), proc)
            if info is not None:
                procs[info.pid] = info
    busy1, total1, steal1, irq1 = machine_ticks(proc)
    # the midpoint of the walk: processes were read between the two machine readings
    return CpuSample(
        at, (busy0 + busy1) // 2, (total0 + total1) // 2, procs,
        (steal0 + steal1) // 2, (irq0 + irq1) // 2,
    )  # fmt: skip


@dataclasses.dataclass(slots=True)
class Rss:
    """One process's resident memory over the window (bytes): first and last sight, peak, and
    every sight (the sampler's ticks are about a second apart: ~8 bytes a second per process)."""

    start: int
    end: int
    peak: int
    seen: list[int] = dataclasses.field(default_factory=list)

    def see(self, rss: int) -> None:
        self.end = rss
        self.peak = max(self.peak, rss)
        self.seen.append(rss)

    def growth_by_third(self) -> tuple[int, int, int]:
        """Growth over each third of the sights (bytes): a flat process ends near 0 in the last
        third; bounded caches filling grow less each third; a leak keeps growing."""
        seen = self.seen or [self.start]
        n = len(seen) - 1
        at = [seen[round(n * k / 3)] for k in range(4)]
        return (at[1] - at[0], at[2] - at[1], at[3] - at[2])


class WindowSampler:
    """The window's two samples, plus what was seen in between: :meth:`tick` (every second or
    so) remembers each process's latest ticks, so one that exits inside the window is charged
    what it had used when last seen rather than falling into ``unattributed``; each process's
    resident memory at every sample (:attr:`memory`: start, end, peak), for the report's memory
    table (a soak's "RSS flat"); and :attr:`roles`, every process that held a role in the window
    (:meth:`follow`), the ``roles`` to build its ledger with. Cost: one ``/proc`` walk per tick
    (~7 ms of CPU for ~100 processes here)."""

    def __init__(self, roles: Mapping[int, str] | None = None) -> None:
        self.before: CpuSample | None = None
        self.seen: dict[int, ProcInfo] = {}
        self.memory: dict[int, Rss] = {}
        #: pid -> role of every process seen holding a role, in the order they were seen
        self.roles: dict[int, str] = dict(roles or {})

    def follow(self, roles: Mapping[int, str]) -> None:
        """The roles' processes as they are now: a pid not seen before (a restarted actor)
        joins its role, and the processes that held the role before keep it for the window."""
        self.roles.update(roles)

    def _remember(self, sample: CpuSample) -> CpuSample:
        memory = self.memory
        for pid, p in sample.procs.items():
            m = memory.get(pid)
            if m is None:
                memory[pid] = Rss(p.rss, p.rss, p.rss, [p.rss])
            else:
                m.see(p.rss)
        return sample

    def begin(self) -> None:
        self.before = self._remember(sample_cpu())

    def tick(self) -> None:
        self.seen.update(self._remember(sample_cpu()).procs)

    def end(self) -> tuple[CpuSample, CpuSample]:
        """(before, after): ``after`` holds the live processes and the last sight of the gone."""
        if self.before is None:
            raise RuntimeError("WindowSampler.end() before begin()")
        after = self._remember(sample_cpu())
        procs = {**self.seen, **after.procs}
        return self.before, dataclasses.replace(after, procs=procs)


def memory_by_role(
    memory: Mapping[int, Rss], roles: Mapping[int, str]
) -> dict[str, dict[str, Any]]:
    """Resident memory (MiB) of each role's process over the window: start, end, peak, and the
    growth end - start and per third of the window (a soak's "flat" check: bounded caches that
    fill grow less each third, a leak does not). Roles whose process was never seen are left
    out; of a role several processes held (a restart), the last one in ``roles``' order."""
    mib = 1 << 20
    out: dict[str, dict[str, Any]] = {}
    for pid, role in sorted(roles.items(), key=lambda kv: _order(kv[1])):
        m = memory.get(pid)
        if m is None:
            continue
        out[role] = {
            "start_mib": round(m.start / mib, 1),
            "end_mib": round(m.end / mib, 1),
            "peak_mib": round(m.peak / mib, 1),
            "growth_mib": round((m.end - m.start) / mib, 1),
            "growth_by_third_mib": [round(g / mib, 1) for g in m.growth_by_third()],
        }
    return out


def classify_ray(cmdline: str) -> str:
    """The ledger role of a process of the Ray session, from its command line."""
    for needle, role in RAY_ROLES:
        if needle in cmdline:
            return role
    return RAY_OTHER


def ray_session_of(procs: Mapping[int, ProcInfo], actor_pids: Iterable[int]) -> str | None:
    """The Ray session folder name (``session_<date>_<pid>``) the actors run in: read from
    their parent's (the raylet's) command line, which names the session's socket folder."""
    for pid in actor_pids:
        p = procs.get(pid)
        parent = procs.get(p.ppid) if p is not None else None
        if parent is not None and (m := _SESSION.search(parent.cmdline)):
            return m.group(0).lstrip("/")
    return None


def _nearest(pid: int, marks: Mapping[int, str], procs: Mapping[int, ProcInfo]) -> int | None:
    """The nearest ancestor of ``pid`` (itself included) that ``marks`` names, if any."""
    cur: int | None = pid
    for _ in range(64):  # a pid tree is shallow; this bounds a cycle in a torn read
        if cur is None or cur <= 1:
            return None
        if cur in marks:
            return cur
        p = procs.get(cur)
        cur = p.ppid if p is not None else None
    return None


def _role_of(
    p: ProcInfo, procs: Mapping[int, ProcInfo], marks: Mapping[int, str], session: str | None
) -> str:
    """``marks``: the named processes (their role) and the Ray session's processes ("")."""
    if marks.get(p.pid):
        return marks[p.pid]
    if session is not None and session in p.cmdline:
        return classify_ray(p.cmdline)
    if p.comm == "py-spy" or "py-spy record" in p.cmdline:
        return PROFILER
    owner = _nearest(p.pid, marks, procs)
    if owner is None:
        return OTHER
    # a Ray daemon's descendants (workers, agents) are Ray's; a named process's are its role's
    return marks[owner] or classify_ray(p.cmdline)


@dataclasses.dataclass(frozen=True, slots=True)
class Ledger:
    """CPU seconds per role over the window (the JSON form is :meth:`as_json`)."""

    window_s: float
    cores: int
    committed_txs: int
    busy_s: float  # the machine's busy CPU seconds in the window
    by_role: Mapping[str, float]  # CPU seconds; includes OTHER and UNATTRIBUTED
    pids: Mapping[str, tuple[int, ...]]
    top_other: tuple[tuple[str, float], ...]  # (command, CPU s) of the busiest other processes
    session: str | None
    #: of ``by_role``, the seconds spent in the kernel (system time: syscalls, the network stack,
    #: wake-ups); UNATTRIBUTED has none
    sys_by_role: Mapping[str, float] = dataclasses.field(default_factory=dict)
    #: hypervisor steal in the window (seconds, all cores): inside the rows, not a row
    steal_s: float = 0.0
    #: irq + softirq in the window (seconds, all cores): likewise a fact, not a row
    interrupts_s: float = 0.0

    def us_per_tx(self) -> dict[str, float]:
        """``{role: µs, ..., "total": µs}``; every role, ``other processes`` and
        ``unattributed`` included, so the roles sum to ``total`` (up to rounding)."""
        n = max(self.committed_txs, 1)
        out = {r: round(s * 1e6 / n, 1) for r, s in self.by_role.items()}
        out["total"] = round(self.busy_s * 1e6 / n, 1)
        return out

    def as_json(self) -> dict[str, Any]:
        cap = self.window_s * self.cores
        return {
            "note": LEDGER_NOTE,
            "window_s": round(self.window_s, 3),
            "cores": self.cores,
            "committed_txs": self.committed_txs,
            "committed_tps": round(self.committed_txs / self.window_s, 1) if self.window_s else 0,
            "machine_busy_s": round(self.busy_s, 3),
            "machine_busy_pct": round(100 * self.busy_s / cap, 1) if cap else 0.0,
            "steal_s": round(self.steal_s, 3),
            "steal_pct": round(100 * self.steal_s / cap, 1) if cap else 0.0,
            "interrupts_s": round(self.interrupts_s, 3),
            "interrupts_pct": round(100 * self.interrupts_s / cap, 1) if cap else 0.0,
            "by_role": {
                r: {
                    "cpu_s": round(s, 3),
                    "pct_of_machine": round(100 * s / cap, 1) if cap else 0.0,
                    "cores": round(s / self.window_s, 3) if self.window_s else 0.0,
                    "us_per_tx": self.us_per_tx()[r],
                    "system_pct": round(100 * self.sys_by_role.get(r, 0.0) / s, 1)
                    if s > 0
                    else 0.0,
                    "pids": list(self.pids.get(r, ())),
                }
                for r, s in self.by_role.items()
            },
            "top_other_processes": [
                {"command": c, "cpu_s": round(s, 3)} for c, s in self.top_other
            ],
            "ray_session": self.session,
        }


#: row order of the table and the bars: the deployment first, then Ray, then the rest
def _order(role: str) -> tuple[int, str]:
    if role == "loadgen":
        return (4, role)
    if role.startswith("ray "):
        return (5, role)
    if role == PROFILER:
        return (6, role)
    if role == OTHER:
        return (7, role)
    if role == UNATTRIBUTED:
        return (9, role)
    rank = {"sequencer": 0, "snapshot holder": 1, "committer": 2}.get(role, 3)
    return (rank, role)


def build_ledger(
    before: CpuSample,
    after: CpuSample,
    roles: Mapping[int, str],
    committed_txs: int,
    session: str | None = None,
    cores: int | None = None,
) -> Ledger:
    """Charge every process's ticks between the samples to a role (module docstring)."""
    window_s = (after.at_ns - before.at_ns) / 1e9
    marks = {pid: "" for pid, p in after.procs.items() if session and session in p.cmdline}
    marks.update(roles)
    secs: dict[str, float] = {r: 0.0 for r in sorted(set(roles.values()), key=_order)}
    pids: dict[str, list[int]] = {}
    other: dict[str, float] = {}
    sys_secs: dict[str, float] = {}
    attributed = 0
    for pid, p in after.procs.items():
        old = before.procs.get(pid)
        # a pid not seen before (or reused) started inside the window: all its ticks count
        same = old is not None and old.start == p.start
        base = old.ticks if old is not None and same else 0
        d = p.ticks - base
        if d <= 0:
            continue
        attributed += d
        role = _role_of(p, after.procs, marks, session)
        secs[role] = secs.get(role, 0.0) + d / CLK_TCK
        d_sys = p.sys_ticks - (old.sys_ticks if old is not None and same else 0)
        sys_secs[role] = sys_secs.get(role, 0.0) + max(d_sys, 0) / CLK_TCK
        pids.setdefault(role, []).append(pid)
        if role == OTHER:
            name = (p.cmdline or f"[{p.comm}]")[:80]
            other[name] = other.get(name, 0.0) + d / CLK_TCK
    busy = after.busy - before.busy
    steal = max(after.steal - before.steal, 0)
    interrupts = max(after.interrupts - before.interrupts, 0)
    secs.setdefault(OTHER, 0.0)
    secs[UNATTRIBUTED] = (busy - attributed) / CLK_TCK
    ordered = {r: secs[r] for r in sorted(secs, key=_order)}
    top = tuple(sorted(other.items(), key=lambda kv: -kv[1])[:5])
    return Ledger(
        window_s=window_s,
        cores=cores or os.cpu_count() or 1,
        committed_txs=committed_txs,
        busy_s=busy / CLK_TCK,
        steal_s=steal / CLK_TCK,
        interrupts_s=interrupts / CLK_TCK,
        by_role=ordered,
        sys_by_role=sys_secs,
        pids={r: tuple(sorted(v)) for r, v in pids.items()},
        top_other=top,
        session=session,
    )


#: machine-wide rows: no process, no kernel share of their own
_MACHINE = frozenset({UNATTRIBUTED})


def format_ledger(led: Mapping[str, Any]) -> list[str]:
    """Markdown table rows of a ledger's JSON form (``Ledger.as_json``)."""
    lines = [
        "| role | CPU s | % of machine | µs per committed tx | of it in the kernel |",
        "|---|---:|---:|---:|---:|",
    ]
    for role, row in led["by_role"].items():
        kernel = f"{row['system_pct']:.0f}%" if "system_pct" in row and role not in _MACHINE else ""
        lines.append(
            f"| {role} | {row['cpu_s']:.2f} | {row['pct_of_machine']:.1f} "
            f"| {row['us_per_tx']:,.1f} | {kernel} |"
        )
    n = max(int(led["committed_txs"]), 1)
    total_us = led["machine_busy_s"] * 1e6 / n
    lines.append(
        f"| **total (machine busy)** | {led['machine_busy_s']:.2f} | "
        f"{led['machine_busy_pct']:.1f} | **{total_us:,.1f}** | |"
    )
    if "steal_s" in led:
        lines.append(
            f"| of it hypervisor steal | {led['steal_s']:.2f} | "
            f"{led['steal_pct']:.1f} | {led['steal_s'] * 1e6 / n:,.1f} | |"
        )
    if "interrupts_s" in led:
        lines.append(
            f"| of it irq + softirq | {led['interrupts_s']:.2f} | "
            f"{led['interrupts_pct']:.1f} | {led['interrupts_s'] * 1e6 / n:,.1f} | |"
        )
    return lines
