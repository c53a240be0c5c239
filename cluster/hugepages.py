"""An actor's heap on 2 MiB transparent huge pages: fewer TLB misses when its core comes back cold.

On a shared core the processes that ran since the last block leave the actor's heap cold, its TLB
entries as well as its cache lines; with 4 KiB pages each page a block touches costs a page walk
on top of its cache misses, and a 2 MiB page covers 512 of them. Both allocators of a CPython
heap are covered:

- pymalloc's arenas (every object of <= 512 bytes: nearly all of the caches):
  :func:`install_arenas` swaps CPython's arena allocator for ``_hugearena`` (``_hugearena.c``),
  which carves arenas out of 2 MiB-aligned ``MADV_HUGEPAGE`` regions. Freed arenas are kept for
  reuse (returning them would split the page): a process keeps its arena peak. Arenas allocated
  before the call stay, and pymalloc fills them first, so deploy starts the worker through this
  module (:func:`worker_command`, the ``runtime_env``'s ``py_executable``), which installs the
  arenas before Ray's worker script runs.
- glibc's malloc (big dict tables, lists, buffers): ``GLIBC_TUNABLES`` with
  :data:`GLIBC_HUGETLB`, read once at process start, so deploy sets it in the actor's
  ``runtime_env`` (:func:`actor_env`).

Limits: the kernel's THP mode must be ``madvise`` or ``always`` (under ``never`` the advice is
ignored and :func:`report` shows 0 bytes on huge pages). A huge page is zeroed whole at its first
touch: that lands on heap growth, not on the steady state.
"""

from __future__ import annotations

import os
import runpy
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "AVAILABLE",
    "GLIBC_HUGETLB",
    "actor_env",
    "arena_stats",
    "install_arenas",
    "report",
    "thp_mode",
    "worker_command",
]

try:  # optional C extension (cluster/_hugearena.c), built by every install where a compiler is
    from . import _hugearena  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a build without a C compiler
    _hugearena = None

#: this build has the arena allocator (its C extension compiled)
AVAILABLE = _hugearena is not None

#: the glibc tunable that makes malloc advise huge pages for its heap (glibc >= 2.35)
GLIBC_HUGETLB = "glibc.malloc.hugetlb=1"
_THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode() -> str:
    """The kernel's THP mode (``always``, ``madvise``, ``never``), or ``unavailable``."""
    try:
        text = _THP.read_text()
    except OSError:
        return "unavailable"
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else "unavailable"


def actor_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``GLIBC_TUNABLES`` for an actor's ``runtime_env``: ``env``'s tunables (default: this
    process's) plus :data:`GLIBC_HUGETLB`, unless they already set ``glibc.malloc.hugetlb``."""
    given = (os.environ if env is None else env).get("GLIBC_TUNABLES", "")
    items = [t for t in given.split(":") if t]
    if not any(t.startswith("glibc.malloc.hugetlb=") for t in items):
        items.append(GLIBC_HUGETLB)
    return {"GLIBC_TUNABLES": ":".join(items)}


def worker_command(python: str | None = None) -> str:
    """A ``runtime_env`` ``py_executable``: ``python`` (default: this one; a cluster's hosts
    share the venv's path) running this module, which installs the arenas before Ray's worker
    script (its first argument) imports anything."""
    return f"{shlex.quote(python or sys.executable)} -m {__spec__.name if __spec__ else __name__}"


def run_worker(argv: Sequence[str]) -> None:
    """Install the arenas, then run ``argv[0]`` as ``python argv...`` would: as ``__main__``,
    with ``sys.argv`` = ``argv`` and its folder first on ``sys.path``."""
    if not argv:
        raise SystemExit("usage: python -m raydex.cluster.hugepages SCRIPT [ARGS...]")
    if install_arenas():
        # on the C module, which this file's two copies (``__main__`` now, the module imported
        # later) share: report() says the arenas were there before the script imported anything
        _hugearena.at_start = True
    script = os.path.abspath(argv[0])
    sys.argv = [script, *argv[1:]]
    sys.path[0] = os.path.dirname(script)
    runpy.run_path(script, run_name="__main__")


def install_arenas() -> bool:
    """Serve pymalloc's arenas from huge-page regions from now on (once per process; call it
    before the state is built). False: already installed, or no C extension in this build."""
    return bool(_hugearena is not None and _hugearena.install())


def arena_stats() -> dict[str, Any]:
    """The arena allocator's counters (``installed`` False without the extension)."""
    if _hugearena is None:
        return {"installed": False}
    stats: dict[str, Any] = _hugearena.stats()
    return stats


def report() -> dict[str, Any]:
    """What this process has on huge pages: the THP mode, whether the arenas are installed and
    how many are in use, whether they were installed at the process's start (``at_start``,
    :func:`run_worker`) or later, glibc's tunable, and ``huge_page_bytes`` (``AnonHugePages``
    of the whole process, from ``/proc/self/smaps_rollup``; -1 where the file is missing)."""
    stats = arena_stats()
    huge = -1
    try:
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                huge = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    return {
        "thp": thp_mode(),
        "arenas": bool(stats.get("installed")),
        "arenas_in_use": int(stats.get("arenas_in_use", 0)),
        "at_start": bool(getattr(_hugearena, "at_start", False)),
        "glibc": GLIBC_HUGETLB in os.environ.get("GLIBC_TUNABLES", "").split(":"),
        "huge_page_bytes": huge,
    }


if __name__ == "__main__":
    run_worker(sys.argv[1:])
