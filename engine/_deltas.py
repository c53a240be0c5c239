"""``Deltas``: the engine's events written straight into block bytes, as the sequencer ships them.

Every event the engine emits is appended here in the block body's layout (``codecs._block``: a
tag byte, then the event's little-endian fields, ``codecs._events`` per tag), so a block's body
is these bytes as they are and ``count`` its event count. Nothing is built per event: no
NamedTuple, no int object per field. Compiled (mypyc), each field is one ``librt.strings`` write
of a native int into a growing buffer. ``Engine.execute`` turns a command's bytes back into
NamedTuples for callers that want them (tests, tools); the sequencer takes the bytes
(``Engine.execute_into`` and :meth:`Deltas.take`).

The hot events (a command's levels, orders, trades, balances, positions, nonces, market stats,
exchange balances, conditional orders, and the sequencer's ``TxExecuted``) have a writer each,
field by field against their layout; tests/unit/test_engine_deltas.py checks each against the
codec's own ``struct`` encoding. The cold ones (market and key changes, funding clocks,
liquidations) are built as NamedTuples and packed by the codec (:meth:`Deltas.event`).

Field widths: ``B`` is one byte (``append``), ``H`` / ``I`` unsigned 16 / 32 bits written as
the signed integer with the same bits, ``Q`` / ``q`` 64 bits. A value outside its field raises
(OverflowError / TypeError): the engine keeps every value in range, so that is a bug, as a
``struct.error`` from the codec was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from librt.strings import BytesWriter, write_i16_le, write_i32_le, write_i64_le

from raydex.codecs import encode_event

if TYPE_CHECKING:
    from ._model import Cond, Level, Order, Position

# Tags of the hot events (``codecs._events``; the test checks them against the registry).
LEVEL_CHANGED: Final = 1
ORDER_UPDATED: Final = 2
TRADE_EXECUTED: Final = 3
BALANCE_CHANGED: Final = 4
POSITION_CHANGED: Final = 5
NONCE_UPDATED: Final = 6
MARKET_STATS_CHANGED: Final = 9
EXCHANGE_BALANCES_CHANGED: Final = 12
TX_EXECUTED: Final = 13
CONDITIONAL_ORDER_UPDATED: Final = 17
#: ``TxExecuted``'s ``code`` field: its last 4 bytes (of 63 with the tag).
TX_CODE_OFFSET: Final = 59


def _u32(w: BytesWriter, v: int) -> None:
    write_i32_le(w, v - 4_294_967_296 if v >= 2_147_483_648 else v)


def _u16(w: BytesWriter, v: int) -> None:
    write_i16_le(w, v - 65_536 if v >= 32_768 else v)


class Deltas:
    """A growing block body: the events appended since the last :meth:`take`."""

    def __init__(self) -> None:
        self.w = BytesWriter()
        #: events in ``w``
        self.count = 0

    # ---- the buffer -----------------------------------------------------------------------------

    def size(self) -> int:
        """Bytes written so far (a position for :meth:`since` / :meth:`rewind`)."""
        return len(self.w)

    def since(self, start: int) -> bytes:
        """The bytes written from position ``start`` on."""
        return self.w.getvalue()[start:]

    def rewind(self, start: int, count: int) -> None:
        """Drop what was written after position ``start``, back to ``count`` events."""
        self.w.truncate(start)
        self.count = count

    def take(self) -> tuple[int, bytes]:
        """``(count, body)`` of everything written, and start empty (keeping the buffer's
        capacity: a fresh writer would regrow it, copying, block after block)."""
        body = self.w.getvalue()
        count = self.count
        self.w.truncate(0)
        self.count = 0
        return count, body

    # ---- cold events ----------------------------------------------------------------------------

    def event(self, ev: Any) -> None:
        """Append one event NamedTuple, packed by the codec (the cold events)."""
        self.w.write(encode_event(ev))
        self.count += 1

    # ---- hot events, field by field ----------------------------------------------------------

    def level_changed(self, lvl: Level) -> None:
        """``LevelChanged`` of ``lvl`` (read from it, as ``order_updated`` does)."""
        w = self.w
        w.append(LEVEL_CHANGED)
        w.append(lvl.market_index)
        w.append(lvl.is_ask)
        _u32(w, lvl.price)
        write_i64_le(w, lvl.size)
        self.count += 1

    def order_updated(self, o: Order, status: int) -> None:
        """``OrderUpdated`` of order ``o`` with ``status``: read from the order here (cheaper
        than passing its 14 fields as arguments)."""
        w = self.w
        w.append(ORDER_UPDATED)
        w.append(o.market.index)
        write_i64_le(w, o.index)
        write_i64_le(w, o.account.index)
        write_i64_le(w, o.client_index)
        w.append(o.is_ask)
        _u32(w, o.price)
        write_i64_le(w, o.initial)
        write_i64_le(w, o.remaining)
        write_i64_le(w, o.expiry)
        w.append(o.order_type)
        w.append(o.tif)
        w.append(o.reduce_only)
        w.append(status)
        write_i64_le(w, o.priority)
        write_i64_le(w, o.version)
        self.count += 1

    def cond_updated(self, c: Cond) -> None:
        """``ConditionalOrderUpdated`` of conditional order ``c`` (read from it, as
        ``order_updated`` does): its full state, links included."""
        w = self.w
        w.append(CONDITIONAL_ORDER_UPDATED)
        w.append(c.market.index)
        write_i64_le(w, c.index)
        write_i64_le(w, c.account.index)
        write_i64_le(w, c.client_index)
        w.append(c.is_ask)
        _u32(w, c.price)
        write_i64_le(w, c.size)
        write_i64_le(w, c.remaining)
        write_i64_le(w, c.expiry)
        w.append(c.order_type)
        w.append(c.tif)
        w.append(c.reduce_only)
        w.append(c.status)
        w.append(c.trigger_status)
        _u32(w, c.trigger_price)
        write_i64_le(w, c.trigger_time)
        write_i64_le(w, c.parent_index)
        kid0, kid1 = c.kid_indexes
        write_i64_le(w, kid0)
        write_i64_le(w, kid1)
        write_i64_le(w, c.sibling_index)
        write_i64_le(w, c.created_at)
        write_i64_le(w, c.next_slice)
        write_i64_le(w, c.slice_index)
        self.count += 1

    def trade_executed(
        self,
        market: int,
        trade_id: int,
        price: int,
        size: int,
        taker: int,
        maker: int,
        taker_order: int,
        maker_order: int,
        taker_is_ask: int,
        taker_fee: int,
        maker_fee: int,
    ) -> None:
        w = self.w
        w.append(TRADE_EXECUTED)
        w.append(market)
        write_i64_le(w, trade_id)
        _u32(w, price)
        write_i64_le(w, size)
        write_i64_le(w, taker)
        write_i64_le(w, maker)
        write_i64_le(w, taker_order)
        write_i64_le(w, maker_order)
        w.append(taker_is_ask)
        write_i64_le(w, taker_fee)
        write_i64_le(w, maker_fee)
        self.count += 1

    def balance_changed(self, account: int, collateral: int) -> None:
        w = self.w
        w.append(BALANCE_CHANGED)
        write_i64_le(w, account)
        write_i64_le(w, collateral)
        self.count += 1

    def position_changed(self, p: Position) -> None:
        """``PositionChanged`` of ``p`` (read from it, as ``order_updated`` does)."""
        w = self.w
        w.append(POSITION_CHANGED)
        write_i64_le(w, p.account.index)
        w.append(p.market.index)
        write_i64_le(w, p.size)
        write_i64_le(w, p.entry_quote)
        write_i64_le(w, p.realized_pnl)
        write_i64_le(w, p.funding_paid)
        _u16(w, p.imf)
        w.append(p.margin_mode)
        write_i64_le(w, p.allocated)
        self.count += 1

    def nonce_updated(self, account: int, api_key: int, nonce: int) -> None:
        w = self.w
        w.append(NONCE_UPDATED)
        write_i64_le(w, account)
        w.append(api_key)
        write_i64_le(w, nonce)
        self.count += 1

    def market_stats_changed(
        self, market: int, mark: int, last_trade_price: int, open_interest: int
    ) -> None:
        w = self.w
        w.append(MARKET_STATS_CHANGED)
        w.append(market)
        _u32(w, mark)
        _u32(w, last_trade_price)
        write_i64_le(w, open_interest)
        self.count += 1

    def exchange_balances_changed(
        self, fee_pool: int, insurance_fund: int, deposits: int, withdrawals: int
    ) -> None:
        w = self.w
        w.append(EXCHANGE_BALANCES_CHANGED)
        write_i64_le(w, fee_pool)
        write_i64_le(w, insurance_fund)
        write_i64_le(w, deposits)
        write_i64_le(w, withdrawals)
        self.count += 1

    def tx_executed(
        self, tx_hash: bytes, tx_type: int, account: int, api_key: int, nonce: int, code: int
    ) -> int:
        """Append the sequencer's ``TxExecuted`` (``tx_hash``: 40 bytes); returns the position
        of its ``code`` field, for :meth:`set_code` once the tx has run."""
        if len(tx_hash) != 40:
            raise ValueError("TxExecuted.tx_hash needs exactly 40 bytes")
        w = self.w
        at = len(w) + TX_CODE_OFFSET
        w.append(TX_EXECUTED)
        w.write(tx_hash)
        w.append(tx_type)
        write_i64_le(w, account)
        w.append(api_key)
        write_i64_le(w, nonce)
        _u32(w, code)
        self.count += 1
        return at

    def set_code(self, at: int, code: int) -> None:
        """Overwrite the ``code`` of the ``TxExecuted`` whose code field is at ``at``."""
        w = self.w
        w[at] = code & 0xFF
        w[at + 1] = (code >> 8) & 0xFF
        w[at + 2] = (code >> 16) & 0xFF
        w[at + 3] = (code >> 24) & 0xFF
