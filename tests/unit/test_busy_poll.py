"""The busy-poll knob: with it the event loop never parks in the selector (every poll has a
zero timeout); without it the loop sleeps until its next timer."""

from __future__ import annotations

import asyncio
import selectors

from raydex.actors.runtime import ActorRuntime
from raydex.actors.runtime.shell import busy_poll_loop


class RecordingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The platform selector, noting each timeout the loop polls with."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self.timeouts.append(timeout)
        return super().select(timeout)


def run_with(spin: bool) -> list[float | None]:
    sel = RecordingSelector()
    loop = asyncio.SelectorEventLoop(sel)

    async def main() -> None:
        spinner = asyncio.get_running_loop().create_task(busy_poll_loop()) if spin else None
        await asyncio.sleep(0)
        sel.timeouts.clear()
        await asyncio.sleep(0.05)  # a timer 50 ms away: a parked loop sleeps until it
        if spinner is not None:
            spinner.cancel()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return sel.timeouts


def test_a_busy_polling_loop_never_parks() -> None:
    spinning = run_with(spin=True)
    assert len(spinning) > 10 and all(t == 0 for t in spinning)


def test_a_plain_loop_parks_until_its_next_timer() -> None:
    parked = run_with(spin=False)
    assert any(t is not None and t > 0.01 for t in parked)


def test_the_runtime_starts_the_spinner_only_when_asked() -> None:
    async def boot(busy: bool) -> bool:
        rt = ActorRuntime(nice=None)
        rt.before_boot()
        try:
            rt.after_boot(busy_poll=busy)
            await asyncio.sleep(0)
            return bool(rt.status()["busy_poll"])
        finally:
            rt.monitor.uninstall()

    assert asyncio.run(boot(True)) is True
    assert asyncio.run(boot(False)) is False
