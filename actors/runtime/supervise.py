"""Supervised background loops, and the one way an actor gives up: exiting its process.

::

    Supervisor.start("txlog", follow) ──► run follow() ──raised──► log (with traceback), count
                                             ▲                      raydex_loop_restarts_total
                                             └──── sleep (backoff) ◄┘{loop="txlog"}
                                  more than ``max_restarts`` failures within ``window_s``:
                                  on_fatal(reason) (an actor shell: :func:`exit_process`)

A background loop (a follower, the oracle, a maintenance task) never ends silently: an exception
is logged, counted and the loop restarted after a backoff; a loop that keeps failing means a broken
process, and the shell exits so Ray restarts the actor. Cancellation (the owner stopping) ends the
loop quietly; a loop that *returns* is restarted too. Knobs: ``max_restarts``/``window_s``
(patience with a transient fault against how long a broken actor stays up), ``initial_s``/``max_s``
(how fast a loop resumes against how hard a persistent fault spins).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from raydex.observability.metrics import Count, Recorder

log = logging.getLogger(__name__)

#: the process exit status of an actor that gave up (``EX_SOFTWARE``)
EXIT_STATUS = 70


def exit_process(reason: str, status: int = EXIT_STATUS) -> NoReturn:
    """Log ``reason`` as critical, flush the logs, and end the process at once (``os._exit``: no
    cleanup that could hang). Ray sees a dead worker and restarts the actor, which recovers."""
    log.critical("exiting the actor process (Ray restarts it): %s", reason)
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):  # best effort: the exit matters more than a line
            handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def log_fatal(reason: str) -> None:
    """The ``on_fatal`` outside an actor (tests, embedded runs): log it, keep the process."""
    log.critical("fatal (this process is not an actor, so it stays up): %s", reason)


class Supervisor:
    """Runs named loops and restarts each one that fails (see the module docstring)."""

    def __init__(
        self,
        metrics: Recorder | None,
        on_fatal: Callable[[str], None] = log_fatal,
        *,
        max_restarts: int = 20,
        window_s: float = 60.0,
        initial_s: float = 0.05,
        max_s: float = 2.0,
    ) -> None:
        self.metrics = metrics
        self.on_fatal = on_fatal
        self.max_restarts = max_restarts
        self.window_s = window_s
        self.initial_s = initial_s
        self.max_s = max_s
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._counts: dict[str, Count] = {}

    def restarts(self, name: str) -> int:
        c = self._counts.get(name)
        return c.n if c is not None else 0

    def start(self, name: str, body: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Run ``body()`` under supervision as loop ``name`` (once per name)."""
        if name not in self._counts:
            if self.metrics is not None:
                self._counts[name] = self.metrics.count("raydex_loop_restarts_total", loop=name)
            else:
                from raydex.observability.metrics import Count

                self._counts[name] = Count()
        task = asyncio.get_running_loop().create_task(self._run(name, body), name=name)
        self.tasks[name] = task
        return task

    async def stop(self) -> None:
        tasks = list(self.tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.tasks.clear()

    async def _run(self, name: str, body: Callable[[], Awaitable[None]]) -> None:
        failures: deque[float] = deque()
        delay = self.initial_s
        count = self._counts[name]
        while True:
            began = time.monotonic()
            try:
                await body()
                log.error("loop %r returned; restarting it", name)
            except asyncio.CancelledError:
                raise
            except Exception:  # the point of a supervisor: log, count, restart
                log.exception("loop %r failed; restarting it", name)
            count.n += 1
            now = time.monotonic()
            failures.append(now)
            while failures and failures[0] < now - self.window_s:
                failures.popleft()
            if len(failures) > self.max_restarts:
                self.on_fatal(
                    f"loop {name!r} failed {len(failures)} times in {self.window_s:.0f} s"
                )
                return
            if now - began > 10 * delay:  # it ran a while: a new fault, not the same one
                delay = self.initial_s
            await asyncio.sleep(delay)
            delay = min(self.max_s, delay * 2)
