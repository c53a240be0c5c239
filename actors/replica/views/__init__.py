"""Lighter's JSON shapes, built from the replica's caches: pure functions, no I/O.

===========  ====================================================================================
``common``   markets, books, trades, positions, accounts, txs, and the decimal strings they use
``public``   the public reads added with issue 11: tx lists, exchange stats, candles, fundings
``private``  the authenticated reads: orders, trades, flows, fundings, liquidations, pnl
===========  ====================================================================================

The REST handlers (``http``) and the WebSocket fan-out (``ws``) render through these, so a field
means the same on both. This package re-exports ``common``'s builders.
"""

from . import private, public
from .common import (
    MEMO_ENTRIES,
    USDC_ASSET_ID,
    account,
    book_body,
    decimal_memo,
    decimal_str,
    funding_pct,
    l1_address,
    levels,
    market_detail,
    market_stats,
    market_summary,
    position,
    quote_multiplier,
    simple_order,
    sub_accounts,
    trade,
    tx_record,
    usdc_asset,
    usdc_asset_detail,
)

__all__ = [
    "MEMO_ENTRIES",
    "USDC_ASSET_ID",
    "account",
    "book_body",
    "decimal_memo",
    "decimal_str",
    "funding_pct",
    "l1_address",
    "levels",
    "market_detail",
    "market_stats",
    "market_summary",
    "position",
    "private",
    "public",
    "quote_multiplier",
    "simple_order",
    "sub_accounts",
    "trade",
    "tx_record",
    "usdc_asset",
    "usdc_asset_detail",
]
