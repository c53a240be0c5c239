"""Log lines that cannot flood: at most one per interval per key, with a count of the rest.

A peer that can make a process log (a malformed request, a refused connection, a full file table)
can make it log as fast as it can send. :class:`LogBudget` lets the first line of each key through
and then one per ``interval_s``, saying how many it left out meanwhile; every call is counted
(``total``, ``suppressed``), so the figures reach the metrics even when the lines do not.

Cost: one dict lookup and a clock read per call; memory: one entry per key ever seen (keys are a
handful of fixed reasons, never a peer's address).
"""

from __future__ import annotations

import logging
import time
from collections import Counter

__all__ = ["LogBudget"]


class LogBudget:
    """Rate-limited logging by key (see the module docstring)."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0) -> None:
        self.logger = logger
        self.interval_s = interval_s
        #: calls per key, logged or not
        self.total: Counter[str] = Counter()
        #: calls per key that were left out
        self.suppressed: Counter[str] = Counter()
        self._next: dict[str, float] = {}
        self._left_out: Counter[str] = Counter()

    def log(self, level: int, key: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` unless ``key`` logged within ``interval_s``; True when it did."""
        self.total[key] += 1
        now = time.monotonic()
        if now < self._next.get(key, 0.0):
            self._left_out[key] += 1
            self.suppressed[key] += 1
            return False
        self._next[key] = now + self.interval_s
        missed = self._left_out.pop(key, 0)
        if missed:
            msg += " (%d more like it in the last %.0f s not logged)"
            args = (*args, missed, self.interval_s)
        self.logger.log(level, msg, *args)
        return True

    def warning(self, key: str, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, key, msg, *args)
