"""Events: what a command caused, past tense, one NamedTuple (= one layout) each.

Events carry *absolute* values (a level's total size, an account's collateral, a position's size),
never increments, so applying the same event twice is harmless and a replica's cache can be rebuilt
from any event without history. A block's body is a sequence of tagged events; replicas apply them
in order and push ``order_book``, ``trade`` and ``account_all`` updates from them.
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

EVENT = "event"


class EventTag(IntEnum):
    LEVEL_CHANGED = 1
    ORDER_UPDATED = 2
    TRADE_EXECUTED = 3
    BALANCE_CHANGED = 4
    POSITION_CHANGED = 5
    NONCE_UPDATED = 6
    API_KEY_CHANGED = 7
    MARKET_CHANGED = 8
    MARKET_STATS_CHANGED = 9
    POSITION_LIQUIDATED = 10
    POSITION_DELEVERAGED = 11
    EXCHANGE_BALANCES_CHANGED = 12
    TX_EXECUTED = 13
    FUNDING_CHANGED = 14
    L1_ADDRESS_SET = 15
    SUB_ACCOUNT_CREATED = 16
    CONDITIONAL_ORDER_UPDATED = 17


Account = Annotated[AccountIndex, U64]
Market = Annotated[MarketIndex, U8]


@wire(EVENT, EventTag.LEVEL_CHANGED)
class LevelChanged(NamedTuple):
    """The total resting size at ``price`` on one side is now ``size`` (0 = level removed)."""

    market_index: Market
    is_ask: Annotated[int, U8]
    price: Annotated[int, U32]
    size: Annotated[int, U64]


@wire(EVENT, EventTag.ORDER_UPDATED)
class OrderUpdated(NamedTuple):
    """An order's full state after the command; ``status`` is Lighter's order status."""

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
    status: Annotated[int, U8]
    #: time priority (FIFO within a level; a re-entered order gets a new one): with it the
    #: snapshot holder rebuilds the full order record from deltas alone
    priority: Annotated[int, U64]
    #: the version its last versioned ModifyOrder set (``L2TxAttributes`` 8; 0: none)
    order_version: Annotated[int, U64]


@wire(EVENT, EventTag.TRADE_EXECUTED)
class TradeExecuted(NamedTuple):
    market_index: Market
    trade_id: Annotated[int, U64]
    price: Annotated[int, U32]
    size: Annotated[int, U64]
    taker_account_index: Account
    maker_account_index: Account
    taker_order_index: Annotated[OrderIndex, U64]
    maker_order_index: Annotated[OrderIndex, U64]
    taker_is_ask: Annotated[int, U8]
    taker_fee: Annotated[int, I64]
    maker_fee: Annotated[int, I64]


@wire(EVENT, EventTag.BALANCE_CHANGED)
class BalanceChanged(NamedTuple):
    account_index: Account
    collateral: Annotated[int, I64]


@wire(EVENT, EventTag.POSITION_CHANGED)
class PositionChanged(NamedTuple):
    """Full position state; ``entry_quote`` is the signed cost basis in micro-USDC (long > 0);
    ``allocated_margin`` the collateral of an isolated position (``margin_mode`` 1, micro-USDC;
    0 for a cross one), the same fields as ``PositionRecord``."""

    account_index: Account
    market_index: Market
    size: Annotated[int, I64]
    entry_quote: Annotated[int, I64]
    realized_pnl: Annotated[int, I64]
    funding_paid: Annotated[int, I64]
    initial_margin_fraction: Annotated[int, U16]
    margin_mode: Annotated[int, U8]
    allocated_margin: Annotated[int, I64]


@wire(EVENT, EventTag.NONCE_UPDATED)
class NonceUpdated(NamedTuple):
    """The last nonce used by (account, api key); the next valid one is ``nonce + 1``."""

    account_index: Account
    api_key_index: Annotated[ApiKeyIndex, U8]
    nonce: Annotated[Nonce, I64]


@wire(EVENT, EventTag.API_KEY_CHANGED)
class ApiKeyChanged(NamedTuple):
    account_index: Account
    api_key_index: Annotated[ApiKeyIndex, U8]
    pub_key: Annotated[bytes, Bytes40]


@wire(EVENT, EventTag.L1_ADDRESS_SET)
class L1AddressSet(NamedTuple):
    """An account got its L1 (Ethereum) address: created by ``L1Deposit``. Absolute."""

    account_index: Account
    l1_address: Annotated[bytes, Bytes20]


@wire(EVENT, EventTag.SUB_ACCOUNT_CREATED)
class SubAccountCreated(NamedTuple):
    """CreateSubAccount made ``account_index`` for ``master_index``, sharing its L1 address (20
    bytes; zeros for a master without one). Absolute: the account's master never changes."""

    account_index: Account
    master_index: Account
    l1_address: Annotated[bytes, Bytes20]


@wire(EVENT, EventTag.MARKET_CHANGED)
class MarketChanged(NamedTuple):
    """A market's full parameters after CreateMarket/UpdateMarket."""

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


