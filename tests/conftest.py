"""Suite-wide settings.

Hypothesis: the CI machine has 2 cores shared by Ray workers and the tests themselves, so input
generation can be slow for reasons that have nothing to do with the code under test. No test here
asserts on time, so per-example deadlines and the "too slow" health check are off everywhere.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "raydex", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("raydex")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run tests/integration first, so the session's Ray starts in a process no other test has
    touched yet. ``ray.init`` forks its daemons with a ``preexec_fn`` (Python-level after-fork
    hooks run in the child); after in-process gRPC servers and event-loop threads from other
    tests, that fork was seen to segfault. Order within each part is unchanged."""
    items.sort(key=lambda item: 0 if "tests/integration/" in item.nodeid.replace("\\", "/") else 1)
