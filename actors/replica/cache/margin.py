"""Liquidation prices of an account's positions, from the replica's caches (pure, no I/O).

The liquidation price of a position is the mark at which the account's equity would reach its
maintenance requirement, every other position held at its current mark: the engine liquidates an
account while ``equity * 1e4 < MMR`` (cross margin), with

    equity = collateral + sum(unrealized_pnl(size, mark * mult, entry_quote))
    MMR    = sum(maintenance_margin(|size|, mark * mult, maintenance fraction))

For one position of ``size`` lots (the rest of the account giving ``equity_rest`` and
``mmr_rest``) both sides are linear in its mark ``P``; solving ``equity(P) * 1e4 = MMR(P)``:

    P = (mmr_rest - (equity_rest - entry_quote) * 1e4) / (mult * (size * 1e4 - |size| * mmf))

The price is in ticks, rounded towards the current mark (a long is liquidated below it, so it is
rounded up; a short above it, rounded down): a client is never told it has more room than it has.
``0`` means none: the position is flat, or no price in ``[1, MAX_PRICE]`` reaches maintenance (a
long whose account covers it at any price). Same bounds as the engine's liquidation triggers.

``notional_multiplier``, ``unrealized_pnl``, ``maintenance_margin`` and ``MAX_PRICE`` are the
engine's own (``raydex.engine.rules``), so the replica cannot drift from the engine.

Cost: O(positions of the account) for all of its positions together.
"""

from __future__ import annotations

from collections.abc import Mapping

from raydex.codecs import BPS, MarketRecord, PositionRecord
from raydex.engine.rules import (
    MAX_PRICE,
    maintenance_margin,
    notional_multiplier,
    unrealized_pnl,
)

__all__ = [
    "liquidation_price",
    "liquidation_prices",
]


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
