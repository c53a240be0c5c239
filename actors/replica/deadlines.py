"""Deadlines of waiting callers on one loop timer, not one timer each.

A replica's request waits on two futures (the micro-batcher's outcome, then its block applied
here), each until the request's deadline. A loop timer per wait costs a ``TimerHandle``, its push
into the loop's heap (compared by a Python ``__lt__``), its cancel and its later pop: a few µs per
wait. Callers' deadlines are their arrival time plus one fixed timeout, so they come in order: a
FIFO of them with one timer armed for its head does the same work in O(1) per wait.

:class:`Deadlines` keeps that FIFO. ``watch(fut, deadline, arg)``: once ``deadline`` (loop time)
has passed and ``fut`` is still not done, ``expire(arg)`` is called, as ``loop.call_at(deadline,
expire, arg)`` would call it (never earlier; later only by the loop's own latency, as a timer).
A deadline earlier than the last one watched (a caller with a shorter timeout) gets a timer of its
own, returned for the caller to cancel. Futures done before their deadline leave the FIFO's head
as later ones are watched, so it holds about the waits in progress, not a timeout's worth.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Deadlines"]

T = TypeVar("T")


class Deadlines(Generic[T]):
    """Calls ``expire(arg)`` for each watched future not done by its deadline (module docstring)."""

    __slots__ = ("_expire", "_fifo", "_timer")

    def __init__(self, expire: Callable[[T], None]) -> None:
        self._expire = expire
        #: (deadline, future, arg), deadlines non-decreasing
        self._fifo: deque[tuple[float, asyncio.Future[Any], T]] = deque()
        #: the one timer, armed for a deadline at or before the head's while the FIFO is not empty
        self._timer: asyncio.TimerHandle | None = None

    def watch(
        self, fut: asyncio.Future[Any], deadline: float, arg: T
    ) -> asyncio.TimerHandle | None:
        """Watch ``fut`` until ``deadline``; a timer of its own (the caller cancels it once
        ``fut`` is done) when ``deadline`` is earlier than the last one watched, else None."""
        fifo = self._fifo
        while fifo and fifo[0][1].done():
            fifo.popleft()
        loop = asyncio.get_running_loop()
        if fifo and deadline < fifo[-1][0]:
            return loop.call_at(deadline, self._expire_one, fut, arg)
        fifo.append((deadline, fut, arg))
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._sweep)
        return None

    def __len__(self) -> int:
        return len(self._fifo)

    def _expire_one(self, fut: asyncio.Future[Any], arg: T) -> None:
        if not fut.done():
            self._expire(arg)

    def _sweep(self) -> None:
        """The timer: expire every head whose deadline passed, drop the done ones, re-arm for
        the next head."""
        self._timer = None
        fifo = self._fifo
        loop = asyncio.get_running_loop()
        now = loop.time()
        while fifo:
            deadline, fut, arg = fifo[0]
            if fut.done():
                fifo.popleft()
            elif deadline <= now:
                fifo.popleft()
                self._expire(arg)
            else:
                self._timer = loop.call_at(deadline, self._sweep)
                return
