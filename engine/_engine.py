"""The deterministic exchange state machine: ``Engine.execute(cmd, now_ms, out) -> ResultCode``.

Semantics (all integers: price ticks, size lots, micro-USDC; fractions in bps, fees in ppm):

- Time is the ``now_ms`` argument only. Same commands with the same ``now_ms`` -> same state and
  same events. Iteration that could depend on history (dict order) is sorted where it matters.
- ``execute`` never raises for bad field values: they yield a ``ResultCode``. An exception is a bug.
- User transactions pass four gates, in order: account exists (ACCOUNT_NOT_FOUND), API key exists
  (API_KEY_NOT_FOUND), ``nonce == last + 1`` (INVALID_NONCE; a new key's last nonce is -1, so its
  first tx uses nonce 0; with Lighter's SkipNonce attribute any ``last < nonce < 2^47 - 1``,
  ``rules.accepted_nonce``), ``expired_at >= now_ms`` (TX_EXPIRED). Failing a gate changes
  nothing and emits nothing. Passing them consumes the nonce (``NonceUpdated``) even if the tx
  then fails.
- Notional in micro-USDC is ``price * size * mult`` with ``mult = 10**(6 - pd - sd)``.
- Positions keep ``size`` (signed lots) and ``entry_quote`` (signed cost basis, long > 0). Reducing
  removes the proportional (truncated) part of the basis and credits
  ``realized = proceeds - removed`` to collateral, so
  ``sum(collateral + allocated - entry_quote) + fee_pool + insurance_fund == deposits -
  withdrawals`` exactly (``allocated``: the collateral of isolated positions, below).
- Margin (cross): ``equity = collateral + sum(size*mark*mult - entry_quote)``. The initial-margin
  requirement (IMR) uses each position's worst case including resting non-reduce-only orders,
  ``max(|size + bids|, |size - asks|) * mark * mult * imf / 1e4``. An order that raises that worst
  case needs ``equity - adverse - fee >= IMR`` after it, where ``adverse`` is the loss of filling it
  at its limit price (market orders: the opposite best price) against the mark, and ``fee`` its
  taker fee. Maintenance (MMR) uses ``|size|`` and the market's maintenance fraction.
  Cost: each account caches its three sums (``_orders.refresh``); fills and order changes update the
  cache in O(1); a mark move invalidates it (epoch), and the next use recomputes it in O(markets
  the account holds).
- Conditional orders (``_triggers``): stop-loss / take-profit (market and limit) waiting for the
  mark, TWAP, grouped orders (CreateGroupedOrders: OTO, OCO, OTOCO). What is due at ``now_ms``
  (TWAP slices, expiry of waiting orders) runs at the start of any command
  (``ExchangeState.cond_due``: one comparison); what the order path leaves (triggers armed
  beyond their mark, position-tied orders of closed positions) at its end, before the
  maintenance checks of the traders.
- Isolated margin (``Position.margin_mode`` 1, set by UpdateLeverage while the position is flat
  without orders): the position has its own collateral (``allocated``), out of the cross sums
  above but for what its resting orders would add; a fill's PnL and fee are its own; opening
  lots take their initial margin at the mark (plus the fill's loss against the mark) from the
  cross collateral, a reduction gives back its share, a close all of it (a deficit to the
  insurance fund); UpdateMargin (29) moves more in or out (out down to its initial margin); it
  is liquidated when ``(allocated + upnl) * 1e4 < |size| * mark * mult * mmf``, on its own,
  and pays funding from its collateral (``_orders.isolated_fill``, ``_liquidation``).
- Orders: Limit (IOC, GoodTillTime, PostOnly) and Market (IOC only; ``price`` is the worst
  average fill price, Lighter's slippage limit: fills go on while their running average stays
  within it). Price-time priority, fills at the maker's price. Self-trade prevention follows the
  taker's ``L2TxAttributes`` (6: ExpireMaker, the default, cancels the resting order and matching
  goes on; ExpireTaker ends the taker; CancelBoth both; Reduce shrinks both by the overlap, no
  trade; 7: the same account, or any account under the same master, ``Account.master_index``);
  what self-trade prevention cancels ends CANCELED_SELF_TRADE.
  PostOnly that would cross is cancelled (status CANCELED_POST_ONLY, code POST_ONLY_WOULD_CROSS).
  A limit order is no more aggressive than the band around the mark (a buy at most ``mark * (1 +
  max_deviation / 1e4)``, a sell at least ``mark * (1 - max_deviation / 1e4)``, else
  FAT_FINGER_PRICE; passive prices are not bounded); a market order's price has no band.
  IOC remainders end CANCELED; market-order remainders
  CANCELED_TOO_MUCH_SLIPPAGE (book not empty) or CANCELED_NOT_ENOUGH_LIQUIDITY (empty).
- ``order_expiry``: 0 or -1 (Lighter's nil) mean the default, ``now_ms + 28 days``; otherwise an
  absolute ms time that must be >= now_ms. A resting order is live while ``now_ms <= expiry``.
  Expired orders are removed (CANCELED_EXPIRED) at the start of any command touching the market.
- Reduce-only: rejected (REDUCE_ONLY_INCREASES_POSITION) when the position is flat or on the same
  side; otherwise accepted and *clipped at fill time* to the current position (as Lighter does), so
  it never increases or flips it (a resting reduce-only order that can no longer reduce is
  cancelled, CANCELED_REDUCE_ONLY). Reduce-only orders do not count as margin exposure.
- Client order index 0 means "none"; non-zero ones are unique among an account's open orders.
- ModifyOrder: ``base_amount`` is the new total size. At or below the filled amount the order is
  cancelled. Same price and no size increase keeps time priority; otherwise the order is taken out
  and re-entered (new priority; it may trade, PostOnly rules apply, the tx's self-trade modes).
  With an order version (``L2TxAttributes`` 8) it applies only when that is above the order's
  version (STALE_ORDER_VERSION, the order untouched), which then becomes the order's; a modify
  without one leaves the version as it is (new orders: 0).
- CancelAllOrders: ``time_in_force`` 0 only (others UNSUPPORTED_TX_TYPE, nonce consumed); with a
  market (``L2TxAttributes`` 5) only the account's orders in that market.
- UpdateLeverage: cross margin only (isolated -> UNSUPPORTED_TX_TYPE); ``imf`` in
  ``[market min imf, 10_000]``; raising it must keep the IMR met.
- Transfer / Withdraw: ``amount <= collateral`` (INSUFFICIENT_BALANCE) and the IMR met afterwards
  (NOT_ENOUGH_MARGIN); the destination of a transfer must exist. A deposit or transfer that
  would take an account's collateral, or a deposit the exchange's total deposits, past
  ``2**63 - 1`` (their i64 event fields) is INVALID_AMOUNT.
- Liquidation (LiquidatePosition 26, engine-generated after SetMarkPrice, ApplyFunding,
  UpdateMarket and fills): an account with ``equity < MMR`` has all resting orders cancelled
  (CANCELED_LIQUIDATION), then each position (by market index) is closed by an internal
  reduce-only market order bounded by the fat-finger band around the mark; its fee is the
  market's liquidation fee (ppm of notional) and goes to the insurance fund. What the book cannot
  absorb is deleveraged (Deleverage 23) against opposite positions ranked by unrealized PnL (desc,
  ties by account index) at the account's bankruptcy price, no fees. Collateral left negative is
  covered by the insurance fund, which is a signed ledger (it may go negative). Liquidation is
  full, not partial.
  Cost: a mark move checks only holders whose liquidation trigger it crossed
  (``_liquidation.arm``) plus the holders of that market that traded since they were last armed
  (``Market.unarmed``: the walk is over those accounts only, not over every unarmed account);
  fills check the traders exactly, in O(1).
- Speed: ~95% of commands are CreateOrder/CancelOrder/ModifyOrder, dispatched first by an
  identity test; hot paths keep locals and inline their helpers. ``make`` compiles the engine
  with mypyc (``setup.py``); the pure-Python modules are the reference and the fallback, and both
  produce the same events and state hash. What the compiled build rewards, and the hot path
  therefore does: module constants and heapq functions are ``Final`` names (C statics, not
  globals-dict lookups); order commands are unpacked through plain tuple types
  (``_orders.CreateOrderT``, ...: one check, direct reads, instead of iterating the interpreted
  codecs NamedTuple); the parts' functions, the state's methods and ``out.<event>`` are called
  directly (native calls: a bound-method local would be a generic Python call); int products
  keep non-negative operands below 2**30 where the value allows, and the wider ones (notional *
  fee, equity * BPS, margin sums) go through ``rules.product``, an i64 multiply within bounds
  (mypyc boxes anything else through ``PyNumber_Multiply``); ids used as dict keys are boxed
  once (``Account.ref``, ``Order.ref``, ``Level.key``); events are not objects but block bytes
  (``_deltas``: each field one native write, no int object, no tuple). Per-command queues
  (touched objects, traders to check) are chains through the objects, not lists; accounts
  (below 2**20), their API keys and the markets are also kept by position in lists, a resting
  order points at its position, and an account's orders are a linked list (its client indexes
  a dict only past 8 orders). What remains per command is CPython object work on the book: the
  orders and levels themselves and their int-keyed dicts (orders by index, levels by price), as
  in the bare book.
- Funding: ``size * mark * mult * rate / 1e8``; payers round up, receivers down; the residue goes
  to the insurance fund. ``ApplyFunding`` charges a given rate; ``FundingTick`` runs a market's
  funding clock (``_funding``: premium sampled each minute, the hour's rate charged on the hour).
- Events: LevelChanged once per touched level per command with its final size, OrderUpdated per
  order state change, TradeExecuted per fill, BalanceChanged / PositionChanged once per touched
  account / position per command (final values), MarketStatsChanged once per touched market,
  ExchangeBalancesChanged when the fee pool, the insurance fund or the deposit/withdrawal totals
  moved, NonceUpdated for every
  consumed nonce and for a new key (nonce -1), ApiKeyChanged, MarketChanged. A new account (Deposit
  or RegisterApiKey) shows up as BalanceChanged. A rejected tx changes nothing but its nonce
  (and the orders it expired), so the events alone rebuild the full state (the snapshot holder
  does; OrderUpdated carries each order's ``priority`` for that).

Where each part lives (a command's path, hot first):

- ``_engine``: this contract, ``Engine`` (dispatch, the read accessors, the snapshot API); it
  owns the ``ExchangeState`` and hands it to the parts, which are functions over it;
- ``_orders``: the order path (gates, checks, matching, fills, positions, the margin cache);
- ``_triggers`` (conditional orders placed, fired, sliced) over ``_pending`` (their
  bookkeeping and the order path's hooks);
- cold paths: ``_accounts`` (money, leverage, keys), ``_markets`` (markets, marks, funding),
  ``_liquidation`` (triggers, liquidation, deleveraging), ``_funding`` (the funding clock),
  ``_snapshot`` (records, state hash), ``_validate`` (``validate_internal_state``);
- ``_state``: ``ExchangeState``, the data and the end-of-command events (``flush``);
  ``_model``: the objects; ``_deltas``: the events as block bytes;
- ``rules``: the pure order and margin rules, shared with the replica's dry-run; ``codes``: the
  result codes and order values as ints (from ``raydex.codecs``).

Each imports only modules further down this order, so they form no circle: ``_engine`` <-
``_funding``, ``_snapshot``, ``_validate`` <- ``_accounts``, ``_markets`` <- ``_triggers`` <-
``_liquidation`` <- ``_orders`` <- ``_pending`` <- ``_state`` <- ``_deltas`` <- ``_model`` <-
``rules`` <- ``codes`` (``_funding`` and ``_snapshot`` use ``_markets``; nothing imports
upwards, in a function or for typing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, NamedTuple

from raydex.codecs import (
    ApplyFunding,
    CancelAllOrders,
    CancelOrder,
    ChangePubKey,
    ConditionalOrderRecord,
    CreateGroupedOrders,
    CreateMarket,
    CreateOrder,
    CreateSubAccount,
    Deposit,
    FundingTick,
    L1Deposit,
    MarketRecord,
    ModifyOrder,
    OrderRecord,
    PositionRecord,
    RegisterApiKey,
    SetMarkPrice,
    TimeTick,
    Transfer,
    UpdateLeverage,
    UpdateMargin,
    UpdateMarket,
    Withdraw,
    decode_body,
)

from . import _accounts, _markets, _snapshot
from ._deltas import Deltas
from ._funding import tick as funding_tick
from ._liquidation import check_traded
from ._orders import (
    CONDITIONAL,
    cancel_all,
    cancel_order,
    create_order,
    equity_imr,
    modify_order,
)
from ._pending import cond_fields
from ._snapshot import Record, records_hash
from ._state import BPS, DEFAULT_ORDER_LIFETIME_MS, NO_DUE, ExchangeState
from ._triggers import create_conditional, create_grouped, run_due, settle, time_tick
from ._validate import InvariantViolation, validate
from .codes import UNSUPPORTED_TX_TYPE
from .rules import exposure

__all__ = [
    "DEFAULT_ORDER_LIFETIME_MS",
    "Engine",
    "InvariantViolation",
    "Result",
    "exposure",
    "records_hash",
]


# The order commands' types as Final names: compiled, a name imported from the (interpreted)
# codecs is a globals-dict lookup per use, and ``execute`` tests up to three per command.
CREATE_ORDER: Final = CreateOrder
CANCEL_ORDER: Final = CancelOrder
MODIFY_ORDER: Final = ModifyOrder
# The most frequent of the others, called directly too: through ``_HANDLERS`` a call is a
# Python-level call of the compiled function (argument parsing, ``now_ms`` boxed): ~0.6% of
# the engine's instructions on the bench stream (callgrind).
DEPOSIT: Final = Deposit
TIME_TICK: Final = TimeTick
TRANSFER: Final = Transfer
CREATE_GROUPED: Final = CreateGroupedOrders
SET_MARK_PRICE: Final = SetMarkPrice
CANCEL_ALL: Final = CancelAllOrders
WITHDRAW: Final = Withdraw


class Result(NamedTuple):
    code: int
    events: tuple[Any, ...]


class Engine:
    """The exchange state machine. See the module docstring for the semantics.

    Public, read-only: ``fee_pool``, ``insurance_fund``, ``total_deposits``,
    ``total_withdrawals`` (micro-USDC) and ``last_order_index``; everything else is reached
    through the methods; the read accessors (``next_nonce``, ``book_levels``, ...) copy nothing
    large and never mutate state. ``state`` is the exchange's data the engine's parts operate
    on (``_state.ExchangeState``): tests and tools may read it; only commands change it.
    Not thread-safe: one caller (the sequencer) drives it.
    """

    def __init__(self) -> None:
        self.state = ExchangeState()
        #: ``state.deltas``: the events of the commands run, as block bytes, until taken.
        self.deltas = self.state.deltas

    @property
    def fee_pool(self) -> int:
        return self.state.fee_pool

    @property
    def insurance_fund(self) -> int:
        return self.state.insurance_fund

    @property
    def total_deposits(self) -> int:
        return self.state.total_deposits

    @property
    def total_withdrawals(self) -> int:
        return self.state.total_withdrawals

    @property
    def last_order_index(self) -> int:
        """The index of the last order a CreateOrder made (its reply to the client)."""
        return self.state.last_order_index

    # ---- public API -----------------------------------------------------------------------------

    def execute_into(self, cmd: Any, now_ms: int) -> int:
        """Execute one command; its events are appended to :attr:`deltas` as block bytes (the
        sequencer's path: :meth:`take_deltas` hands over a block's body). Returns its
        ResultCode value."""
        st = self.state
        out = st.deltas
        if st.cond_due <= now_ms:
            run_due(st, now_ms, out)
        t = type(cmd)
        # The three order commands (~95% of traffic) are called directly, then the frequent
        # others (above), the rest by type.
        if t is CREATE_ORDER:
            code = create_order(st, cmd, now_ms, out)
            if code == CONDITIONAL:
                code = create_conditional(st, cmd, now_ms, out)
        elif t is CANCEL_ORDER:
            code = cancel_order(st, cmd, now_ms, out)
        elif t is MODIFY_ORDER:
            code = modify_order(st, cmd, now_ms, out)
        elif t is DEPOSIT:
            code = _accounts.deposit(st, cmd, now_ms, out)
        elif t is TIME_TICK:
            code = time_tick(st, cmd, now_ms, out)
        elif t is TRANSFER:
            code = _accounts.transfer(st, cmd, now_ms, out)
        elif t is CREATE_GROUPED:
            code = create_grouped(st, cmd, now_ms, out)
        elif t is SET_MARK_PRICE:
            code = _markets.set_mark_price(st, cmd, now_ms, out)
        elif t is CANCEL_ALL:
            code = cancel_all(st, cmd, now_ms, out)
        elif t is WITHDRAW:
            code = _accounts.withdraw(st, cmd, now_ms, out)
        else:
            handler = _HANDLERS.get(t)
            if handler is None:
                return UNSUPPORTED_TX_TYPE
            code = handler(st, cmd, now_ms, out)
        if st.cond_after:
            settle(st, now_ms, out)
        elif st.traded_head is not None:
            check_traded(st, now_ms, out)
            if st.cond_after:
                settle(st, now_ms, out)
        st.flush(out)
        return code

    def execute(self, cmd: Any, now_ms: int, out: list[Any]) -> int:
        """Execute one command; append its events to ``out`` as NamedTuples (decoded from what
        :meth:`execute_into` writes, which is then dropped from :attr:`deltas`); return its
        ResultCode value."""
        d = self.deltas
        start = d.size()
        count = d.count
        code = self.execute_into(cmd, now_ms)
        _move_events(d, start, count, out)
        return code

    def take_deltas(self) -> tuple[int, bytes]:
        """``(count, body)``: the events :meth:`execute_into` wrote since the last call, laid out
        as a block body (``codecs.encode_block_body`` adds the header)."""
        return self.deltas.take()

    def apply(self, cmd: Any, now_ms: int) -> Result:
        """Convenience wrapper around :meth:`execute` returning ``Result(code, events)``."""
        out: list[Any] = []
        code = self.execute(cmd, now_ms, out)
        return Result(code, tuple(out))

    # ---- reads ----------------------------------------------------------------------------------

    def next_nonce(self, account: int, api_key: int) -> int | None:
        acct = self.state.accounts.get(account)
        key = acct.keys.get(api_key) if acct is not None else None
        return None if key is None or acct is None else acct.last_nonce(key) + 1

    def account_by_l1(self, l1_address: bytes) -> int | None:
        """The index of the account whose L1 address is ``l1_address`` (20 bytes), or None."""
        return self.state.by_l1.get(l1_address)

    def master_index(self, account: int) -> int | None:
        """``account``'s master account (its own index for a master); None for an unknown one."""
        acct = self.state.accounts.get(account)
        return None if acct is None else acct.master_index

    def l1_address(self, account: int) -> bytes | None:
        """``account``'s L1 address (20 bytes); None for an unknown account or one without."""
        acct = self.state.accounts.get(account)
        return acct.l1_address or None if acct is not None else None

    def pub_key(self, account: int, api_key: int) -> bytes | None:
        acct = self.state.accounts.get(account)
        key = acct.keys.get(api_key) if acct is not None else None
        return None if key is None else key.pub_key

    def account_collateral(self, account: int) -> int | None:
        acct = self.state.accounts.get(account)
        return None if acct is None else acct.collateral

    def market(self, market_index: int) -> MarketRecord | None:
        m = self.state.markets.get(market_index)
        return None if m is None else _snapshot.market_record(m)

    def book_levels(self, market: int, is_ask: int, depth: int) -> list[tuple[int, int]]:
        """Up to ``depth`` levels of one side, best first: ``[(price, size), ...]``."""
        m = self.state.markets.get(market)
        if m is None or depth <= 0:
            return []
        return (m.asks if is_ask else m.bids).best_levels(depth)

    def available_margin(self, account: int) -> int:
        """Equity minus the initial-margin requirement (with resting orders), in micro-USDC."""
        acct = self.state.accounts.get(account)
        if acct is None:
            return 0
        equity, imr_num = equity_imr(self.state, acct)
        return equity - -(-imr_num // BPS)

    def equity(self, account: int) -> int | None:
        acct = self.state.accounts.get(account)
        return None if acct is None else equity_imr(self.state, acct)[0]

    def position(self, account: int, market: int) -> PositionRecord | None:
        acct = self.state.accounts.get(account)
        pos = acct.positions.get(market) if acct is not None else None
        return None if pos is None else _snapshot.position_record(pos)

    def open_orders(self, account: int) -> list[OrderRecord]:
        acct = self.state.accounts.get(account)
        if acct is None:
            return []
        return [_snapshot.order_record(o) for o in acct.resting_orders()]

    def conditional_orders(self, account: int) -> list[ConditionalOrderRecord]:
        """``account``'s live conditional orders (waiting, running, or on the book with their
        condition), by order index."""
        conds = self.state.conds
        return [
            ConditionalOrderRecord._make(cond_fields(conds[i]))
            for i in sorted(conds)
            if conds[i].account.index == account
        ]

    def cond_due_ms(self) -> int | None:
        """The block time at which a waiting order expires or a TWAP slices next (None:
        nothing waits for time): the oracle sends a ``TimeTick`` once it has come."""
        due = self.state.cond_due
        return None if due == NO_DUE else due

    # ---- snapshots, hash, validation ------------------------------------------------------------

    def records(self) -> Iterator[Record]:
        """The full state as snapshot records (see ``codecs._records``), in a canonical order."""
        return _snapshot.records(self.state)

    @classmethod
    def from_records(cls, records: Iterable[Any]) -> Engine:
        """Rebuild an engine from :meth:`records` output (rows in that order)."""
        eng = cls()
        _snapshot.load(eng.state, records)
        return eng

    def state_hash(self) -> bytes:
        """sha256 over the canonical records: equal for equal state, whatever the history."""
        return _snapshot.state_hash(self.state)

    def validate_internal_state(self) -> None:
        """Check every invariant; raise :class:`InvariantViolation` on the first broken one."""
        validate(self.state)


def _move_events(d: Deltas, start: int, count: int, out: list[Any]) -> None:
    """Append the events ``d`` got past position ``start`` (it held ``count`` then) to ``out``
    as NamedTuples, and drop them from ``d``: what an open block held is left as it was."""
    if d.count != count:
        out.extend(decode_body(d.since(start), d.count - count))
        d.rewind(start, count)


#: The cold commands' handlers, by command type: ``handler(state, cmd, now_ms, out) -> code``.
_HANDLERS: Final[dict[type, Callable[[ExchangeState, Any, int, Deltas], int]]] = {
    CancelAllOrders: cancel_all,
    CreateGroupedOrders: create_grouped,
    TimeTick: time_tick,
    Transfer: _accounts.transfer,
    Withdraw: _accounts.withdraw,
    UpdateLeverage: _accounts.update_leverage,
    UpdateMargin: _accounts.update_margin,
    ChangePubKey: _accounts.change_pub_key,
    CreateSubAccount: _accounts.create_sub_account,
    Deposit: _accounts.deposit,
    L1Deposit: _accounts.l1_deposit,
    RegisterApiKey: _accounts.register_api_key,
    CreateMarket: _markets.create_market,
    UpdateMarket: _markets.update_market,
    SetMarkPrice: _markets.set_mark_price,
    ApplyFunding: _markets.apply_funding,
    FundingTick: funding_tick,
}
