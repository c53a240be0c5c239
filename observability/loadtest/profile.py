"""``raydex loadtest --profile``: one py-spy sampling profile per role over the timed window.

::

    t0 ─► py-spy record --pid <role's pid> --duration <seconds> --format speedscope --nonblocking
          (one per role: sequencer, snapshot holder, committer, each replica, the load generator)
       ─► <out>/profile-<role>.speedscope.json    (open in https://www.speedscope.app)

py-spy is an optional dependency (the ``profile`` extra); ``run.find_py_spy`` refuses
``--profile`` up front with the install command when it is missing. ``--nonblocking`` samples
without pausing the target (a sample may then be torn, never the target slowed); py-spy's own CPU
is a role of its own in the CPU ledger (``profiler (py-spy)``), so the ledger of a profiled run
shows what profiling cost. A profile that fails (no ptrace permission, the process gone) is
reported with py-spy's message; the run goes on.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["finish_profiles", "profile_path", "start_profiles"]

#: samples per second per role (py-spy's default is 100)
RATE = 100


def profile_path(out: Path, role: str) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", role.lower()).strip("-")
    return out / f"profile-{slug}.speedscope.json"


async def start_profiles(
    roles: Mapping[int, str], seconds: float, out: Path, py_spy: str, rate: int = RATE
) -> dict[str, tuple[asyncio.subprocess.Process, Path]]:
    """Start one py-spy per (pid, role); returns role -> (process, output path)."""
    spies = {}
    for pid, role in roles.items():
        path = profile_path(out, role)
        proc = await asyncio.create_subprocess_exec(
            py_spy, "record", "--pid", str(pid), "--duration", str(max(1, math.ceil(seconds))),
            "--rate", str(rate), "--format", "speedscope", "--output", str(path),
            "--nonblocking",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        spies[role] = (proc, path)
    return spies


async def finish_profiles(
    spies: Mapping[str, tuple[asyncio.subprocess.Process, Path]], grace_s: float = 30.0
) -> dict[str, dict[str, Any]]:
    """Wait for every py-spy (its duration plus ``grace_s``); role -> {file, ok, error}."""
    out: dict[str, dict[str, Any]] = {}
    for role, (proc, path) in spies.items():
        try:
            _, err = await asyncio.wait_for(proc.communicate(), timeout=grace_s)
        except TimeoutError:
            proc.kill()
            _, err = await proc.communicate()
        ok = proc.returncode == 0 and path.exists()
        text = err.decode(errors="replace").strip().splitlines()
        out[role] = {
            "file": str(path) if path.exists() else None,
            "ok": ok,
            "error": None if ok else (text[-1] if text else f"exit {proc.returncode}"),
        }
    return out
