"""Snapshot records: the full exchange state as rows, one NamedTuple (= one layout, one Arrow
schema) per table.

A snapshot is: one ExchangeRecord, then MarketRecord, AccountRecord, PositionRecord,
ApiKeyRecord, OrderRecord, FundingRecord, L1AddressRecord and ConditionalOrderRecord rows.
OrderRecord rows of one market appear in time priority within each price level (``priority``
increases), so restoring them in row order rebuilds the book exactly.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Annotated, NamedTuple

from ._enums import AccountIndex, ApiKeyIndex, ClientOrderIndex, MarketIndex, Nonce, OrderIndex
from ._market import (
    Decimals,
    FeePpm,
    FractionBps,
    MarketStatusFlag,
    MarketSymbol,
    MarkPrice,
    MinBaseAmount,
    MinQuoteAmount,
)
from ._wire import I32, I64, U8, U16, U32, U64, Bytes20, Bytes40, wire

RECORD = "record"


class RecordTag(IntEnum):
    EXCHANGE = 1
    MARKET = 2
    ACCOUNT = 3
    POSITION = 4
    API_KEY = 5
    ORDER = 6
    FUNDING = 7
    L1_ADDRESS = 8
    CONDITIONAL_ORDER = 9


Account = Annotated[AccountIndex, U64]
Market = Annotated[MarketIndex, U8]


@wire(RECORD, RecordTag.EXCHANGE)
class ExchangeRecord(NamedTuple):
    fee_pool: Annotated[int, I64]
    insurance_fund: Annotated[int, I64]
    total_deposits: Annotated[int, I64]
    total_withdrawals: Annotated[int, I64]
    next_order_index: Annotated[int, U64]
    next_trade_id: Annotated[int, U64]
    next_priority: Annotated[int, U64]


@wire(RECORD, RecordTag.MARKET)
class MarketRecord(NamedTuple):
    market_index: Market
    symbol: MarketSymbol
    price_decimals: Decimals
    size_decimals: Decimals
    min_base_amount: MinBaseAmount
    min_quote_amount: MinQuoteAmount
    maker_fee: FeePpm
    taker_fee: FeePpm
    liquidation_fee: FeePpm
    default_initial_margin_fraction: FractionBps
    min_initial_margin_fraction: FractionBps
    maintenance_margin_fraction: FractionBps
    closeout_margin_fraction: FractionBps
    max_price_deviation: FractionBps
    mark_price: MarkPrice
    status: MarketStatusFlag
    last_trade_price: Annotated[int, U32]
    open_interest: Annotated[int, U64]


@wire(RECORD, RecordTag.ACCOUNT)
class AccountRecord(NamedTuple):
    """An account's collateral and its master account's index (its own for a master)."""

    account_index: Account
    collateral: Annotated[int, I64]
    master_index: Account


@wire(RECORD, RecordTag.POSITION)
class PositionRecord(NamedTuple):
    """A position: ``margin_mode`` 0 cross, 1 isolated (with its own ``allocated_margin``)."""

    account_index: Account
    market_index: Market
    size: Annotated[int, I64]
    entry_quote: Annotated[int, I64]
    realized_pnl: Annotated[int, I64]
    funding_paid: Annotated[int, I64]
    initial_margin_fraction: Annotated[int, U16]
    margin_mode: Annotated[int, U8]
    #: the collateral of an isolated position (``margin_mode`` 1), micro-USDC; 0 for cross
    allocated_margin: Annotated[int, I64]


@wire(RECORD, RecordTag.API_KEY)
class ApiKeyRecord(NamedTuple):
    account_index: Account
    api_key_index: Annotated[ApiKeyIndex, U8]
    nonce: Annotated[Nonce, I64]
    pub_key: Annotated[bytes, Bytes40]


@wire(RECORD, RecordTag.ORDER)
class OrderRecord(NamedTuple):
    market_index: Market
    order_index: Annotated[OrderIndex, U64]
    account_index: Account
    client_order_index: Annotated[ClientOrderIndex, U64]
    is_ask: Annotated[int, U8]
    price: Annotated[int, U32]
    initial_base_amount: Annotated[int, U64]
    remaining_base_amount: Annotated[int, U64]
    order_expiry: Annotated[int, I64]
    order_type: Annotated[int, U8]
    time_in_force: Annotated[int, U8]
    reduce_only: Annotated[int, U8]
    priority: Annotated[int, U64]
    order_version: Annotated[int, U64]


@wire(RECORD, RecordTag.FUNDING)
class FundingRecord(NamedTuple):
    """One market's funding clock (engine ``_funding``): the hour being sampled (``hour`` =
    ms // 3_600_000), the last sampled minute, the samples so far and their sum (1e-8), and the
    last settled rate (1e-8 per hour) with its hour mark (ms)."""

    market_index: Market
    hour: Annotated[int, I64]
    last_minute: Annotated[int, I64]
    samples: Annotated[int, U32]
    premium_sum: Annotated[int, I64]
    last_rate: Annotated[int, I32]
    last_funding_ms: Annotated[int, I64]


@wire(RECORD, RecordTag.L1_ADDRESS)
class L1AddressRecord(NamedTuple):
    """An account's L1 (Ethereum) address, 20 bytes; accounts without one have no row."""

    account_index: Account
    l1_address: Annotated[bytes, Bytes20]


@wire(RECORD, RecordTag.CONDITIONAL_ORDER)
class ConditionalOrderRecord(NamedTuple):
    """A live order with a condition (engine ``_triggers``), by order index: a waiting
    stop-loss / take-profit or grouped child, a running TWAP, or the condition of an order on
    the book (a fired stop-loss-limit / take-profit-limit resting, a grouped entry with its
    links). Its fields are those of ``ConditionalOrderUpdated`` (the last one emitted for it);
    a state without such orders has no rows."""

    market_index: Market
    order_index: Annotated[OrderIndex, U64]
    account_index: Account
    client_order_index: Annotated[ClientOrderIndex, U64]
    is_ask: Annotated[int, U8]
    price: Annotated[int, U32]
    base_amount: Annotated[int, U64]
    remaining_base_amount: Annotated[int, U64]
    order_expiry: Annotated[int, I64]
    order_type: Annotated[int, U8]
    time_in_force: Annotated[int, U8]
    reduce_only: Annotated[int, U8]
    status: Annotated[int, U8]
    trigger_status: Annotated[int, U8]
    trigger_price: Annotated[int, U32]
    trigger_time: Annotated[int, I64]
    parent_order_index: Annotated[OrderIndex, U64]
    to_trigger_order_index_0: Annotated[OrderIndex, U64]
    to_trigger_order_index_1: Annotated[OrderIndex, U64]
    to_cancel_order_index_0: Annotated[OrderIndex, U64]
    created_at: Annotated[int, I64]
    next_slice_at: Annotated[int, I64]
    slice_order_index: Annotated[OrderIndex, U64]
