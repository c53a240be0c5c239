"""Suite-wide settings.

Hypothesis: the CI machine has 2 cores shared by Ray workers and the tests themselves, so input
generation can be slow for reasons that have nothing to do with the code under test. No test here
asserts on time, so per-example deadlines and the "too slow" health check are off everywhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import raydex.engine
import raydex.observability.bench

settings.register_profile(
    "raydex", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("raydex")


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to test a stale compiled engine: ``make`` compiles ``engine/*.py`` (and the
    benchmark's floors, ``observability/bench/floors.py``) into ``.so`` files that shadow the
    sources, so after an edit (or a checkout) the tests would run the old code. ``make test``
    rebuilds first; a direct ``pytest`` run is stopped here instead."""
    stale = _stale_compiled_engine_modules()
    if stale:
        pytest.exit(
            f"the compiled engine is older than its sources ({', '.join(stale)}): run "
            "`make engine` to rebuild it, or `make pure` to test the pure-Python engine",
            returncode=4,
        )


def _stale_compiled_engine_modules() -> list[str]:
    stale = []
    for package in (raydex.engine, raydex.observability.bench):
        folder = Path(str(package.__file__)).parent
        for ext in folder.glob("*.so"):
            src = folder / (ext.name.split(".", 1)[0] + ".py")
            if src.is_file() and src.stat().st_mtime > ext.stat().st_mtime:
                stale.append(src.name)
    return sorted(stale)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run tests/integration first, so the session's Ray starts in a process no other test has
    touched yet. ``ray.init`` forks its daemons with a ``preexec_fn`` (Python-level after-fork
    hooks run in the child); after in-process gRPC servers and event-loop threads from other
    tests, that fork was seen to segfault. Order within each part is unchanged."""
    items.sort(key=lambda item: 0 if "tests/integration/" in item.nodeid.replace("\\", "/") else 1)
