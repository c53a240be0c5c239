"""Tests that run on each event loop a replica meets: asyncio's, and uvloop's where it is
installed (not a dependency of raydex; Ray runs its actors on it when it is there).

A test module takes both with ``from kit.loops import loop, run``: ``loop`` is an autouse
fixture parametrized over :data:`LOOPS`, and :func:`run` runs a coroutine, bounded, on the loop
of the test being run."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import pytest

__all__ = ["LOOPS", "loop", "run"]

T = TypeVar("T")

#: the event loops ``run`` makes (the ``loop`` fixture's parameter)
LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {"asyncio": asyncio.new_event_loop}
with contextlib.suppress(ImportError):
    LOOPS["uvloop"] = importlib.import_module("uvloop").new_event_loop
_loop = ["asyncio"]


@pytest.fixture(autouse=True, params=sorted(LOOPS))
def loop(request: pytest.FixtureRequest) -> Iterator[str]:
    _loop[0] = request.param
    yield request.param
    _loop[0] = "asyncio"


def run(coro: Awaitable[T], timeout: float = 60.0) -> T:
    """``coro`` to completion within ``timeout`` s, on the current test's loop."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    with asyncio.Runner(loop_factory=LOOPS[_loop[0]]) as runner:
        return runner.run(bounded())
