"""What the replica knows: caches built from a snapshot and advanced by the block stream.

Pure and synchronous (no asyncio, no Ray, no I/O): the service feeds blocks in, the app and the
fan-out read. Imports run one way: ``dryrun -> state -> history -> candles, volumes``;
``state -> ledger``; ``dryrun, state -> margin``; every module names the shared rows from ``rows``.

==============  =================================================================================
``state``       ``ReplicaState``: books, accounts, keys, trades, pending nonces; ``apply_block``
``dryrun``      ``dry_run``: the code the sequencer would most likely answer a tx, from the caches
``_cacheloop``  ``apply_block``'s per-tx events in one C loop (optional; the Python loop else)
``rows``        the rows the caches hand out: ``TradeRow``, ``TxRecord``, ``BookDelta``, ``Applied``
``history``     txs per block, tx bodies sent through this replica, funding settlements
``candles``     OHLCV per market and resolution from the trade stream
``volumes``     per-account trade counts and volumes over Lighter's windows
``ledger``      per-account history for the authenticated reads
``margin``      an account's equity, margin requirements (cross and isolated) and liquidation prices
==============  =================================================================================
"""

from .candles import (
    MAX_ANSWER,
    RESOLUTIONS,
    Candle,
    Candles,
    candle_channel,
    candle_json,
    parse_candle_channel,
)
from .dryrun import MAX_PENDING_PER_KEY, dry_run, explain
from .history import Funding, History, Settlement, sequence_index
from .ledger import DoneOrder, Flow, FundingPayment, Ledger, LedgerCaps, Liquidation, PnlBucket
from .margin import (
    MarginSummary,
    equity_and_requirement,
    liquidation_price,
    liquidation_prices,
    margin_summary,
)
from .rows import Applied, BookDelta, Levels, TradeRow, TxRecord
from .state import (
    NATIVE_LOOPS,
    AccountCache,
    BookSnapshot,
    GapError,
    LevelOrders,
    MarketStats,
    ReplicaState,
)
from .volumes import AccountVolumes, Volumes

__all__ = [
    "MAX_ANSWER",
    "MAX_PENDING_PER_KEY",
    "NATIVE_LOOPS",
    "RESOLUTIONS",
    "AccountCache",
    "AccountVolumes",
    "Applied",
    "BookDelta",
    "BookSnapshot",
    "Candle",
    "Candles",
    "DoneOrder",
    "Flow",
    "Funding",
    "FundingPayment",
    "GapError",
    "History",
    "Ledger",
    "LedgerCaps",
    "LevelOrders",
    "Levels",
    "Liquidation",
    "MarginSummary",
    "MarketStats",
    "PnlBucket",
    "ReplicaState",
    "Settlement",
    "TradeRow",
    "TxRecord",
    "Volumes",
    "candle_channel",
    "candle_json",
    "dry_run",
    "equity_and_requirement",
    "explain",
    "liquidation_price",
    "liquidation_prices",
    "margin_summary",
    "parse_candle_channel",
    "sequence_index",
]
