"""Pin every thread of this process to a CPU set and ask for a real-time scheduling policy.

``os.sched_setaffinity(0, cpus)`` changes only the calling thread, and a Ray worker runs ~24
threads (gRPC pollers, the core worker, asyncio, ours): ``pin_all_threads`` walks
``/proc/self/task`` and pins each. Threads started later usually inherit the starting thread's
mask (not always: a C library's pool may copy another), so call again after anything starts
threads. ``try_realtime(priority)`` asks for SCHED_FIFO for every thread; without CAP_SYS_NICE or
RLIMIT_RTPRIO (the normal case in containers) it logs one warning per process, leaves the policy
and returns the policy in force. A thread that vanished meanwhile is skipped.

Caller duties: pin to CPUs the process's cpuset allows (the kernel drops the others, and refuses a
set with none of them); pair SCHED_FIFO with dedicated cores (a spinning thread starves the rest).
Cost: one syscall per thread, off the hot path.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "PinReport",
    "current_policy",
    "pin_all_threads",
    "thread_ids",
    "try_realtime",
]

_log = logging.getLogger(__name__)
_TASKS = Path("/proc/self/task")
_POLICY_NAMES = {
    os.SCHED_OTHER: "SCHED_OTHER",
    os.SCHED_FIFO: "SCHED_FIFO",
    os.SCHED_RR: "SCHED_RR",
    os.SCHED_BATCH: "SCHED_BATCH",
    os.SCHED_IDLE: "SCHED_IDLE",
}
_warned_realtime = False


@dataclass(frozen=True, slots=True)
class PinReport:
    """Where this process runs: Ray node id, NUMA node, the CPUs it is pinned to, its policy."""

    node_id: str
    numa_node: int
    cpus: tuple[int, ...]
    policy: str
    threads_pinned: int


def thread_ids() -> list[int]:
    """Thread ids of this process, from ``/proc/self/task``."""
    return sorted(int(p.name) for p in _TASKS.iterdir() if p.name.isdigit())


def pin_all_threads(
    cpus: Iterable[int], *, node_id: str = "", numa_node: int = 0, policy: str | None = None
) -> PinReport:
    """Set the affinity of every thread of this process to ``cpus``; report what was done.

    ``node_id``/``numa_node`` are recorded in the report as given (the caller knows its bundle);
    ``policy`` defaults to the calling thread's current policy. The kernel drops CPUs of the set
    that the process's cpuset does not allow, so the report's ``cpus`` is the affinity actually in
    force (read back). Raises ``ValueError`` for an empty set, or when the kernel refuses the set
    outright (EINVAL: none of its CPUs is usable), which the first thread hits before any changed.
    """
    target = frozenset(cpus)
    if not target:
        raise ValueError("cannot pin to an empty CPU set")
    pinned = 0
    for tid in thread_ids():
        try:
            os.sched_setaffinity(tid, target)
        except ProcessLookupError:
            continue  # the thread exited after we listed it
        except OSError as exc:
            if exc.errno == errno.EINVAL:
                raise ValueError(f"cannot pin to CPUs {sorted(target)}: {exc}") from exc
            raise
        pinned += 1
    return PinReport(
        node_id=node_id,
        numa_node=numa_node,
        cpus=tuple(sorted(os.sched_getaffinity(0))),
        policy=policy if policy is not None else current_policy(),
        threads_pinned=pinned,
    )


def current_policy(tid: int = 0) -> str:
    """The scheduling policy of thread ``tid`` (0: the calling thread) by name."""
    policy = os.sched_getscheduler(tid) & ~getattr(os, "SCHED_RESET_ON_FORK", 0)
    return _POLICY_NAMES.get(policy, f"policy-{policy}")


def try_realtime(priority: int = 10) -> str:
    """Try SCHED_FIFO at ``priority`` for every thread; return the calling thread's policy after.

    On EPERM (no CAP_SYS_NICE / RLIMIT_RTPRIO) warn once per process and stop trying.
    """
    param = _fifo_param(priority)
    for tid in thread_ids():
        try:
            os.sched_setscheduler(tid, os.SCHED_FIFO, param)
        except ProcessLookupError:
            continue
        except PermissionError:
            _warn_realtime_refused(priority)
            break
    return current_policy()


def try_thread_realtime(priority: int = 10) -> str:
    """Try SCHED_FIFO at ``priority`` for the calling thread only; return its policy after (on
    EPERM, warned once per process as ``try_realtime`` does)."""
    param = _fifo_param(priority)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, param)
    except PermissionError:
        _warn_realtime_refused(priority)
    return current_policy()


def _fifo_param(priority: int) -> os.sched_param:
    """The SCHED_FIFO parameter for ``priority``; ValueError outside the kernel's range."""
    lo, hi = os.sched_get_priority_min(os.SCHED_FIFO), os.sched_get_priority_max(os.SCHED_FIFO)
    if not lo <= priority <= hi:
        raise ValueError(f"SCHED_FIFO priority must be in {lo}..{hi}, got {priority}")
    return os.sched_param(priority)


def _warn_realtime_refused(priority: int) -> None:
    global _warned_realtime
    if _warned_realtime:
        return
    _warned_realtime = True
    _log.warning(
        "SCHED_FIFO priority %d refused by the kernel (EPERM: needs CAP_SYS_NICE or "
        "RLIMIT_RTPRIO >= %d); threads stay on %s. Pinning is unaffected.",
        priority,
        priority,
        current_policy(),
    )


def renice_all_threads(nice: int = 0) -> int:
    """Set the nice value of every thread of this process (niceness is per thread on Linux).

    Ray starts worker processes at nice 15 (``worker_niceness``) so its own daemons win the CPU;
    for the exchange's latency-critical actors that hands the CPU to anything else on the host,
    the load generator included. Lowering niceness needs CAP_SYS_NICE (root has it); without it
    the threads keep their niceness. Returns the niceness now in force for the calling thread.
    """
    for tid in thread_ids():
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        except (PermissionError, ProcessLookupError):
            continue
    return os.getpriority(os.PRIO_PROCESS, 0)
