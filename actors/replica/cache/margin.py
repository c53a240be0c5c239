"""An account's margin from the replica's caches (pure, no I/O): its equity and initial-margin
requirement (the dry-run's margin check, the available balance) and its liquidation prices.

Cross and isolated margin as the engine keeps them (``raydex.engine``, ``_orders.refresh``): the
account's (cross) equity is its collateral plus its cross positions' unrealized PnL, its
requirement their initial margin on the worst case, plus for each isolated position only what
its resting orders would add (``exposure - |size|``); an isolated position stands on its own
collateral (``PositionRecord.allocated_margin``).

A cross position's liquidation price is the mark at which the account's equity meets its
maintenance requirement (the engine liquidates while ``equity * 1e4 < MMR``), the other cross
positions held at their marks; an isolated position's, the mark at which its own collateral
plus unrealized PnL meets its own maintenance. Both sides are linear in the mark ``P``; with
``equity_rest`` and ``mmr_rest`` the rest of the account's (for an isolated position: its
collateral, and 0):

    P = (mmr_rest - (equity_rest - entry_quote) * 1e4) / (mult * (size * 1e4 - |size| * mmf))

in ticks, rounded towards the current mark (a client is never told it has more room than it
has); 0 = none (flat, or no price in ``[1, MAX_PRICE]`` reaches maintenance). Every rule is the
engine's own (``raydex.engine.rules``), so the replica cannot drift from it.
Cost: O(the account's positions and the markets it rests orders in).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from raydex.codecs import BPS, MarketRecord, PositionRecord
from raydex.engine.rules import (
    MAX_PRICE,
    exposure,
    initial_margin,
    maintenance_margin,
    notional_multiplier,
    unrealized_pnl,
)

__all__ = [
    "MarginSummary",
    "equity_and_requirement",
    "isolated_collateral",
    "isolated_ok",
    "liquidation_price",
    "liquidation_prices",
    "margin_summary",
]


def equity_and_requirement(
    markets: Mapping[int, MarketRecord],
    collateral: int,
    positions: Mapping[int, PositionRecord],
    open_lots: Mapping[int, list[int]],
) -> tuple[int, int]:
    """(equity, initial-margin requirement numerator, 1e4 times micro-USDC) of an account:
    collateral plus the positions' unrealized pnl, and the sum of each market's initial margin
    on its worst-case exposure (position and resting orders, ``open_lots``: market -> [bid lots,
    ask lots]), as the engine counts them."""
    equity = collateral
    num = 0
    for mi in set(positions) | set(open_lots):
        pos = positions.get(mi)
        m = markets[mi]
        mq = m.mark_price * notional_multiplier(m.price_decimals, m.size_decimals)
        s = pos.size if pos is not None else 0
        imf = pos.initial_margin_fraction if pos is not None else m.default_initial_margin_fraction
        bo, ao = open_lots.get(mi, (0, 0))
        if pos is not None and pos.margin_mode:  # isolated: its orders' part only
            num += initial_margin(exposure(s, bo, ao) - abs(s), mq, imf)
            continue
        if s and pos is not None:
            equity += unrealized_pnl(s, mq, pos.entry_quote)
        num += initial_margin(exposure(s, bo, ao), mq, imf)
    return equity, num


class MarginSummary(NamedTuple):
    """An account's margin split (micro-USDC; requirements rounded up): the cross pool's equity,
    initial and maintenance requirements, and its isolated positions' collateral and equity
    (collateral plus unrealized PnL)."""

    cross_equity: int
    cross_initial: int
    cross_maintenance: int
    isolated_collateral: int
    isolated_equity: int

    @property
    def available(self) -> int:
        """The cross equity above its initial requirement: what may be withdrawn, transferred,
        moved into an isolated position or put behind new orders."""
        return self.cross_equity - self.cross_initial

    @property
    def total_equity(self) -> int:
        return self.cross_equity + self.isolated_equity


def margin_summary(
    markets: Mapping[int, MarketRecord],
    collateral: int,
    positions: Mapping[int, PositionRecord],
    open_lots: Mapping[int, list[int]],
) -> MarginSummary:
    """:class:`MarginSummary` of an account, as the engine counts it."""
    equity, num = equity_and_requirement(markets, collateral, positions, open_lots)
    mm = iso_collateral = iso_equity = 0
    for mi, p in positions.items():
        if not p.size:
            continue
        m = markets[mi]
        mq = m.mark_price * notional_multiplier(m.price_decimals, m.size_decimals)
        if p.margin_mode:
            iso_collateral += p.allocated_margin
            iso_equity += p.allocated_margin + unrealized_pnl(p.size, mq, p.entry_quote)
        else:
            mm += maintenance_margin(abs(p.size), mq, m.maintenance_margin_fraction)
    return MarginSummary(equity, -(-num // BPS), -(-mm // BPS), iso_collateral, iso_equity)


def isolated_collateral(positions: Mapping[int, PositionRecord]) -> int:
    """The collateral the account's isolated positions hold (micro-USDC)."""
    return sum(p.allocated_margin for p in positions.values() if p.margin_mode)


