"""The heap on huge pages (``raydex.cluster.hugepages``, ``cluster/_hugearena.c``).

Installing the arena allocator changes a process for good, so every install runs in a child
Python (``subprocess``), never in pytest's own process. The child reports what it saw as one JSON
line. Whether the kernel backs the advised regions with huge pages depends on its THP mode: the
tests read it and assert what that mode promises.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from raydex.actors.runtime import ActorRuntime
from raydex.cluster import hugepages
from raydex.cluster.bundle import BundlePlacement

THP_ON = hugepages.thp_mode() in ("always", "madvise")

CHILD = textwrap.dedent(
    """
    import gc, json
    from raydex.cluster import hugepages

    def vm_flags(spans):
        # VmFlags of the mappings inside the regions ("hg": advised for huge pages)
        flags, start = [], None
        for line in open("/proc/self/smaps"):
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start = int(head.split("-")[0], 16)
            elif head == "VmFlags:" and any(a <= start < a + n for a, n in spans):
                flags.append(line.split()[1:])
        return flags

    before = hugepages.arena_stats()
    first, again = hugepages.install_arenas(), hugepages.install_arenas()
    rows = [(i, i * 7, str(i)) for i in range(400_000)]
    total = sum(a + b + len(c) for a, b, c in rows)
    grown = hugepages.arena_stats()
    report = hugepages.report()
    del rows
    gc.collect()
    freed = hugepages.arena_stats()
    rows = [(i, -i) for i in range(200_000)]
    reused = hugepages.arena_stats()
    print(json.dumps({
        "before": before, "first": first, "again": again, "total": total,
        "grown": grown, "freed": freed, "reused": reused, "report": report,
        "check": sum(a + b for a, b in rows), "flags": vm_flags(grown.get("spans", [])),
    }))
    """
)


def _child(code: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
        check=True,
    )  # fmt: skip
    return json.loads(out.stdout.splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.skipif(not hugepages.AVAILABLE, reason="built without the C extension")
def test_arenas_come_from_advised_regions_and_freed_ones_are_reused() -> None:
    r = _child(CHILD)
    assert not r["before"]["installed"]
    assert (r["first"], r["again"]) == (True, False)  # once per process
    assert r["total"] == sum(i + i * 7 + len(str(i)) for i in range(400_000))  # objects intact
    grown = r["grown"]
    assert grown["installed"] and grown["arena_size"] > 0 and grown["fallbacks"] == 0
    assert grown["arenas_in_use"] * grown["arena_size"] >= 10 << 20  # the rows' ~40 MiB
    assert grown["advised"] and r["flags"] and all("hg" in f for f in r["flags"])
    # freed arenas are kept for reuse, then reused before any new region
    freed, reused = r["freed"], r["reused"]
    assert freed["arenas_free"] > 0 and freed["arenas_in_use"] < grown["arenas_in_use"]
    assert reused["arenas_free"] < freed["arenas_free"]
    assert reused["regions"] == grown["regions"]
    assert r["check"] == 0
    report = r["report"]
    assert report["arenas"] and report["arenas_in_use"] == grown["arenas_in_use"]
    assert not report["at_start"]  # installed by the running program, not at its start
    if THP_ON:
        assert report["huge_page_bytes"] >= 2 << 20
    assert not report["glibc"]  # the child's environment had no GLIBC_TUNABLES


def test_glibc_reads_the_tunable_set_before_the_process_starts() -> None:
    env = {**hugepages.actor_env({}), "PATH": ""}
    code = "import json; from raydex.cluster.hugepages import report; print(json.dumps(report()))"
    report = _child(code, env)
    assert report["glibc"] and report["thp"] == hugepages.thp_mode()
    assert not report["arenas"]  # nothing installed them in this child


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, "glibc.malloc.hugetlb=1"),
        ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"},
         "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"),
        ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, "glibc.malloc.hugetlb=0"),
    ],
)  # fmt: skip
def test_the_actor_env_adds_the_tunable_and_keeps_the_operators_own(
    given: dict[str, str], expected: str
) -> None:
    assert hugepages.actor_env(given) == {"GLIBC_TUNABLES": expected}


def test_the_thp_mode_is_one_the_kernel_names() -> None:
    assert hugepages.thp_mode() in ("always", "madvise", "never", "unavailable")


@pytest.mark.skipif(not hugepages.AVAILABLE, reason="built without the C extension")
def test_a_worker_started_through_the_module_runs_its_script_with_the_arenas_already_there(
    tmp_path: Path,
) -> None:
    """What deploy's ``py_executable`` does to Ray's worker script: install, then run it as
    ``python script args`` would."""
    script = tmp_path / "worker.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, sys
            from raydex.cluster import hugepages
            rows = [(i, str(i)) for i in range(100_000)]
            print(json.dumps({"name": __name__, "argv": sys.argv, "path0": sys.path[0],
                              "report": hugepages.report(), "n": len(rows)}))
            """
        )
    )
    command = [*shlex.split(hugepages.worker_command()), str(script), "--flag", "x y"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    r = json.loads(out.stdout.splitlines()[-1])
    assert (r["name"], r["argv"], r["path0"]) == ("__main__", [str(script), "--flag", "x y"],
                                                  str(tmp_path))  # fmt: skip
    assert r["report"]["arenas"] and r["report"]["at_start"] and r["report"]["arenas_in_use"] > 0
    assert r["n"] == 100_000


def test_the_worker_module_without_a_script_says_how_to_use_it() -> None:
    command = shlex.split(hugepages.worker_command())
    out = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 1 and "usage: python -m raydex.cluster.hugepages" in out.stderr


def test_the_actor_line_says_which_pages_its_heap_is_on() -> None:
    """``pages=`` in the actor's line and ``raydex_placement_info``: from the plan before the
    boot, from what the process got after it (no install here: the report is set by hand)."""
    bundle = BundlePlacement("replica", "g", 0, "h", 0, (0,), 1.0, False, True, False, True)
    runtime = ActorRuntime(bundle)
    assert runtime.pages() == "2M(planned)"
    got = {"arenas": True, "thp": "madvise", "at_start": True}
    runtime.placement = {"huge_pages": got}
    assert runtime.pages() == "2M" and " pages=2M" in runtime.where()
    runtime.placement = {"huge_pages": {**got, "at_start": False}}
    assert runtime.pages() == "2M(late)"
    runtime.placement = {"huge_pages": {**got, "thp": "never"}}
    assert runtime.pages() == "4k"
    assert ActorRuntime(dataclasses.replace(bundle, huge_pages=False)).pages() == "4k"
