"""Suite-wide settings.

Hypothesis: the CI machine has 2 cores shared by Ray workers and the tests themselves, so input
generation can be slow for reasons that have nothing to do with the code under test. No test here
asserts on time, so per-example deadlines and the "too slow" health check are off everywhere.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "raydex", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("raydex")