@wire(EVENT, EventTag.MARKET_STATS_CHANGED)
class MarketStatsChanged(NamedTuple):
    """Emitted once per command that moved a market's mark, last trade price or open interest."""

    market_index: Market
    mark_price: Annotated[int, U32]
    last_trade_price: Annotated[int, U32]
    open_interest: Annotated[int, U64]


@wire(EVENT, EventTag.POSITION_LIQUIDATED)
class PositionLiquidated(NamedTuple):
    """Sequencer-generated LiquidatePosition (26): ``size`` lots closed against the book."""

    account_index: Account
    market_index: Market
    size: Annotated[int, I64]
    price: Annotated[int, U32]
    fee: Annotated[int, I64]


@wire(EVENT, EventTag.POSITION_DELEVERAGED)
class PositionDeleveraged(NamedTuple):
    """Sequencer-generated Deleverage (23): ``size`` lots of ``account_index`` offset against
    ``counterparty_index`` at the bankruptcy ``price``."""

    account_index: Account
    counterparty_index: Account
    market_index: Market
    size: Annotated[int, I64]
    price: Annotated[int, U32]


@wire(EVENT, EventTag.EXCHANGE_BALANCES_CHANGED)
class ExchangeBalancesChanged(NamedTuple):
    """The exchange's own ledger after the command: fees, insurance, and the running totals of
    deposits and withdrawals (so the snapshot holder rebuilds ``ExchangeRecord`` from deltas)."""

    fee_pool: Annotated[int, I64]
    insurance_fund: Annotated[int, I64]
    total_deposits: Annotated[int, I64]
    total_withdrawals: Annotated[int, I64]


@wire(EVENT, EventTag.FUNDING_CHANGED)
class FundingChanged(NamedTuple):
    """A market's funding clock (absolute values): the premium samples of the running hour and the
    last settled rate (1e-8 per hour, > 0: longs paid) with the time of its hour mark (ms), and
    the hour being sampled and its last sampled minute (so the clock's ``FundingRecord`` is a fold
    of these events: the snapshot holder rebuilds it without executing)."""

    market_index: Market
    samples: Annotated[int, U32]
    premium_sum: Annotated[int, I64]
    last_rate: Annotated[int, I32]
    last_funding_ms: Annotated[int, I64]
    hour: Annotated[int, I64]
    last_minute: Annotated[int, I64]


@wire(EVENT, EventTag.TX_EXECUTED)
class TxExecuted(NamedTuple):
    """Per-tx outcome, added by the sequencer (the engine does not hash): the events that follow,
    up to the next TxExecuted, are this tx's."""

    tx_hash: Annotated[bytes, Bytes40]
    tx_type: Annotated[int, U8]
    account_index: Account
    api_key_index: Annotated[int, U8]
    nonce: Annotated[int, I64]
    code: Annotated[int, U32]


@wire(EVENT, EventTag.CONDITIONAL_ORDER_UPDATED)
class ConditionalOrderUpdated(NamedTuple):
    """The full state of an order with a condition (engine ``_triggers``): a stop-loss /
    take-profit waiting for the mark, a grouped child waiting for its entry, a running TWAP, a
    grouped entry (for its links), or one of them as it fires (``trigger_status`` READY). While
    such an order is on the book, ``OrderUpdated`` carries its fills as for any order (its type
    there is the one it executes as: market or limit; a TWAP's slices are market orders); this
    event carries what ``OrderUpdated`` does not. ``status`` is PENDING while it waits, ACTIVE
    while a TWAP runs or an entry rests, IN_PROGRESS as it fires (then ``OrderUpdated``), or the
    final status it ended with without firing (cancelled, expired, ``CANCELED_OCO``, ...).
    ``base_amount`` 0: the position's size when it fires; ``remaining_base_amount``: what a
    TWAP still has to fill. Order indexes of links are 0 for none. Absolute, like every event."""

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
    #: when it fired (ms; 0: not yet)
    trigger_time: Annotated[int, I64]
    #: a grouped child's entry, a TWAP slice's TWAP
    parent_order_index: Annotated[OrderIndex, U64]
    #: an entry's children (armed by its first fill)
    to_trigger_order_index_0: Annotated[OrderIndex, U64]
    to_trigger_order_index_1: Annotated[OrderIndex, U64]
    #: an OCO order's sibling (cancelled when this one fires or is cancelled)
    to_cancel_order_index_0: Annotated[OrderIndex, U64]
    #: when it was placed (ms): a TWAP's schedule starts here
    created_at: Annotated[int, I64]
    #: a TWAP's next slice (ms; 0 otherwise)
    next_slice_at: Annotated[int, I64]
    #: a TWAP's latest slice order (0: none yet)
    slice_order_index: Annotated[OrderIndex, U64]


Event = (
    LevelChanged
    | OrderUpdated
    | TradeExecuted
    | BalanceChanged
    | PositionChanged
    | NonceUpdated
    | ApiKeyChanged
    | MarketChanged
    | MarketStatsChanged
    | PositionLiquidated
    | PositionDeleveraged
    | ExchangeBalancesChanged
    | TxExecuted
    | FundingChanged
    | L1AddressSet
    | SubAccountCreated
    | ConditionalOrderUpdated
)
