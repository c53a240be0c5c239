"""Per-account trade counts and volumes (actors/replica/cache/volumes.py) over Lighter's windows:
the UTC day, the ISO week (from Monday), the calendar month and the total, both sides of a
trade."""

from __future__ import annotations

from raydex.actors.local import eth_market
from raydex.actors.replica.cache.rows import TradeRow
from raydex.actors.replica.cache.volumes import ZERO, AccountVolumes, Volumes
from raydex.codecs import MarketRecord, TradeExecuted

DAY = 86_400_000
MON = 1_767_571_200_000  # Monday 2026-01-05 00:00 UTC
MARKETS = {0: MarketRecord(*eth_market(0), 0, 0)}


def block(ts_ms: int, *pairs: tuple[int, int]) -> dict[int, list[TradeRow]]:
    """Trades of 0.01 ETH at 3000.00 (30 USDC each) between (taker, maker) pairs."""
    rows = [
        TradeRow(TradeExecuted(0, i, 300_000, 100, t, m, 1, 2, 1, 0, 0), b"", 1, ts_ms)
        for i, (t, m) in enumerate(pairs)
    ]
    return {0: rows}


def test_both_sides_count_and_each_window_resets_on_its_own_boundary() -> None:
    v = AccountVolumes()
    usd = 30_000_000
    v.add(block(MON + 1000, (1, 2), (1, 3)), MARKETS)
    assert v.get(1, MON + 2000) == Volumes(2, 2 * usd, 2, 2 * usd, 2, 2 * usd, 2, 2 * usd)
    assert v.get(2, MON + 2000) == Volumes(1, usd, 1, usd, 1, usd, 1, usd)
    assert v.get(9, MON) == ZERO
    v.add(block(MON + 6 * DAY, (2, 1)), MARKETS)  # Sunday: same week
    assert v.get(1, MON + 6 * DAY) == Volumes(1, usd, 3, 3 * usd, 3, 3 * usd, 3, 3 * usd)
    assert v.get(1, MON + 7 * DAY) == Volumes(0, 0, 0, 0, 3, 3 * usd, 3, 3 * usd)  # Monday
    v.add(block(MON + 27 * DAY, (1, 1)), MARKETS)  # Feb 1st; a self-trade counts once
    assert v.get(1, MON + 27 * DAY) == Volumes(1, usd, 1, usd, 1, usd, 4, 4 * usd)
