"""An account's margin from the replica's caches (pure, no I/O): its equity and initial-margin
requirement (the dry-run's margin check, the available balance) and its liquidation prices.

A position's liquidation price is the mark at which the account's equity meets its maintenance
requirement (the engine liquidates while ``equity * 1e4 < MMR``), the other positions held at
their marks. Both sides are linear in the mark ``P``; with ``equity_rest`` and ``mmr_rest`` the
rest of the account's:

    P = (mmr_rest - (equity_rest - entry_quote) * 1e4) / (mult * (size * 1e4 - |size| * mmf))

in ticks, rounded towards the current mark (a client is never told it has more room than it
has); 0 = none (flat, or no price in ``[1, MAX_PRICE]`` reaches maintenance). Every rule is the
engine's own (``raydex.engine.rules``), so the replica cannot drift from it.
Cost: O(the account's positions and the markets it rests orders in).
"""

from __future__ import annotations

from collections.abc import Mapping

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
    "equity_and_requirement",
    "liquidation_price",
    "liquidation_prices",
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
        if s and pos is not None:
            equity += unrealized_pnl(s, mq, pos.entry_quote)
        num += initial_margin(exposure(s, bo, ao), mq, imf)
    return equity, num


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
        equity += upnl
        mmr += mm
        parts[mi] = (upnl, mm, mult, m.maintenance_margin_fraction)
    out: dict[int, int] = {}
    for mi, p in positions.items():
        upnl, mm, mult, mmf = parts[mi]
        out[mi] = liquidation_price(p.size, p.entry_quote, mult, mmf, equity - upnl, mmr - mm)
    return out
