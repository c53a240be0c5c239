"""The engine's state and its per-command bookkeeping: ``EngineState``.

``EngineState`` holds every map and counter of the exchange (markets, accounts, resting orders,
the fee pool and insurance fund, id counters) plus the per-command scratch that turns state
changes into events: objects touched by a command are queued once (their ``dirty`` flag) and
:meth:`EngineState._flush` emits one event per queued object with its *final* values, in a fixed
order (levels, positions, balances, market stats, exchange balances), then clears the queues.
Events are written into ``deltas`` as block bytes (``_deltas``), not built as objects.

The order path (``_orders.OrderPath``) and the ``Engine`` build on it; the cold paths
(``_accounts``, ``_markets``, ``_liquidation``, ``_snapshot``) are functions over it.

Also here: the limits every module shares (``Final``: a mypyc build binds them once).
"""

from __future__ import annotations

from typing import Final

from raydex import codecs as _codecs

from ._deltas import Deltas
from ._funding import FundingClock
from ._model import Account, Level, Market, Order, Position

# Final: a compiled (mypyc) build binds these once instead of looking them up per use.
_new: Final = tuple.__new__
FIRST_ORDER_INDEX: Final[int] = _codecs.FIRST_ORDER_INDEX
MAX_48: Final[int] = _codecs.MAX_48
MAX_API_KEY_INDEX: Final[int] = _codecs.MAX_API_KEY_INDEX
MAX_MARKET_INDEX: Final[int] = _codecs.MAX_MARKET_INDEX
BPS: Final[int] = _codecs.BPS
PPM: Final[int] = _codecs.PPM
FUNDING_SCALE: Final[int] = _codecs.FUNDING_RATE_SCALE
MAX_I63: Final = 2**63 - 1
#: Default lifetime of a resting order whose ``order_expiry`` is 0 or -1.
DEFAULT_ORDER_LIFETIME_MS: Final = 28 * 86_400_000
#: Open orders per account; bounds per-account work (cancel-all, liquidation).
MAX_OPEN_ORDERS_PER_ACCOUNT: Final = 10_000
#: ``Market.expiries`` holds ``(expiry << EXPIRY_SHIFT) + order_index``: one int orders exactly
#: like the pair ``(expiry, order_index)`` (order indexes are below 2**64) and compares faster.
EXPIRY_SHIFT: Final = 64
INDEX_MASK: Final = (1 << 64) - 1


def is_int(x: object) -> bool:
    """An operator command's field is an int (commands built in Python may carry anything)."""
    return type(x) is int or isinstance(x, int)


class EngineState:
    """The exchange's data and the per-command event queues. Not thread-safe."""

    def __init__(self) -> None:
        self._markets: dict[int, Market] = {}
        self._accounts: dict[int, Account] = {}
        #: L1 address (20 bytes) -> account index (accounts made by ``L1Deposit``)
        self._by_l1: dict[bytes, int] = {}
        self._orders: dict[int, Order] = {}
        self.fee_pool = 0
        self.insurance_fund = 0
        self.total_deposits = 0
        self.total_withdrawals = 0
        self._next_order_index = FIRST_ORDER_INDEX
        self._next_trade_id = 1
        self._next_priority = 1
        # Per-command scratch: objects whose events are emitted at the end of the command.
        self._dirty_levels: list[Level] = []
        self._dirty_positions: list[Position] = []
        self._dirty_accounts: list[Account] = []
        self._dirty_markets: list[Market] = []
        self._exchange_dirty = False
        #: Accounts that traded in this command (maintenance is checked after it).
        self._traded: list[Account] = []
        #: Accounts checked at the current marks whose liquidation triggers are out of date; they
        #: are checked and re-armed at the next move of a market they hold. Order is irrelevant
        #: (candidates are sorted).
        self._unarmed: dict[Account, None] = {}
        #: every market's funding clock (``_funding``): premium samples, hourly settlement
        self.funding = FundingClock()
        self._unarmed_purge_at = 1024
        #: Bumped whenever marks or margin fractions change: accounts' cached risk sums are valid
        #: only when their ``c_epoch`` equals it.
        self._epoch = 0
        #: The events of the commands run, as block bytes (``_deltas``), until taken.
        self.deltas = Deltas()
        #: The index of the last order a CreateOrder made (its reply to the client).
        self.last_order_index = 0
        #: Price * size of the fills of the liquidation order being matched (``liquidate``).
        self._liquidation_quote = 0

    # ---- queueing touched objects ---------------------------------------------------------------

    def _mark_account(self, acct: Account) -> None:
        if not acct.dirty:
            acct.dirty = True
            self._dirty_accounts.append(acct)

    def _mark_position(self, pos: Position) -> None:
        if not pos.dirty:
            pos.dirty = True
            self._dirty_positions.append(pos)

    def _mark_market(self, m: Market) -> None:
        if not m.dirty:
            m.dirty = True
            self._dirty_markets.append(m)

    # ---- end of command -------------------------------------------------------------------------

    def _flush(self, out: Deltas) -> None:
        """Emit one event per object the command touched, with its final values (written into
        ``out`` field by field: ``_deltas``)."""
        dirty = self._dirty_levels
        if dirty:
            for lvl in dirty:
                lvl.dirty = False
                out.level_changed(lvl.market_index, lvl.is_ask, lvl.price, lvl.size)
            dirty.clear()
        dirty_p = self._dirty_positions
        if dirty_p:
            for p in dirty_p:
                p.dirty = False
                out.position_changed(
                    p.account.index,
                    p.market.index,
                    p.size,
                    p.entry_quote,
                    p.realized_pnl,
                    p.funding_paid,
                    p.imf,
                    p.margin_mode,
                )
            dirty_p.clear()
        dirty_a = self._dirty_accounts
        if dirty_a:
            for a in dirty_a:
                a.dirty = False
                out.balance_changed(a.index, a.collateral)
            dirty_a.clear()
        dirty_m = self._dirty_markets
        if dirty_m:
            for m in dirty_m:
                m.dirty = False
                out.market_stats_changed(m.index, m.mark, m.last_trade_price, m.open_interest)
            dirty_m.clear()
        if self._exchange_dirty:
            self._exchange_dirty = False
            out.exchange_balances_changed(
                self.fee_pool, self.insurance_fund, self.total_deposits, self.total_withdrawals
            )
