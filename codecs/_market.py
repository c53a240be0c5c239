"""A market's parameters: each field's width and domain declared once, used by every layout that
carries them (``CreateMarket``, ``UpdateMarket``, the ``MarketChanged`` event, the snapshot's
``MarketRecord``).

Python's NamedTuple has no field inheritance, so each layout still lists the field names; their
types come from here, and ``tests/unit/test_codecs_market_layout.py`` checks that the four layouts
carry :data:`MARKET_PARAMS` in this order with identical field specs.

Units: fees in ppm of notional, margin fractions and the fat-finger band in bps, sizes in lots,
quote amounts in micro-USDC, prices in ticks.
"""

from __future__ import annotations

from typing import Annotated

from ._enums import MAX_48
from ._wire import U8, U16, U32, U64, Range, Symbol

Decimals = Annotated[int, U8, Range(0, 6)]
MinBaseAmount = Annotated[int, U64, Range(1, MAX_48)]
MinQuoteAmount = Annotated[int, U64, Range(0, 2**63 - 1)]
FeePpm = Annotated[int, U32, Range(0, 1_000_000)]
FractionBps = Annotated[int, U16, Range(0, 10_000)]
MarkPrice = Annotated[int, U32, Range(1, 2**32 - 1)]
MarketSymbol = Annotated[str, Symbol]
MarketStatusFlag = Annotated[int, U8, Range(0, 1)]

#: the mutable parameters, in layout order (UpdateMarket replaces exactly these, plus status)
MARKET_PARAMS = (
    "min_base_amount",
    "min_quote_amount",
    "maker_fee",
    "taker_fee",
    "liquidation_fee",
    "default_initial_margin_fraction",
    "min_initial_margin_fraction",
    "maintenance_margin_fraction",
    "closeout_margin_fraction",
    "max_price_deviation",
)
