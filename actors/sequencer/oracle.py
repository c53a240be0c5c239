"""The mark-price oracle: every interval, each market's mark moves toward its book mid.

Rule: for each market with a two-sided book, ``target = clamp(mid, mark - cap, mark + cap)`` with
``cap = max(1, mark * max_step_bps / 10_000)``; a ``SetMarkPrice(market, target)`` is issued when it
differs from the mark. Marks follow the book in capped steps, so a thin or spoofed book cannot yank
them (and trigger liquidations) in one step. The commands are ordinary sequenced operator
commands, logged and replayed like any other: the oracle adds no nondeterminism.

Funding rides the same loop: at the first round of each wall-clock minute it stamps one
``FundingTick`` per market (the engine samples the premium and settles each hour). So does time
for conditional orders: when the engine has something due by now (a TWAP slice, a waiting order's
expiry: ``Engine.cond_due_ms``), the round stamps a ``TimeTick``, so they run without user
traffic, at most ``interval_ms`` late (a TWAP slices every 30 s). With the oracle off, nothing
samples or settles funding, and conditional orders wait for the next command.

:meth:`Oracle.run` is one iteration; the sequencer runs it under a ``Supervisor`` (a raising
iteration is logged and counted, ``raydex_loop_restarts_total{loop="oracle"}``). Knobs:
``interval_ms`` (shorter: marks track the book and liquidations trigger sooner, one command per
moved market per interval); ``max_step_bps`` (larger: faster catch-up, and a manipulated book moves
marks further).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from raydex.codecs import BPS, MAX_MARKET_INDEX, FundingTick, MarketIndex, SetMarkPrice, TimeTick
from raydex.engine import Engine


def oracle_commands(engine: Engine, max_step_bps: int) -> list[SetMarkPrice]:
    """SetMarkPrice per market whose book mid moved away from its mark (capped step)."""
    out: list[SetMarkPrice] = []
    for i in range(MAX_MARKET_INDEX + 1):
        m = engine.market(i)
        if m is None:
            continue
        bid, ask = engine.book_levels(i, 0, 1), engine.book_levels(i, 1, 1)
        if not bid or not ask:
            continue
        mid = (bid[0][0] + ask[0][0]) // 2
        cap = max(1, m.mark_price * max_step_bps // BPS)
        target = min(max(mid, m.mark_price - cap), m.mark_price + cap)
        if target != m.mark_price:
            out.append(SetMarkPrice(MarketIndex(i), target))
    return out


def funding_ticks(engine: Engine) -> list[FundingTick]:
    """One FundingTick per market (the engine decides whether to sample or settle)."""
    return [
        FundingTick(MarketIndex(i))
        for i in range(MAX_MARKET_INDEX + 1)
        if engine.market(i) is not None
    ]


class Oracle:
    """Stamps the oracle's commands every ``interval_ms`` through ``submit`` (operator)."""

    def __init__(
        self,
        engine: Callable[[], Engine],
        submit: Callable[[list[Any]], Awaitable[object]],
        interval_ms: float,
        max_step_bps: int,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._submit = submit
        self.interval_s = interval_ms / 1000.0
        self.max_step_bps = max_step_bps
        self.rounds = 0
        self.commands = 0
        self._minute = -1

    def commands_now(self) -> list[SetMarkPrice]:
        return oracle_commands(self._engine(), self.max_step_bps)

    async def run(self) -> None:
        """Forever: sleep, compute, submit (and wait until they are sequenced)."""
        while True:
            await asyncio.sleep(self.interval_s)
            cmds: list[Any] = list(self.commands_now())
            now_ns = self._clock()
            minute = now_ns // 60_000_000_000
            if minute != self._minute:
                self._minute = minute
                cmds += funding_ticks(self._engine())
            due = self._engine().cond_due_ms()
            if due is not None and due <= now_ns // 1_000_000:
                cmds.append(TimeTick())
            if cmds:
                await self._submit(cmds)
                self.commands += len(cmds)
            self.rounds += 1
