"""The ``raydex`` command (``commands``): up, deploy, status, down, demo, loadtest, bench.

Its own folder because it sits on top of everything: the control plane (``cluster/control``), the
loadtest and the benchmarks (``observability/``), which themselves use the control plane."""

from .commands import main

__all__ = ["main"]
