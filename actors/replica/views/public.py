"""Lighter JSON shapes for the public reads added with issue 11: tx lists, exchange stats,
candles, announcements (pure functions over the replica's caches and history, no I/O).

Every builder returns what the ``lighter-sdk`` pydantic model of that answer accepts with
``model_validate(..., strict=True)`` (checked in ``tests/unit/test_api_public.py``).
Daily figures are ``views``' (the trades this replica saw since the current UTC day began);
``daily_usd_volume`` sums the markets' quote volumes (USDC is the quote of every market).
"""

from __future__ import annotations

from typing import Any

from raydex.codecs import MarketRecord, lots_to_str, ticks_to_str, tx_to_json_str
from raydex.engine import FUNDING_INTERVAL_MS, funding_rate

from ..cache import (
    BookSnapshot,
    Candle,
    History,
    MarketStats,
    ReplicaState,
    Settlement,
    TxRecord,
    candle_json,
)
from .common import funding_pct, tx_record

#: Lighter's ``Tx.type`` is 1..64: raydex's own operator commands (SetMarkPrice 101,
#: ApplyFunding 102, RegisterApiKey 103) are left out of tx lists, which clients validate.
MAX_LIGHTER_TX_TYPE = 64


def tx_info(history: History, r: TxRecord) -> str:
    """The tx's ``tx_info`` JSON when it was submitted through this replica, else ``""``."""
    body = history.body(r.tx_hash)
    return "" if body is None else tx_to_json_str(body)


def tx_list(history: History, records: list[TxRecord]) -> list[dict[str, Any]]:
    """``Tx`` entries (``txs``, ``blockTxs``): ``EnrichedTx`` without the per-answer fields."""
    out = []
    for r in records:
        if r.tx_type > MAX_LIGHTER_TX_TYPE:
            continue
        row = tx_record(r, tx_info(history, r))
        for k in ("code", "committed_at", "verified_at"):
            del row[k]
        out.append(row)
    return out


def _stats(m: MarketRecord, s: MarketStats) -> dict[str, Any]:
    pd, sd = m.price_decimals, m.size_decimals
    change = (m.last_trade_price - s.first_price) / s.first_price if s.first_price else 0.0
    return {
        "symbol": m.symbol,
        "last_trade_price": m.last_trade_price / 10**pd,
        "daily_trades_count": s.trades,
        "daily_base_token_volume": s.base_volume / 10**sd,
        "daily_quote_token_volume": s.quote_volume / 10 ** (pd + sd),
        "daily_price_change": change * 100,
    }


def exchange_stats(state: ReplicaState) -> dict[str, Any]:
    """``ExchangeStats``: one ``OrderBookStats`` per market plus the exchange-wide sums."""
    rows = [_stats(state.markets[mi], state.stats[mi]) for mi in sorted(state.markets)]
    return {
        "total": len(rows),
        "order_book_stats": rows,
        "daily_usd_volume": sum(r["daily_quote_token_volume"] for r in rows),
        "daily_trades_count": sum(r["daily_trades_count"] for r in rows),
    }


def candles(resolution: str, rows: list[Candle], m: MarketRecord) -> dict[str, Any]:
    """``Candles``: ``r`` the resolution, ``c`` the candles oldest first."""
    return {"r": resolution, "c": [candle_json(c, m) for c in rows]}


def _top(levels: tuple[tuple[int, int], ...], m: MarketRecord) -> dict[str, str]:
    if not levels:
        return {"price": "0", "size": "0"}
    price, size = levels[0]
    return {
        "price": ticks_to_str(price, m.price_decimals),
        "size": lots_to_str(size, m.size_decimals),
    }


def ticker(b: BookSnapshot, m: MarketRecord) -> dict[str, Any]:
    """Lighter's ``Ticker``: ``s`` the symbol, ``a``/``b`` the best ask/bid level (``"0"`` when
    a side is empty)."""
    return {"s": m.symbol, "a": _top(b.asks, m), "b": _top(b.bids, m)}


def top_of_book(b: BookSnapshot) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """The best ask and bid levels (what a ``ticker`` update reports), for change detection."""
    return (b.asks[0] if b.asks else None, b.bids[0] if b.bids else None)


def funding_rates(state: ReplicaState) -> list[dict[str, Any]]:
    """``FundingRate`` per market: the rate the running hour would settle at now, as a fraction
    over 8 hours (how Lighter's ``funding-rates`` writes every venue's rate; ccxt reads it as is).
    Only ``lighter``'s own rates: raydex knows no other venue."""
    out = []
    for mi in sorted(state.markets):
        f = state.history.funding.get(mi)
        rate = funding_rate(f.premium_sum, f.samples) if f else funding_rate(0, 0)
        out.append(
            {
                "market_id": mi,
                "exchange": "lighter",
                "symbol": state.markets[mi].symbol,
                "rate": rate * 8 / 100_000_000,
            }
        )
    return out


#: ``fundings`` resolutions -> the width of one row (ms)
FUNDING_RESOLUTIONS = {"1h": FUNDING_INTERVAL_MS, "1d": 24 * FUNDING_INTERVAL_MS}


def fundings(
    rows: list[Settlement], m: MarketRecord, width_ms: int, start_s: int, end_s: int, count: int
) -> list[dict[str, Any]]:
    """``Funding`` rows, oldest first, for settlements with ``start_s <= time <= end_s``
    (seconds, as Lighter's ``fundings`` takes and writes them), summed per ``width_ms``; the
    newest ``count`` rows when ``count > 0``. ``rate``: percent of the notional, as a magnitude;
    ``direction``: the side that paid (``long`` for a positive rate); ``value``: what one unit
    of the base paid, in USDC."""
    buckets: dict[int, list[int]] = {}
    for r in rows:
        if not start_s * 1000 <= r.time_ms <= end_s * 1000:
            continue
        key = r.time_ms - r.time_ms % width_ms
        b = buckets.setdefault(key, [0, 0])
        b[0] += r.rate
        b[1] += r.rate * r.mark  # 1e-8 * ticks
    keys = sorted(buckets)
    if count > 0:
        keys = keys[-count:]
    out = []
    scale = 10 ** (8 + m.price_decimals)
    for k in keys:
        rate, value = buckets[k]
        out.append(
            {
                "timestamp": k // 1000,
                "value": str(abs(value) / scale),
                "rate": funding_pct(abs(rate)),
                "direction": "long" if rate >= 0 else "short",
            }
        )
    return out
