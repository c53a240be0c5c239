"""Pinning every thread of the process, and asking the kernel for SCHED_FIFO.

Affinity tests run in this process and restore every thread's mask afterwards. Scheduling-policy
tests run in a child process: a SCHED_FIFO pytest would be a hazard on a shared machine, and the
refusal path needs a process without CAP_SYS_NICE (the child drops root with ``setuid``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from raydex.cluster.pinning import (
    PinReport,
    current_policy,
    pin_all_threads,
    thread_ids,
    try_realtime,
)


@pytest.fixture
def extra_threads() -> Iterator[list[threading.Thread]]:
    """Three idle threads, so the process has more threads than the one that pins."""
    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    yield threads
    stop.set()
    for t in threads:
        t.join()


@pytest.fixture
def restore_affinity() -> Iterator[None]:
    before = {}
    for tid in thread_ids():  # a thread may end between listing and asking
        with contextlib.suppress(ProcessLookupError):
            before[tid] = os.sched_getaffinity(tid)
    yield
    for tid, mask in before.items():
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(tid, mask)


@pytest.mark.usefixtures("restore_affinity")
def test_every_thread_of_the_process_is_pinned_not_only_the_caller(
    extra_threads: list[threading.Thread],
) -> None:
    target = {min(os.sched_getaffinity(0))}
    report = pin_all_threads(target, node_id="node-x", numa_node=0)
    tids = thread_ids()
    assert {t.native_id for t in extra_threads} <= set(tids)
    assert all(os.sched_getaffinity(tid) == target for tid in tids)
    assert report == PinReport("node-x", 0, tuple(target), current_policy(), len(tids))


@pytest.mark.usefixtures("restore_affinity")
def test_a_thread_started_after_pinning_inherits_the_pinned_set() -> None:
    target = {max(os.sched_getaffinity(0))}
    pin_all_threads(target)
    seen: list[set[int]] = []
    t = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
    t.start()
    t.join()
    assert seen == [target]


def test_pinning_to_no_cpus_is_refused() -> None:
    with pytest.raises(ValueError, match="empty CPU set"):
        pin_all_threads([])


@pytest.mark.usefixtures("restore_affinity")
def test_pinning_to_cpus_outside_the_allowed_set_is_refused_before_any_change() -> None:
    before = os.sched_getaffinity(0)
    with pytest.raises(ValueError, match="cannot pin"):
        pin_all_threads([4095])
    assert os.sched_getaffinity(0) == before


_CHILD = textwrap.dedent(
    """
    import json, logging, os, threading
    from raydex.cluster.pinning import current_policy, thread_ids, try_realtime

    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    logging.getLogger("raydex.cluster.pinning").addHandler(Keep())
    stop = threading.Event()
    for _ in range(2):
        threading.Thread(target=stop.wait, daemon=True).start()
    if DROP and os.getuid() == 0:
        os.setgid(65534)
        os.setuid(65534)  # leaves root: every capability, CAP_SYS_NICE included, is dropped
    first = try_realtime(5)
    second = try_realtime(5)
    print(json.dumps({
        "uid": os.getuid(),
        "returned": [first, second],
        "threads": [current_policy(t) for t in thread_ids()],
        "warnings": records,
    }))
    stop.set()
    """
)


def run_child(drop_privileges: bool) -> dict[str, Any]:
    code = _CHILD.replace("DROP", str(drop_privileges))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def test_refused_realtime_warns_once_and_carries_on_with_the_policy_in_force() -> None:
    result = run_child(drop_privileges=True)
    if result["uid"] == 0:
        pytest.skip("could not leave root")
    assert result["returned"] == ["SCHED_OTHER", "SCHED_OTHER"]
    assert set(result["threads"]) == {"SCHED_OTHER"}
    warnings = result["warnings"]
    assert isinstance(warnings, list) and len(warnings) == 1
    assert "SCHED_FIFO priority 5 refused" in warnings[0] and "CAP_SYS_NICE" in warnings[0]


def test_granted_realtime_puts_every_thread_on_sched_fifo() -> None:
    result = run_child(drop_privileges=False)
    if result["returned"] == ["SCHED_OTHER", "SCHED_OTHER"]:
        pytest.skip("this process may not use SCHED_FIFO (no CAP_SYS_NICE / RLIMIT_RTPRIO)")
    assert result["returned"] == ["SCHED_FIFO", "SCHED_FIFO"]
    assert set(result["threads"]) == {"SCHED_FIFO"}
    assert result["warnings"] == []


_ONE_THREAD = textwrap.dedent(
    """
    import json, os, threading
    from raydex.cluster.pinning import current_policy, thread_ids, try_thread_realtime

    if DROP and os.getuid() == 0:
        os.setgid(65534)
        os.setuid(65534)
    out = {}
    def journal():  # as the WAL's journal thread asks for it
        out["returned"] = try_thread_realtime(5)
        out["tid"] = threading.get_native_id()
    t = threading.Thread(target=journal)
    t.start()
    t.join()
    out["main"] = current_policy()
    print(json.dumps(out))
    """
)


@pytest.mark.parametrize("drop_privileges", [False, True])
def test_thread_realtime_changes_the_calling_thread_only(drop_privileges: bool) -> None:
    code = _ONE_THREAD.replace("DROP", str(drop_privileges))
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True, timeout=60).stdout)  # fmt: skip
    assert out["main"] == "SCHED_OTHER"  # the process's other threads keep their policy
    if drop_privileges or run_child(drop_privileges=False)["returned"][0] != "SCHED_FIFO":
        assert out["returned"] == "SCHED_OTHER"  # refused: carries on (warned, as try_realtime)
    else:
        assert out["returned"] == "SCHED_FIFO"


def test_an_out_of_range_realtime_priority_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match=r"SCHED_FIFO priority must be in 1\.\.99"):
        try_realtime(0)


def test_renice_sets_every_thread_of_the_process() -> None:
    import os
    import threading

    from raydex.cluster.pinning import renice_all_threads, thread_ids

    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    before = {tid: os.getpriority(os.PRIO_PROCESS, tid) for tid in thread_ids()}
    try:
        assert renice_all_threads(5) == 5
        assert {os.getpriority(os.PRIO_PROCESS, tid) for tid in thread_ids()} == {5}
    finally:
        for tid, nice in before.items():
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        stop.set()
        t.join()
