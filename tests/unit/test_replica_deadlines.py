"""The replica's deadlines on one loop timer (actors/replica/deadlines.py): a future not done by its
deadline is expired at or after it, a done one never, a shorter deadline behind a longer one gets
a timer of its own, and done futures leave the FIFO as later ones are watched. A real event loop."""

from __future__ import annotations

import asyncio

from raydex.actors.replica.deadlines import Deadlines


def test_only_futures_still_waiting_at_their_deadline_expire_and_never_before_it() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        expired: list[tuple[str, float]] = []
        d: Deadlines[str] = Deadlines(lambda name: expired.append((name, loop.time())))
        t0 = loop.time()
        futs = {name: loop.create_future() for name in ("a", "b", "c", "late")}
        deadlines = {"a": t0 + 0.02, "b": t0 + 0.04, "c": t0 + 0.06, "late": t0 + 0.5}
        for name, fut in futs.items():
            assert d.watch(fut, deadlines[name], name) is None  # in order: no timer of its own
        futs["b"].set_result(None)  # answered in time: never expired
        while len(expired) < 2:
            await asyncio.sleep(0.01)
        assert [name for name, _ in expired] == ["a", "c"]
        for name, at in expired:
            assert at >= deadlines[name]
        futs["late"].set_result(None)
        await asyncio.sleep(0)
        assert [name for name, _ in expired] == ["a", "c"]

    asyncio.run(main())


def test_a_shorter_deadline_behind_a_longer_one_gets_its_own_timer() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        expired: list[str] = []
        d: Deadlines[str] = Deadlines(expired.append)
        t0 = loop.time()
        long_fut, short_fut, cancelled = (loop.create_future() for _ in range(3))
        assert d.watch(long_fut, t0 + 10.0, "long") is None
        timer = d.watch(short_fut, t0 + 0.02, "short")
        assert timer is not None
        other = d.watch(cancelled, t0 + 0.01, "cancelled")
        assert other is not None
        other.cancel()  # its caller was answered: the timer goes with it
        while not expired:
            await asyncio.sleep(0.01)
        assert expired == ["short"] and loop.time() >= t0 + 0.02
        long_fut.set_result(None)

    asyncio.run(main())


def test_futures_done_in_time_leave_the_fifo_as_later_ones_are_watched() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        expired: list[int] = []
        d: Deadlines[int] = Deadlines(expired.append)
        deadline = loop.time() + 60.0
        for i in range(1000):
            fut = loop.create_future()
            d.watch(fut, deadline, i)
            fut.set_result(None)
        assert len(d) == 1  # the last one; every earlier one left at the next watch
        assert expired == []

    asyncio.run(main())