def isolated_ok(m: MarketRecord, p: PositionRecord, allocated: int, fraction: int) -> bool:
    """Isolated ``p`` with ``allocated`` collateral: ``(allocated + upnl) * 1e4`` at least
    ``|size| * mark * mult * fraction`` (its initial margin fraction: what UpdateMargin may
    remove down to, as the engine checks)."""
    mq = m.mark_price * notional_multiplier(m.price_decimals, m.size_decimals)
    equity: int = allocated + unrealized_pnl(p.size, mq, p.entry_quote)
    need: int = initial_margin(abs(p.size), mq, fraction)
    return bool(equity * BPS >= need)


def liquidation_price(
    size: int, entry_quote: int, mult: int, mmf: int, equity_rest: int, mmr_rest: int
) -> int:
    """Ticks at which ``equity * 1e4`` meets the maintenance requirement for this position (see
    the module docstring); 0 when flat or unreachable. ``equity_rest``: collateral plus the other
    positions' unrealized PnL; ``mmr_rest``: the other positions' MMR numerator."""
    if size == 0:
        return 0
    num = mmr_rest - (equity_rest - entry_quote) * BPS
    lots = size if size > 0 else -size
    den = mult * (size * BPS - lots * mmf)
    if den == 0:
        return 0
    if den < 0:
        num, den = -num, -den
    price = -(-num // den) if size > 0 else num // den
    return price if 1 <= price <= MAX_PRICE else 0


def liquidation_prices(
    markets: Mapping[int, MarketRecord], collateral: int, positions: Mapping[int, PositionRecord]
) -> dict[int, int]:
    """Market -> liquidation price (ticks, 0 = none) of each of the account's positions."""
    equity = collateral
    mmr = 0
    parts: dict[int, tuple[int, int, int, int]] = {}
    for mi, p in positions.items():
        m = markets[mi]
        mult = notional_multiplier(m.price_decimals, m.size_decimals)
        mark_q = m.mark_price * mult
        s = p.size
        upnl = unrealized_pnl(s, mark_q, p.entry_quote)
        mm = maintenance_margin(s if s > 0 else -s, mark_q, m.maintenance_margin_fraction)
        if not p.margin_mode:
            equity += upnl
            mmr += mm
        parts[mi] = (upnl, mm, mult, m.maintenance_margin_fraction)
    out: dict[int, int] = {}
    for mi, p in positions.items():
        upnl, mm, mult, mmf = parts[mi]
        if p.margin_mode:  # on its own collateral
            out[mi] = liquidation_price(p.size, p.entry_quote, mult, mmf, p.allocated_margin, 0)
        else:
            out[mi] = liquidation_price(p.size, p.entry_quote, mult, mmf, equity - upnl, mmr - mm)
    return out
