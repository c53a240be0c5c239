"""The rows the replica's caches hand out: what ``ReplicaState.apply_block`` makes of a block.

Every row is a NamedTuple of atoms: immutable, built with ``tuple.__new__`` on the apply path
(also by ``_cacheloop.c``, which is configured with these classes), untracked by the cyclic GC,
and shared by reference between the caches, the history, the ledger and the fan-out. This module
imports nothing of the replica, so every cache module can name the rows without a circle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from raydex.codecs import TradeExecuted

__all__ = ["Applied", "BookDelta", "Levels", "TradeRow", "TxRecord"]

#: one side of a book: ``(price ticks, size lots)`` pairs, best first
Levels = tuple[tuple[int, int], ...]


class TradeRow(NamedTuple):
    """A trade as the replica serves it (market tape and account fills)."""

    trade: TradeExecuted
    tx_hash: bytes
    block_height: int
    timestamp_ms: int


class TxRecord(NamedTuple):
    """A tx's outcome as the block carried it (its ``TxExecuted``), placed in the block."""

    tx_hash: bytes
    tx_type: int
    account_index: int
    api_key_index: int
    nonce: int
    code: int
    seq: int
    #: the block height (= block seq) the tx was sequenced in, as Lighter's ``block_height``
    block_height: int
    timestamp_ms: int
    #: position of the tx inside its block
    position: int


class BookDelta(NamedTuple):
    """The levels of one market a block changed (absolute sizes, 0 = removed); ``begin_nonce``
    is the book's nonce before the block, ``nonce`` after it."""

    market_index: int
    bids: Levels
    asks: Levels
    nonce: int
    begin_nonce: int


class Applied(NamedTuple):
    """What one block changed, for the fan-out. Empty with ``duplicate=True`` for a replayed seq."""

    seq: int
    height: int
    timestamp_ns: int
    books: dict[int, BookDelta]
    trades: dict[int, list[TradeRow]]
    accounts: frozenset[int]
    txs: tuple[TxRecord, ...]
    duplicate: bool = False
    #: the block's events, by reference (the account channels walk them only when the block
    #: touched an account someone watches)
    events: Sequence[Any] = ()
