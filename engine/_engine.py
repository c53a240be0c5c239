"""The deterministic exchange state machine: ``Engine.execute(cmd, now_ms, out) -> ResultCode``.

Semantics (all integers: price ticks, size lots, micro-USDC; fractions in bps, fees in ppm):

- Time is the ``now_ms`` argument only. Same commands with the same ``now_ms`` -> same state and
  same events. Iteration that could depend on history (dict order) is sorted where it matters.
- ``execute`` never raises for bad field values: they yield a ``ResultCode``. An exception is a bug.
- User transactions pass four gates, in order: account exists (ACCOUNT_NOT_FOUND), API key exists
  (API_KEY_NOT_FOUND), ``nonce == last + 1`` (INVALID_NONCE; a new key's last nonce is -1, so its
  first tx uses nonce 0), ``expired_at >= now_ms`` (TX_EXPIRED). Failing a gate changes nothing and
  emits nothing. Passing them consumes the nonce (``NonceUpdated``) even if the tx then fails.
- Notional in micro-USDC is ``price * size * mult`` with ``mult = 10**(6 - pd - sd)``.
- Positions keep ``size`` (signed lots) and ``entry_quote`` (signed cost basis, long > 0). Reducing
  removes the proportional (truncated) part of the basis and credits
  ``realized = proceeds - removed`` to collateral, so
  ``sum(collateral - entry_quote) + fee_pool + insurance_fund == deposits - withdrawals`` exactly.
- Margin (cross): ``equity = collateral + sum(size*mark*mult - entry_quote)``. The initial-margin
  requirement (IMR) uses each position's worst case including resting non-reduce-only orders,
  ``max(|size + bids|, |size - asks|) * mark * mult * imf / 1e4``. An order that raises that worst
  case needs ``equity - adverse - fee >= IMR`` after it, where ``adverse`` is the loss of filling it
  at its limit price (market orders: the opposite best price) against the mark, and ``fee`` its
  taker fee. Maintenance (MMR) uses ``|size|`` and the market's maintenance fraction.
  Cost: each account caches its three sums (see ``_refresh``); fills and order changes update the
  cache in O(1); a mark move invalidates it (epoch), and the next use recomputes it in O(markets
  the account holds).
- Orders: Limit (IOC, GoodTillTime, PostOnly) and Market (IOC only; ``price`` is the worst price).
  Price-time priority, fills at the maker's price. Self-trade prevention is ExpireMaker: the
  resting order of the same account is cancelled (CANCELED_SELF_TRADE) and matching goes on.
  PostOnly that would cross is cancelled (status CANCELED_POST_ONLY, code POST_ONLY_WOULD_CROSS).
  Every user order is inside the fat-finger band ``|price - mark| <= mark * max_deviation / 1e4``.
  IOC remainders end CANCELED; market-order remainders CANCELED_TOO_MUCH_SLIPPAGE (book not empty)
  or CANCELED_NOT_ENOUGH_LIQUIDITY (empty).
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
  and re-entered (new priority; it may trade, PostOnly rules apply).
- CancelAllOrders: ``time_in_force`` 0 only (others UNSUPPORTED_TX_TYPE, nonce consumed).
- UpdateLeverage: cross margin only (isolated -> UNSUPPORTED_TX_TYPE); ``imf`` in
  ``[market min imf, 10_000]``; raising it must keep the IMR met.
- Transfer / Withdraw: ``amount <= collateral`` (INSUFFICIENT_BALANCE) and the IMR met afterwards
  (NOT_ENOUGH_MARGIN); the destination of a transfer must exist.
- Liquidation (LiquidatePosition 26, engine-generated after SetMarkPrice, ApplyFunding,
  UpdateMarket and fills): an account with ``equity < MMR`` has all resting orders cancelled
  (CANCELED_LIQUIDATION), then each position (by market index) is closed by an internal
  reduce-only market order bounded by the fat-finger band around the mark; its fee is the
  market's liquidation fee (ppm of notional) and goes to the insurance fund. What the book cannot
  absorb is deleveraged (Deleverage 23) against opposite positions ranked by unrealized PnL (desc,
  ties by account index) at the account's bankruptcy price, no fees. Collateral left negative is
  covered by the insurance fund, which is a signed ledger (it may go negative). Liquidation is
  full, not partial.
  Cost: a mark move checks only holders whose liquidation trigger it crossed (``_arm``) plus the
  holders of that market that traded since they were last armed (``Market.unarmed``: the walk
  is over those accounts only, not over every unarmed account); fills check the traders
  exactly, in O(1).
- Speed: ~95% of commands are CreateOrder/CancelOrder/ModifyOrder, dispatched first by an
  identity test; hot paths keep locals and inline their helpers. Module constants are ``Final``
  so a mypyc build (``RAYDEX_MYPYC=1``, see ``setup.py``) inlines them; the pure-Python module
  is the default and the reference, and both produce the same events and state hash.
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
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Iterable, Iterator
from heapq import heapify, heappop, heappush
from typing import Any, Final, NamedTuple, TypeAlias

from raydex import codecs as _codecs
from raydex.codecs import (
    AccountRecord as _AccountRecord,
)
from raydex.codecs import (
    ApiKeyChanged,
    ApiKeyRecord,
    ApplyFunding,
    BalanceChanged,
    CancelAllOrders,
    CancelOrder,
    ChangePubKey,
    CreateMarket,
    CreateOrder,
    Deposit,
    ExchangeBalancesChanged,
    ExchangeRecord,
    FundingRecord,
    FundingTick,
    LevelChanged,
    MarketChanged,
    MarketRecord,
    MarketStatsChanged,
    ModifyOrder,
    NonceUpdated,
    OrderRecord,
    OrderUpdated,
    PositionChanged,
    PositionDeleveraged,
    PositionLiquidated,
    PositionRecord,
    RegisterApiKey,
    SetMarkPrice,
    TradeExecuted,
    Transfer,
    UpdateLeverage,
    UpdateMarket,
    Withdraw,
)
from raydex.codecs.signing import PUBLIC_KEY_SIZE as _PUBLIC_KEY_SIZE
from raydex.codecs.signing import is_valid_public_key as _is_valid_public_key

from ._funding import FundingClock
from ._model import NO_EXPIRY, Account, ApiKey, Level, Market, Order, Position, Side

# Final: a compiled (mypyc) build binds these once instead of looking them up per use.
_new: Final = tuple.__new__
FIRST_ORDER_INDEX: Final[int] = _codecs.FIRST_ORDER_INDEX
MAX_48: Final[int] = _codecs.MAX_48
MAX_API_KEY_INDEX: Final[int] = _codecs.MAX_API_KEY_INDEX
MAX_MARKET_INDEX: Final[int] = _codecs.MAX_MARKET_INDEX

BPS: Final = 10_000
PPM: Final = 1_000_000
FUNDING_SCALE: Final = 100_000_000
MAX_PRICE: Final = 2**32 - 1
MAX_I63: Final = 2**63 - 1
#: Default lifetime of a resting order whose ``order_expiry`` is 0 or -1.
DEFAULT_ORDER_LIFETIME_MS: Final = 28 * 86_400_000
#: Open orders per account; bounds per-account work (cancel-all, liquidation).
MAX_OPEN_ORDERS_PER_ACCOUNT: Final = 10_000
#: ``Market.expiries`` holds ``(expiry << EXPIRY_SHIFT) + order_index``: one int orders exactly
#: like the pair ``(expiry, order_index)`` (order indexes are below 2**64) and compares faster.
EXPIRY_SHIFT: Final = 64
INDEX_MASK: Final = (1 << 64) - 1

# Result codes as plain ints (IntEnum members compare equal; plain ints are faster to return).
OK: Final = 200
INVALID_PARAM: Final = 20001
INVALID_NONCE: Final = 21104
API_KEY_NOT_FOUND: Final = 21108
INVALID_PUBLIC_KEY: Final = 21136
NOT_ACTIVE_LIMIT_ORDER: Final = 21600
INVALID_EXPIRY: Final = 21711
CLIENT_ORDER_INDEX_EXISTS: Final = 21728
REDUCE_ONLY_INCREASES_POSITION: Final = 21732
FAT_FINGER_PRICE: Final = 21733
NOT_ENOUGH_MARGIN: Final = 21739
ACCOUNT_NOT_FOUND: Final = 21800
MARKET_NOT_FOUND: Final = 21801
MARKET_EXISTS: Final = 21802
MARKET_NOT_ACTIVE: Final = 21803
INVALID_PRICE: Final = 21804
INVALID_SIZE: Final = 21805
BELOW_MIN_AMOUNT: Final = 21806
POST_ONLY_WOULD_CROSS: Final = 21807
INVALID_ORDER_TYPE: Final = 21808
INVALID_TIME_IN_FORCE: Final = 21809
TX_EXPIRED: Final = 21810
INSUFFICIENT_BALANCE: Final = 21811
INVALID_LEVERAGE: Final = 21812
INVALID_AMOUNT: Final = 21813
INVALID_CLIENT_ORDER_INDEX: Final = 21814
INVALID_MARKET_PARAMS: Final = 21815
SELF_TRANSFER: Final = 21817
INVALID_API_KEY_INDEX: Final = 21818
UNSUPPORTED_TX_TYPE: Final = 21820
TOO_MANY_ORDERS: Final = 21821

# Order statuses / enums as ints.
ACTIVE_LIMIT: Final = 2
FILLED: Final = 3
CANCELED: Final = 4
CANCELED_POST_ONLY: Final = 5
CANCELED_REDUCE_ONLY: Final = 6
CANCELED_TOO_MUCH_SLIPPAGE: Final = 9
CANCELED_NOT_ENOUGH_LIQUIDITY: Final = 10
CANCELED_SELF_TRADE: Final = 11
CANCELED_EXPIRED: Final = 12
CANCELED_LIQUIDATION: Final = 15
LIMIT: Final = 0
MARKET: Final = 1
IOC: Final = 0
GTT: Final = 1
POST_ONLY: Final = 2


class InvariantViolation(Exception):
    """``validate_internal_state`` found the state inconsistent (always a bug)."""


class Result(NamedTuple):
    code: int
    events: tuple[Any, ...]


Record: TypeAlias = (
    ExchangeRecord
    | MarketRecord
    | _AccountRecord
    | PositionRecord
    | ApiKeyRecord
    | OrderRecord
    | FundingRecord
)


def _is_int(x: object) -> bool:
    return type(x) is int or isinstance(x, int)


def exposure(size: int, bid_open: int, ask_open: int) -> int:
    """Lots of worst-case position if every resting order of one side fills: the larger of
    ``|size + bid_open|`` and ``|ask_open - size|``. Initial margin is charged on it."""
    a = size + bid_open
    b = ask_open - size
    if a < 0:
        a = -a
    if b < 0:
        b = -b
    return a if a > b else b


class Engine:
    """The exchange state machine. See the module docstring for the semantics.

    Public, read-only by convention: ``fee_pool``, ``insurance_fund``, ``total_deposits``,
    ``total_withdrawals`` (micro-USDC). Everything else is reached through the methods; the read
    accessors (``next_nonce``, ``book_levels``, ...) copy nothing large and never mutate state.
    Not thread-safe: one caller (the sequencer) drives it.
    """

    def __init__(self) -> None:
        self._markets: dict[int, Market] = {}
        self._accounts: dict[int, Account] = {}
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
        self._unarmed_purge_at = 1024
        #: Bumped whenever marks or margin fractions change: accounts' cached risk sums are valid
        #: only when their ``c_epoch`` equals it.
        self._epoch = 0
        #: every market's funding clock (``_funding``): premium samples, hourly settlement
        self.funding = FundingClock()
        self._handlers: dict[type, Callable[[Any, int, list[Any]], int]] = {
            CreateOrder: self._create_order,
            CancelOrder: self._cancel_order,
            ModifyOrder: self._modify_order,
            CancelAllOrders: self._cancel_all,
            Transfer: self._transfer,
            Withdraw: self._withdraw,
            UpdateLeverage: self._update_leverage,
            ChangePubKey: self._change_pub_key,
            Deposit: self._deposit,
            RegisterApiKey: self._register_api_key,
            CreateMarket: self._create_market,
            UpdateMarket: self._update_market,
            SetMarkPrice: self._set_mark_price,
            ApplyFunding: self._apply_funding,
            FundingTick: self._funding_tick,
        }

    # ---- public API -----------------------------------------------------------------------------

    def execute(self, cmd: Any, now_ms: int, out: list[Any]) -> int:
        """Execute one command; append its events to ``out``; return its ResultCode value."""
        t = type(cmd)
        # The three order commands (~95% of traffic) are called directly, the rest by type.
        if t is CreateOrder:
            code = self._create_order(cmd, now_ms, out)
        elif t is CancelOrder:
            code = self._cancel_order(cmd, now_ms, out)
        elif t is ModifyOrder:
            code = self._modify_order(cmd, now_ms, out)
        else:
            handler = self._handlers.get(t)
            if handler is None:
                return UNSUPPORTED_TX_TYPE
            code = handler(cmd, now_ms, out)
        if self._traded:
            self._check_traded(now_ms, out)
        self._flush(out)
        return code

    def apply(self, cmd: Any, now_ms: int) -> Result:
        """Convenience wrapper around :meth:`execute` returning ``Result(code, events)``."""
        out: list[Any] = []
        code = self.execute(cmd, now_ms, out)
        return Result(code, tuple(out))

    def force_order(self, cmd: CreateOrder, now_ms: int, out: list[Any]) -> int:
        """Execute ``cmd`` as the engine itself (the liquidation path's entry for one order): no
        key, nonce or tx-deadline gates, no margin, fat-finger, minimum-amount or open-order-count
        checks, and the market may be inactive. The order keeps its book semantics (reduce-only
        clipping, IOC, self-trade prevention); maintenance is checked after it as after any fill."""
        acct = self._accounts.get(cmd.account_index)
        if acct is None:
            return ACCOUNT_NOT_FOUND
        code = self._place(
            acct,
            cmd.market_index,
            cmd.client_order_index,
            cmd.base_amount,
            cmd.price,
            cmd.is_ask,
            cmd.order_type,
            cmd.time_in_force,
            cmd.reduce_only,
            cmd.order_expiry,
            now_ms,
            out,
            True,
        )
        if self._traded:
            self._check_traded(now_ms, out)
        self._flush(out)
        return code

    def next_nonce(self, account: int, api_key: int) -> int | None:
        acct = self._accounts.get(account)
        key = acct.keys.get(api_key) if acct is not None else None
        return None if key is None else key.nonce + 1

    def pub_key(self, account: int, api_key: int) -> bytes | None:
        acct = self._accounts.get(account)
        key = acct.keys.get(api_key) if acct is not None else None
        return None if key is None else key.pub_key

    def account_collateral(self, account: int) -> int | None:
        acct = self._accounts.get(account)
        return None if acct is None else acct.collateral

    def market(self, market_index: int) -> MarketRecord | None:
        m = self._markets.get(market_index)
        return None if m is None else _market_record(m)

    def book_levels(self, market: int, is_ask: int, depth: int) -> list[tuple[int, int]]:
        """Up to ``depth`` levels of one side, best first: ``[(price, size), ...]``."""
        m = self._markets.get(market)
        if m is None or depth <= 0:
            return []
        side = m.asks if is_ask else m.bids
        levels = side.levels
        pick = heapq.nsmallest if is_ask else heapq.nlargest
        return [(p, levels[p].size) for p in pick(depth, levels)]

    def available_margin(self, account: int) -> int:
        """Equity minus the initial-margin requirement (with resting orders), in micro-USDC."""
        acct = self._accounts.get(account)
        if acct is None:
            return 0
        equity, imr_num = self._equity_imr(acct)
        return equity - -(-imr_num // BPS)

    def equity(self, account: int) -> int | None:
        acct = self._accounts.get(account)
        return None if acct is None else self._equity_imr(acct)[0]

    def position(self, account: int, market: int) -> PositionRecord | None:
        acct = self._accounts.get(account)
        pos = acct.positions.get(market) if acct is not None else None
        return None if pos is None else _position_record(pos)

    def open_orders(self, account: int) -> list[OrderRecord]:
        acct = self._accounts.get(account)
        if acct is None:
            return []
        return [_order_record(acct.orders[i]) for i in sorted(acct.orders)]

    # ---- gates ----------------------------------------------------------------------------------

    def _auth(self, ai: int, ki: int, nonce: int, expired_at: int, now: int, out: list[Any]) -> int:
        """The four gates of a user tx (see the module docstring); 0 when passed."""
        acct = self._accounts.get(ai)
        if acct is None:
            return ACCOUNT_NOT_FOUND
        key = acct.keys.get(ki)
        if key is None:
            return API_KEY_NOT_FOUND
        if nonce != key.nonce + 1:
            return INVALID_NONCE
        if not expired_at >= now:
            return TX_EXPIRED
        key.nonce = nonce
        out.append(_new(NonceUpdated, (ai, ki, nonce)))
        return 0

    # ---- orders ---------------------------------------------------------------------------------

    def _create_order(self, c: CreateOrder, now: int, out: list[Any]) -> int:
        ai, ki, mi, coi, size, price, is_ask, otype, tif, ro, _trig, oexp, exp_at, nonce, _s = c
        # The gates, inlined (hot path): see _auth.
        acct = self._accounts.get(ai)
        if acct is None:
            return ACCOUNT_NOT_FOUND
        key = acct.keys.get(ki)
        if key is None:
            return API_KEY_NOT_FOUND
        if nonce != key.nonce + 1:
            return INVALID_NONCE
        if not exp_at >= now:
            return TX_EXPIRED
        key.nonce = nonce
        out.append(_new(NonceUpdated, (ai, ki, nonce)))
        return self._place(
            acct, mi, coi, size, price, is_ask, otype, tif, ro, oexp, now, out, False
        )

    def _place(
        self,
        acct: Account,
        mi: int,
        coi: int,
        size: int,
        price: int,
        is_ask: int,
        otype: int,
        tif: int,
        ro: int,
        oexp: int,
        now: int,
        out: list[Any],
        internal: bool,
    ) -> int:
        """Validate and execute one order of ``acct`` (``internal``: the engine's own)."""
        m = self._markets.get(mi)
        if m is None:
            return MARKET_NOT_FOUND
        if m.next_expiry < now:
            self._expire(m, now, out)
        if m.status != 1 and not internal:
            return MARKET_NOT_ACTIVE
        if not 1 <= price <= MAX_PRICE:
            return INVALID_PRICE
        if not 1 <= size <= MAX_48:
            return INVALID_SIZE
        if is_ask != 0 and is_ask != 1:
            return INVALID_PARAM
        if ro != 0 and ro != 1:
            return INVALID_PARAM
        if otype == LIMIT:
            if tif != GTT and tif != IOC and tif != POST_ONLY:
                return INVALID_TIME_IN_FORCE
        elif otype == MARKET:
            if tif != IOC:
                return INVALID_TIME_IN_FORCE
        else:
            return INVALID_ORDER_TYPE
        if coi:
            if not 0 < coi <= MAX_48:
                return INVALID_CLIENT_ORDER_INDEX
            if coi in acct.coi:
                return CLIENT_ORDER_INDEX_EXISTS
        if oexp == 0 or oexp == -1:
            expiry = now + DEFAULT_ORDER_LIFETIME_MS
        elif oexp < now or oexp > MAX_I63:
            return INVALID_EXPIRY
        else:
            expiry = oexp
        is_ask = 1 if is_ask else 0
        ro = 1 if ro else 0
        if not internal:
            mark = m.mark
            if size < m.min_base or price * size * m.mult < m.min_quote:
                return BELOW_MIN_AMOUNT
            dev = price - mark
            if dev < 0:
                dev = -dev
            if dev * BPS > mark * m.max_price_deviation:
                return FAT_FINGER_PRICE
            if len(acct.orders) >= MAX_OPEN_ORDERS_PER_ACCOUNT:
                return TOO_MANY_ORDERS
        pos = acct.positions.get(mi)
        new_pos = pos is None
        if pos is None:
            # stored only once the order is accepted: a rejected tx leaves no trace in the state
            # (every state change is visible in the events, so followers rebuild it from them)
            pos = Position(acct, m, m.default_imf)
        opp = m.bids if is_ask else m.asks
        best = opp.best
        if ro:
            s = pos.size
            if (s <= 0) if is_ask else (s >= 0):
                return REDUCE_ONLY_INCREASES_POSITION
        elif not internal:
            # Does the order raise the worst-case exposure?  (max(|size+bids|, |size-asks|))
            s = pos.size
            a = s + pos.bid_open
            b = pos.ask_open - s
            before = (
                (-a if a < 0 else a)
                if (a if a >= 0 else -a) >= (b if b >= 0 else -b)
                else (-b if b < 0 else b)
            )
            if is_ask:
                b += size
            else:
                a += size
            if a < 0:
                a = -a
            if b < 0:
                b = -b
            after = a if a >= b else b
            if after > before:
                est = best if otype == MARKET and best else price
                if not self._margin_after(acct, m, pos, is_ask, size, est, after - before):
                    return NOT_ENOUGH_MARGIN
        if new_pos:
            acct.positions[mi] = pos
        oi = self._next_order_index
        self._next_order_index = oi + 1
        pr = self._next_priority
        self._next_priority = pr + 1
        o = Order(oi, acct, coi, m, is_ask, price, size, expiry, otype, tif, ro, pr)
        if best and (best >= price if is_ask else best <= price):
            if tif == POST_ONLY:
                self._emit_order(o, CANCELED_POST_ONLY, out)
                return POST_ONLY_WOULD_CROSS
            self._match_and_finish(m, o, acct, pos, now, out, internal)
            return OK
        if tif == IOC:
            if otype == MARKET:
                status = CANCELED_TOO_MUCH_SLIPPAGE if best else CANCELED_NOT_ENOUGH_LIQUIDITY
            else:
                status = CANCELED
        else:
            self._rest(m, o, acct, pos)
            status = ACTIVE_LIMIT
        out.append(
            _new(
                OrderUpdated,
                (
                    mi,
                    oi,
                    acct.index,
                    coi,
                    is_ask,
                    price,
                    size,
                    size,
                    expiry,
                    otype,
                    tif,
                    ro,
                    status,
                    pr,
                ),
            )
        )
        return OK

    def _match_and_finish(
        self,
        m: Market,
        o: Order,
        acct: Account,
        pos: Position,
        now: int,
        out: list[Any],
        liquidation: bool,
    ) -> None:
        """Match ``o`` as taker, then rest / cancel its remainder and report its final state."""
        is_ask = o.is_ask
        opp = m.bids if is_ask else m.asks
        best = opp.best
        status = 0
        if best and (best >= o.price if is_ask else best <= o.price):
            status = self._match(m, o, acct, pos, opp, out, liquidation)
        if o.remaining == 0:
            status = FILLED
        elif status == 0:
            if o.tif == IOC:
                if o.order_type == MARKET:
                    status = (
                        CANCELED_TOO_MUCH_SLIPPAGE if opp.best else (CANCELED_NOT_ENOUGH_LIQUIDITY)
                    )
                else:
                    status = CANCELED
            else:
                self._rest(m, o, acct, pos)
                status = ACTIVE_LIMIT
        self._emit_order(o, status, out)

    def _rest(self, m: Market, o: Order, acct: Account, pos: Position) -> None:
        """Put ``o`` at the tail of its level and register it (Side.append and _open, inlined)."""
        price = o.price
        is_ask = o.is_ask
        rem = o.remaining
        side = m.asks if is_ask else m.bids
        levels = side.levels
        lvl = levels.get(price)
        if lvl is None:
            # Side.level_for, inlined: most resting orders open a new level here.
            lvl = levels[price] = Level(m.index, is_ask, price)
            in_heap = side.in_heap
            if price not in in_heap:
                in_heap.add(price)
                heappush(side.heap, price if is_ask else -price)
            best = side.best
            if best == 0 or (price < best if is_ask else price > best):
                side.best = price
        tail = lvl.tail
        o.prev = tail
        if tail is None:
            lvl.head = o
        else:
            tail.next = o
        lvl.tail = o
        o.level = lvl
        lvl.size += rem
        if not lvl.dirty:
            lvl.dirty = True
            self._dirty_levels.append(lvl)
        idx = o.index
        self._orders[idx] = o
        acct.orders[idx] = o
        if o.client_index:
            acct.coi[o.client_index] = o
        if not o.reduce_only:
            self._open(pos, is_ask, rem)
        heap = m.expiries
        exp = o.expiry
        heappush(heap, (exp << EXPIRY_SHIFT) + idx)
        if exp < m.next_expiry:
            m.next_expiry = exp
        if len(heap) > m.compact_at:
            self._compact_expiries(m)

    def _match(
        self,
        m: Market,
        t: Order,
        acct: Account,
        pos: Position,
        opp: Side,
        out: list[Any],
        liquidation: bool,
    ) -> int:
        """Fill taker ``t`` against ``opp`` up to its limit. Returns 0, or CANCELED_REDUCE_ONLY when
        a reduce-only taker stopped because its position is closed."""
        levels = opp.levels
        is_ask = t.is_ask
        limit = t.price
        mi = m.index
        mult = m.mult
        taker_fee_ppm = m.liquidation_fee if liquidation else m.taker_fee
        maker_fee_ppm = m.maker_fee
        dirty_levels = self._dirty_levels
        append = out.append
        traded = self._traded
        positions_get_default = _position_for
        apply_fill = self._apply_fill
        open_lots = self._open
        taker_fees = 0
        maker_fees = 0
        taker_ai = acct.index
        t_sign = -1 if is_ask else 1
        taker_ro = t.reduce_only
        traded.append(acct)
        last_price = 0
        stop = 0
        while t.remaining and not stop:
            best = opp.best
            if not best or (best < limit if is_ask else best > limit):
                break
            lvl = levels[best]
            if not lvl.dirty:
                lvl.dirty = True
                dirty_levels.append(lvl)
            o: Order | None = lvl.head
            while o is not None:
                nxt = o.next
                macct = o.account
                if macct is acct:
                    self._remove_resting(o, CANCELED_SELF_TRADE, out)
                    o = nxt
                    continue
                mpos = macct.positions.get(mi)
                if mpos is None:
                    mpos = positions_get_default(macct, m)
                rem = t.remaining
                q = rem if rem < o.remaining else o.remaining
                if taker_ro:
                    s = pos.size
                    allowed = (s if s > 0 else 0) if is_ask else (-s if s < 0 else 0)
                    if allowed == 0:
                        stop = CANCELED_REDUCE_ONLY
                        break
                    if allowed < q:
                        q = allowed
                if o.reduce_only:
                    s = mpos.size
                    allowed = (s if s > 0 else 0) if o.is_ask else (-s if s < 0 else 0)
                    if allowed == 0:
                        self._remove_resting(o, CANCELED_REDUCE_ONLY, out)
                        o = nxt
                        continue
                    if allowed < q:
                        q = allowed
                pq = best * mult
                notional = pq * q
                tfee = -(-notional * taker_fee_ppm // PPM)
                mfee = -(-notional * maker_fee_ppm // PPM)
                acct.collateral += apply_fill(pos, t_sign * q, pq) - tfee
                macct.collateral += apply_fill(mpos, -t_sign * q, pq) - mfee
                taker_fees += tfee
                maker_fees += mfee
                t.remaining -= q
                o.remaining -= q
                lvl.size -= q
                if not o.reduce_only:
                    open_lots(mpos, o.is_ask, -q)
                if not macct.dirty:
                    macct.dirty = True
                    self._dirty_accounts.append(macct)
                traded.append(macct)
                tid = self._next_trade_id
                self._next_trade_id = tid + 1
                append(
                    _new(
                        TradeExecuted,
                        (
                            mi,
                            tid,
                            best,
                            q,
                            taker_ai,
                            macct.index,
                            t.index,
                            o.index,
                            is_ask,
                            tfee,
                            mfee,
                        ),
                    )
                )
                last_price = best
                if o.remaining == 0:
                    self._remove_resting(o, FILLED, out)
                elif o.reduce_only and mpos.size == 0:
                    self._remove_resting(o, CANCELED_REDUCE_ONLY, out)
                else:
                    self._emit_order(o, ACTIVE_LIMIT, out)
                if not t.remaining:
                    break
                o = nxt
        if last_price:
            m.last_trade_price = last_price
            if not m.dirty:
                m.dirty = True
                self._dirty_markets.append(m)
            if not acct.dirty:
                acct.dirty = True
                self._dirty_accounts.append(acct)
            if liquidation:
                self.insurance_fund += taker_fees
                self.fee_pool += maker_fees
            else:
                self.fee_pool += taker_fees + maker_fees
            self._exchange_dirty = True
        return stop

    def _apply_fill(self, pos: Position, d: int, pq: int) -> int:
        """Add ``d`` signed lots at ``pq`` micro-USDC per lot; return the realized PnL."""
        s = pos.size
        m = pos.market
        eq = pos.entry_quote
        realized = 0
        if s == 0 or (s > 0) == (d > 0):
            pos.size = ns = s + d
            pos.entry_quote = neq = eq + d * pq
        else:
            a_s = s if s > 0 else -s
            a_d = d if d > 0 else -d
            c = a_d if a_d < a_s else a_s
            removed = eq * c // a_s if eq >= 0 else -((-eq) * c // a_s)
            realized = (pq * c if s > 0 else -pq * c) - removed
            pos.realized_pnl += realized
            if a_d > c:
                ns = d + s
                neq = ns * pq
            else:
                ns = s + d
                neq = eq - removed
            pos.size = ns
            pos.entry_quote = neq
        m.open_interest += (ns if ns > 0 else 0) - (s if s > 0 else 0)
        acct = pos.account
        if ns == 0:
            m.holders.pop(acct.index, None)
            m.unarmed.pop(acct, None)
        elif s == 0:
            m.holders[acct.index] = pos
            if acct in self._unarmed:
                m.unarmed[acct] = None
        if acct.c_epoch == self._epoch:
            mq = m.mark_q
            acct.c_upnl += (ns - s) * mq - (neq - eq)
            a_ns = ns if ns > 0 else -ns
            a_s = s if s > 0 else -s
            acct.c_mm += (a_ns - a_s) * mq * m.maintenance_mf
            bo = pos.bid_open
            ao = pos.ask_open
            acct.c_im += (exposure(ns, bo, ao) - exposure(s, bo, ao)) * mq * pos.imf
        if not pos.dirty:
            pos.dirty = True
            self._dirty_positions.append(pos)
        return realized

    def _open(self, pos: Position, is_ask: int, delta: int) -> None:
        """Change the position's resting-order lots on one side (and the account's cached IMR)."""
        bo = pos.bid_open
        ao = pos.ask_open
        if is_ask:
            pos.ask_open = nao = ao + delta
            nbo = bo
        else:
            pos.bid_open = nbo = bo + delta
            nao = ao
        acct = pos.account
        if acct.c_epoch == self._epoch:
            s = pos.size
            grow = exposure(s, nbo, nao) - exposure(s, bo, ao)
            acct.c_im += grow * pos.market.mark_q * pos.imf

    def _remove_resting(self, o: Order, status: int, out: list[Any]) -> None:
        """Take a resting order off the book and its account, and report it with ``status``.
        (Side.unlink and _open, inlined: this runs for every cancel and every filled maker.)"""
        m = o.market
        is_ask = o.is_ask
        rem = o.remaining
        lvl = o.level
        assert lvl is not None
        p = o.prev
        n = o.next
        if p is None:
            lvl.head = n
        else:
            p.next = n
        if n is None:
            lvl.tail = p
        else:
            n.prev = p
        o.prev = o.next = o.level = None
        lvl.size -= rem
        if lvl.head is None:
            side = m.asks if is_ask else m.bids
            if lvl.price == side.best:
                side.drop_level(lvl)
            else:
                del side.levels[lvl.price]
        if not lvl.dirty:
            lvl.dirty = True
            self._dirty_levels.append(lvl)
        acct = o.account
        idx = o.index
        del self._orders[idx]
        del acct.orders[idx]
        coi = o.client_index
        if coi:
            del acct.coi[coi]
        if rem and not o.reduce_only:
            self._open(acct.positions[m.index], is_ask, -rem)
        out.append(
            _new(
                OrderUpdated,
                (
                    m.index,
                    idx,
                    acct.index,
                    coi,
                    is_ask,
                    o.price,
                    o.initial,
                    rem,
                    o.expiry,
                    o.order_type,
                    o.tif,
                    o.reduce_only,
                    status,
                    o.priority,
                ),
            )
        )

    def _emit_order(self, o: Order, status: int, out: list[Any]) -> None:
        out.append(
            _new(
                OrderUpdated,
                (
                    o.market.index,
                    o.index,
                    o.account.index,
                    o.client_index,
                    o.is_ask,
                    o.price,
                    o.initial,
                    o.remaining,
                    o.expiry,
                    o.order_type,
                    o.tif,
                    o.reduce_only,
                    status,
                    o.priority,
                ),
            )
        )

    def _expire(self, m: Market, now: int, out: list[Any]) -> None:
        """Cancel resting orders of ``m`` whose expiry is before ``now`` (CANCELED_EXPIRED)."""
        heap = m.expiries
        orders = self._orders
        while heap and heap[0] >> EXPIRY_SHIFT < now:
            key = heappop(heap)
            o = orders.get(key & INDEX_MASK)
            if o is not None and o.expiry == key >> EXPIRY_SHIFT:
                self._remove_resting(o, CANCELED_EXPIRED, out)
        m.next_expiry = heap[0] >> EXPIRY_SHIFT if heap else NO_EXPIRY

    @staticmethod
    def _compact_expiries(m: Market) -> None:
        """Drop stale (cancelled/filled) entries; amortised O(1) per resting order."""
        heap = [(o.expiry << EXPIRY_SHIFT) + o.index for o in _iter_market_orders(m)]
        heapify(heap)
        m.expiries = heap
        m.next_expiry = heap[0] >> EXPIRY_SHIFT if heap else NO_EXPIRY
        m.compact_at = max(1024, 4 * len(heap))

    def _find_order(self, acct: Account, mi: int, index: int) -> Order | None:
        o = acct.coi.get(index) if index < FIRST_ORDER_INDEX else self._orders.get(index)
        if o is None or o.account is not acct or o.market.index != mi:
            return None
        return o

    def _cancel_order(self, c: CancelOrder, now: int, out: list[Any]) -> int:
        ai, ki, mi, index, exp_at, nonce, _s = c
        acct = self._accounts.get(ai)
        if acct is None:
            return ACCOUNT_NOT_FOUND
        key = acct.keys.get(ki)
        if key is None:
            return API_KEY_NOT_FOUND
        if nonce != key.nonce + 1:
            return INVALID_NONCE
        if not exp_at >= now:
            return TX_EXPIRED
        key.nonce = nonce
        out.append(_new(NonceUpdated, (ai, ki, nonce)))
        m = self._markets.get(mi)
        if m is None:
            return MARKET_NOT_FOUND
        if m.next_expiry < now:
            self._expire(m, now, out)
        o = acct.coi.get(index) if index < FIRST_ORDER_INDEX else self._orders.get(index)
        if o is None or o.account is not acct or o.market is not m:
            return NOT_ACTIVE_LIMIT_ORDER
        self._remove_resting(o, CANCELED, out)
        return OK

    def _cancel_all(self, c: CancelAllOrders, now: int, out: list[Any]) -> int:
        ai, ki, tif, _time, exp_at, nonce, _s = c
        code = self._auth(ai, ki, nonce, exp_at, now, out)
        if code:
            return code
        if tif != 0:
            return UNSUPPORTED_TX_TYPE
        acct = self._accounts[ai]
        for idx in sorted(acct.orders):
            self._remove_resting(acct.orders[idx], CANCELED, out)
        return OK

    def _modify_order(self, c: ModifyOrder, now: int, out: list[Any]) -> int:
        ai, ki, mi, index, size, price, _trig, exp_at, nonce, _s = c
        code = self._auth(ai, ki, nonce, exp_at, now, out)
        if code:
            return code
        m = self._markets.get(mi)
        if m is None:
            return MARKET_NOT_FOUND
        if m.next_expiry < now:
            self._expire(m, now, out)
        acct = self._accounts[ai]
        o = self._find_order(acct, mi, index)
        if o is None:
            return NOT_ACTIVE_LIMIT_ORDER
        if m.status != 1:
            return MARKET_NOT_ACTIVE
        if not 1 <= price <= MAX_PRICE:
            return INVALID_PRICE
        if not 1 <= size <= MAX_48:
            return INVALID_SIZE
        mark = m.mark
        if size < m.min_base or price * size * m.mult < m.min_quote:
            return BELOW_MIN_AMOUNT
        if abs(price - mark) * BPS > mark * m.max_price_deviation:
            return FAT_FINGER_PRICE
        filled = o.initial - o.remaining
        if size <= filled:
            self._remove_resting(o, CANCELED, out)
            return OK
        new_rem = size - filled
        pos = acct.positions[mi]
        grow = new_rem - o.remaining
        if price == o.price and grow <= 0:
            if grow:
                side = m.asks if o.is_ask else m.bids
                lvl = side.levels[price]
                lvl.size += grow
                if not lvl.dirty:
                    lvl.dirty = True
                    self._dirty_levels.append(lvl)
                if not o.reduce_only:
                    self._open(pos, o.is_ask, grow)
                o.remaining = new_rem
            o.initial = size
            self._emit_order(o, ACTIVE_LIMIT, out)
            return OK
        is_ask = o.is_ask
        opp = m.bids if is_ask else m.asks
        best = opp.best
        if (
            grow > 0
            and not o.reduce_only
            and not self._order_margin_ok(acct, m, pos, is_ask, grow, price)
        ):
            return NOT_ENOUGH_MARGIN
        crosses = best and (best >= price if is_ask else best <= price)
        # Take the order out (without reporting it) and re-enter it with its new terms.
        side = m.asks if is_ask else m.bids
        rem = o.remaining
        lvl = side.unlink(o)
        if not lvl.dirty:
            lvl.dirty = True
            self._dirty_levels.append(lvl)
        del self._orders[o.index]
        del acct.orders[o.index]
        if o.client_index:
            del acct.coi[o.client_index]
        if not o.reduce_only:
            self._open(pos, is_ask, -rem)
        o.price = price
        o.initial = size
        o.remaining = new_rem
        o.priority = self._next_priority
        self._next_priority += 1
        if crosses and o.tif == POST_ONLY:
            self._emit_order(o, CANCELED_POST_ONLY, out)
            return POST_ONLY_WOULD_CROSS
        self._match_and_finish(m, o, acct, pos, now, out, False)
        return OK

    # ---- margin ---------------------------------------------------------------------------------

    def _refresh(self, acct: Account) -> None:
        """Recompute the account's cached risk sums (O(markets it holds)) if the marks moved since.

        ``c_upnl = sum(size*mark*mult - entry_quote)``, ``c_mm = sum(|size|*mark*mult*mmf)``,
        ``c_im = sum(worst*mark*mult*imf)`` with ``worst = max(|size+bids|, |size-asks|)``. Between
        mark moves fills and order changes update them in O(1)."""
        upnl = mm = im = 0
        for p in acct.positions.values():
            s = p.size
            bo = p.bid_open
            ao = p.ask_open
            if s or bo or ao:
                m = p.market
                mq = m.mark_q
                if s:
                    upnl += s * mq - p.entry_quote
                    mm += (s if s > 0 else -s) * mq * m.maintenance_mf
                im += exposure(s, bo, ao) * mq * p.imf
        acct.c_upnl = upnl
        acct.c_mm = mm
        acct.c_im = im
        acct.c_epoch = self._epoch

    def _equity_imr(self, acct: Account) -> tuple[int, int]:
        """(equity, IMR numerator in micro-USDC * bps) including resting-order exposure."""
        if acct.c_epoch != self._epoch:
            self._refresh(acct)
        return acct.collateral + acct.c_upnl, acct.c_im

    def _equity_mmr(self, acct: Account) -> tuple[int, int]:
        """(equity, maintenance numerator in micro-USDC * bps); positions only."""
        if acct.c_epoch != self._epoch:
            self._refresh(acct)
        return acct.collateral + acct.c_upnl, acct.c_mm

    def _order_margin_ok(
        self, acct: Account, m: Market, pos: Position, is_ask: int, q: int, est: int
    ) -> bool:
        """Pre-trade check for ``q`` more lots on one side (see the module docstring)."""
        s = pos.size
        bo = pos.bid_open
        ao = pos.ask_open
        before = exposure(s, bo, ao)
        after = exposure(s, bo, ao + q) if is_ask else exposure(s, bo + q, ao)
        if after <= before:
            return True
        return self._margin_after(acct, m, pos, is_ask, q, est, after - before)

    def _margin_after(
        self, acct: Account, m: Market, pos: Position, is_ask: int, q: int, est: int, grow: int
    ) -> bool:
        """``equity - adverse - fee >= IMR + grow lots`` (``grow``: rise of the worst case)."""
        if acct.c_epoch != self._epoch:
            self._refresh(acct)
        mult = m.mult
        mark = m.mark
        equity = acct.collateral + acct.c_upnl
        adverse = (mark - est) * q * mult if is_ask else (est - mark) * q * mult
        if adverse > 0:
            equity -= adverse
        equity -= -(-est * q * mult * m.taker_fee // PPM)
        need: int = acct.c_im + grow * m.mark_q * pos.imf
        return equity * BPS >= need

    def _imr_ok(self, acct: Account, extra_debit: int = 0) -> bool:
        equity, num = self._equity_imr(acct)
        return (equity - extra_debit) * BPS >= num

    # ---- money ----------------------------------------------------------------------------------

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

    def _transfer(self, c: Transfer, now: int, out: list[Any]) -> int:
        ai, ki, to, amount, exp_at, nonce, _s = c
        code = self._auth(ai, ki, nonce, exp_at, now, out)
        if code:
            return code
        if not 1 <= amount <= MAX_I63:
            return INVALID_AMOUNT
        if to == ai:
            return SELF_TRANSFER
        dst = self._accounts.get(to)
        if dst is None:
            return ACCOUNT_NOT_FOUND
        src = self._accounts[ai]
        if amount > src.collateral:
            return INSUFFICIENT_BALANCE
        if not self._imr_ok(src, amount):
            return NOT_ENOUGH_MARGIN
        src.collateral -= amount
        dst.collateral += amount
        self._rearm(src)
        self._mark_account(src)
        self._mark_account(dst)
        return OK

    def _withdraw(self, c: Withdraw, now: int, out: list[Any]) -> int:
        ai, ki, amount, exp_at, nonce, _s = c
        code = self._auth(ai, ki, nonce, exp_at, now, out)
        if code:
            return code
        if not 1 <= amount <= MAX_I63:
            return INVALID_AMOUNT
        acct = self._accounts[ai]
        if amount > acct.collateral:
            return INSUFFICIENT_BALANCE
        if not self._imr_ok(acct, amount):
            return NOT_ENOUGH_MARGIN
        acct.collateral -= amount
        self.total_withdrawals += amount
        self._exchange_dirty = True
        self._rearm(acct)
        self._mark_account(acct)
        return OK

    def _update_leverage(self, c: UpdateLeverage, now: int, out: list[Any]) -> int:
        ai, ki, mi, imf, mode, exp_at, nonce, _s = c
        code = self._auth(ai, ki, nonce, exp_at, now, out)
        if code:
            return code
        m = self._markets.get(mi)
        if m is None:
            return MARKET_NOT_FOUND
        if mode != 0:
            return UNSUPPORTED_TX_TYPE
        if not m.min_imf <= imf <= BPS:
            return INVALID_LEVERAGE
        acct = self._accounts[ai]
        pos = acct.positions.get(mi)
        new_pos = pos is None
        if pos is None:
            pos = acct.positions[mi] = Position(acct, m, m.default_imf)
        old = pos.imf
        pos.imf = imf
        acct.c_epoch = -1
        if imf > old and not self._imr_ok(acct):
            pos.imf = old
            acct.c_epoch = -1
            if new_pos:  # a rejected tx leaves no trace (see _place)
                del acct.positions[mi]
            return NOT_ENOUGH_MARGIN
        self._mark_position(pos)
        return OK

    def _change_pub_key(self, c: ChangePubKey, now: int, out: list[Any]) -> int:
        ai, ki, new_ki, pub, exp_at, nonce, _s = c
        code = self._auth(ai, ki, nonce, exp_at, now, out)
        if code:
            return code
        if not _is_int(new_ki) or not 0 <= new_ki <= MAX_API_KEY_INDEX:
            return INVALID_API_KEY_INDEX
        if not _valid_pub_key(pub):
            return INVALID_PUBLIC_KEY
        self._set_key(self._accounts[ai], new_ki, bytes(pub), out)
        return OK

    def _set_key(self, acct: Account, ki: int, pub: bytes, out: list[Any]) -> None:
        key = acct.keys.get(ki)
        if key is None:
            key = acct.keys[ki] = ApiKey(pub)
            out.append(_new(NonceUpdated, (acct.index, ki, key.nonce)))
        else:
            key.pub_key = pub
        out.append(_new(ApiKeyChanged, (acct.index, ki, pub)))

    # ---- operator commands ----------------------------------------------------------------------

    def _account_for(self, ai: int) -> Account:
        acct = self._accounts.get(ai)
        if acct is None:
            acct = self._accounts[ai] = Account(ai)
            self._mark_account(acct)
        return acct

    def _deposit(self, c: Deposit, now: int, out: list[Any]) -> int:
        ai, amount = c
        if not _is_int(ai) or not 0 <= ai <= MAX_48:
            return INVALID_PARAM
        if not _is_int(amount) or not 1 <= amount <= MAX_I63:
            return INVALID_AMOUNT
        acct = self._account_for(ai)
        acct.collateral += amount
        self.total_deposits += amount
        self._exchange_dirty = True
        self._mark_account(acct)
        return OK

    def _register_api_key(self, c: RegisterApiKey, now: int, out: list[Any]) -> int:
        ai, ki, pub = c
        if not _is_int(ai) or not 0 <= ai <= MAX_48:
            return INVALID_PARAM
        if not _is_int(ki) or not 0 <= ki <= MAX_API_KEY_INDEX:
            return INVALID_API_KEY_INDEX
        if not _valid_pub_key(pub):
            return INVALID_PUBLIC_KEY
        self._set_key(self._account_for(ai), ki, bytes(pub), out)
        return OK

    def _create_market(self, c: CreateMarket, now: int, out: list[Any]) -> int:
        mi = c.market_index
        if not _is_int(mi) or not 0 <= mi <= MAX_MARKET_INDEX:
            return INVALID_MARKET_PARAMS
        if mi in self._markets:
            return MARKET_EXISTS
        pd, sd, sym = c.price_decimals, c.size_decimals, c.symbol
        if not (_is_int(pd) and _is_int(sd) and pd >= 0 and sd >= 0 and pd + sd <= 6):
            return INVALID_MARKET_PARAMS
        if not isinstance(sym, str) or not sym.isascii() or not 0 < len(sym) <= 16:
            return INVALID_MARKET_PARAMS
        if not _is_int(c.mark_price) or not 1 <= c.mark_price <= MAX_PRICE:
            return INVALID_MARKET_PARAMS
        if not _valid_params(c[4:14], c.status):
            return INVALID_MARKET_PARAMS
        m = Market(int(mi), sym, int(pd), int(sd))
        _set_params(m, c[4:14], c.status)
        m.set_mark(int(c.mark_price))
        self._markets[m.index] = m
        out.append(_new(MarketChanged, _market_changed(m)))
        self._mark_market(m)
        return OK

    def _update_market(self, c: UpdateMarket, now: int, out: list[Any]) -> int:
        m = self._markets.get(c.market_index)
        if m is None:
            return MARKET_NOT_FOUND
        if not _valid_params(c[1:11], c.status):
            return INVALID_MARKET_PARAMS
        _set_params(m, c[1:11], c.status)
        self._epoch += 1
        out.append(_new(MarketChanged, _market_changed(m)))
        self._liquidate_holders(m, now, out)
        return OK

    def _set_mark_price(self, c: SetMarkPrice, now: int, out: list[Any]) -> int:
        mi, price = c
        m = self._markets.get(mi)
        if m is None:
            return MARKET_NOT_FOUND
        if not _is_int(price) or not 1 <= price <= MAX_PRICE:
            return INVALID_PRICE
        if m.next_expiry < now:
            self._expire(m, now, out)
        m.set_mark(int(price))
        self._epoch += 1
        self._mark_market(m)
        self._liquidate_crossed(m, now, out)
        return OK

    def _apply_funding(self, c: ApplyFunding, now: int, out: list[Any]) -> int:
        mi, rate = c
        m = self._markets.get(mi)
        if m is None:
            return MARKET_NOT_FOUND
        if not _is_int(rate) or not -(2**31) <= rate < 2**31:
            return INVALID_PARAM
        if rate == 0 or not m.holders:
            return OK
        mq = m.mark_q
        paid = 0
        received = 0
        payers: list[int] = []
        holders = m.holders
        dirty_positions = self._dirty_positions
        dirty_accounts = self._dirty_accounts
        for ai in sorted(holders):
            pos = holders[ai]
            raw = pos.size * mq * rate
            if raw > 0:
                amount = -(-raw // FUNDING_SCALE)
                paid += amount
                payers.append(ai)
            else:
                amount = -((-raw) // FUNDING_SCALE)
                received -= amount
            pos.funding_paid += amount
            acct = pos.account
            acct.collateral -= amount
            if not pos.dirty:
                pos.dirty = True
                dirty_positions.append(pos)
            if not acct.dirty:
                acct.dirty = True
                dirty_accounts.append(acct)
        self.insurance_fund += paid - received
        self._exchange_dirty = True
        # Only payers lost buffer; receivers' triggers stay conservative.
        self._check_accounts(payers, now, out)
        return OK

    def _funding_tick(self, c: FundingTick, now: int, out: list[Any]) -> int:
        return self.funding.tick(self, c, now, out)

    # ---- liquidation ----------------------------------------------------------------------------

    def _liquidate_holders(self, m: Market, now: int, out: list[Any]) -> None:
        """Exact check of every holder of ``m`` (funding, market updates): liquidate or re-arm."""
        self._check_accounts(sorted(m.holders), now, out)

    def _liquidate_crossed(self, m: Market, now: int, out: list[Any]) -> None:
        """After a mark move: exact check of the holders whose trigger the new mark crossed and of
        the unarmed holders (their risk changed since they were armed)."""
        mark = m.mark
        accounts = self._accounts
        cand: set[int] = set()
        heap = m.long_triggers
        while heap and -heap[0][0] >= mark:
            _, ai, v = heappop(heap)
            if accounts[ai].risk_version == v:
                cand.add(ai)
        heap = m.short_triggers
        while heap and heap[0][0] <= mark:
            _, ai, v = heappop(heap)
            if accounts[ai].risk_version == v:
                cand.add(ai)
        unarmed = self._unarmed
        if unarmed:
            # Unarmed accounts holding this market (indexed per market: ``Market.unarmed``) are
            # checked now; the others are unaffected by this mark and stay unarmed until a market
            # they hold moves.
            for a in list(m.unarmed):
                del unarmed[a]
                for p in a.positions.values():
                    if p.size:
                        del p.market.unarmed[a]
                cand.add(a.index)
            if len(unarmed) > self._unarmed_purge_at:
                # Accounts that went flat carry no risk: drop them (amortised O(1) per entry).
                for a in [a for a in unarmed if not any(p.size for p in a.positions.values())]:
                    del unarmed[a]
                self._unarmed_purge_at = 2 * len(unarmed) + 1024
        if cand:
            self._check_accounts(sorted(cand), now, out)

    def _check_accounts(self, indexes: list[int], now: int, out: list[Any]) -> None:
        accounts = self._accounts
        for ai in indexes:
            acct = accounts[ai]
            if acct.c_epoch != self._epoch:
                self._refresh(acct)
            room = (acct.collateral + acct.c_upnl) * BPS - acct.c_mm
            if room < 0:
                self._liquidate(acct, now, out)
            else:
                self._arm(acct, room)

    def _arm(self, acct: Account, buffer: int) -> None:
        """Record, per market the account holds, the mark beyond which it may be liquidatable.

        ``buffer = equity*BPS - maintenance numerator >= 0`` is split evenly across its ``k``
        positions: while every mark stays strictly inside its trigger the total loss is below the
        buffer, so no liquidation is missed (triggers are conservative, checks are exact).
        A mark move of one tick costs ``|size| * mult * (BPS -/+ mmf)`` of buffer (long/short)."""
        v = acct.risk_version + 1
        acct.risk_version = v
        positions = [p for p in acct.positions.values() if p.size]
        if not positions:
            return
        share = buffer // len(positions)
        ai = acct.index
        for p in positions:
            m = p.market
            s = p.size
            if s > 0:
                den = s * m.mult * (BPS - m.maintenance_mf)
                if den <= 0:
                    continue
                trigger = m.mark - share // den
                if trigger >= 1:
                    heap = m.long_triggers
                    heappush(heap, (-trigger, ai, v))
                    if len(heap) > 4 * len(m.holders) + 256:
                        m.long_triggers = self._live_triggers(heap)
            else:
                trigger = m.mark + share // (-s * m.mult * (BPS + m.maintenance_mf))
                if trigger <= MAX_PRICE:
                    heap = m.short_triggers
                    heappush(heap, (trigger, ai, v))
                    if len(heap) > 4 * len(m.holders) + 256:
                        m.short_triggers = self._live_triggers(heap)

    def _live_triggers(self, heap: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        accounts = self._accounts
        live = [e for e in heap if accounts[e[1]].risk_version == e[2]]
        heapify(live)
        return live

    def _rearm(self, acct: Account) -> None:
        """The account's buffer shrank without a trade (transfer, withdraw): arm it again at the
        next move of a market it holds (until then, the marks it was checked at are current)."""
        if acct.positions:
            acct.risk_version += 1
            self._unarm(acct)

    def _unarm(self, acct: Account) -> None:
        """Queue ``acct`` for an exact check and re-arming at the next move of a market it holds
        (``Market.unarmed`` indexes it under each market where its position is non-zero)."""
        self._unarmed[acct] = None
        for p in acct.positions.values():
            if p.size:
                p.market.unarmed[acct] = None

    def _check_traded(self, now: int, out: list[Any]) -> None:
        """Accounts that traded in this command: liquidate if under maintenance (exact check at the
        current marks). Survivors are left unarmed: their triggers are rebuilt once, at the next
        mark move, instead of after every fill. Counterparties of a liquidation are checked in the
        next round; it ends because every liquidation leaves its account without positions."""
        unarmed = self._unarmed
        epoch = self._epoch
        while self._traded:
            batch = dict.fromkeys(self._traded)
            self._traded = []
            for acct in batch:
                if acct.c_epoch != epoch:
                    self._refresh(acct)
                if (acct.collateral + acct.c_upnl) * BPS < acct.c_mm:
                    self._liquidate(acct, now, out)
                elif acct not in unarmed:
                    # Its old triggers no longer bound its risk.
                    acct.risk_version += 1
                    self._unarm(acct)

    def _liquidate(self, acct: Account, now: int, out: list[Any]) -> None:
        acct.risk_version += 1
        for idx in sorted(acct.orders):
            self._remove_resting(acct.orders[idx], CANCELED_LIQUIDATION, out)
        for mi in sorted(acct.positions):
            pos = acct.positions[mi]
            if pos.size == 0:
                continue
            m = pos.market
            if m.next_expiry < now:
                self._expire(m, now, out)
            start = pos.size
            is_ask = 1 if start > 0 else 0
            band = m.mark * m.max_price_deviation // BPS
            bound = max(1, m.mark - band) if is_ask else min(MAX_PRICE, m.mark + band)
            fund_before = self.insurance_fund
            oi = self._next_order_index
            self._next_order_index = oi + 1
            pr = self._next_priority
            self._next_priority = pr + 1
            o = Order(oi, acct, 0, m, is_ask, bound, abs(start), now, MARKET, IOC, 1, pr)
            mark_len = len(out)
            self._match_and_finish(m, o, acct, pos, now, out, True)
            closed = start - pos.size
            if closed:
                quote = _closed_quote(acct.index, m, out, mark_len)
                fee = self.insurance_fund - fund_before
                out.append(
                    _new(
                        PositionLiquidated,
                        (
                            acct.index,
                            m.index,
                            closed,
                            quote // abs(closed),
                            fee,
                        ),
                    )
                )
            if pos.size:
                self._deleverage(acct, pos, out)
        if acct.collateral < 0:
            self.insurance_fund += acct.collateral
            acct.collateral = 0
            self._exchange_dirty = True
            self._mark_account(acct)

    def _deleverage(self, acct: Account, pos: Position, out: list[Any]) -> None:
        """Offset what is left of ``pos`` against the most profitable opposite positions at the
        account's bankruptcy price (no fees)."""
        m = pos.market
        s = pos.size
        mult = m.mult
        equity, _ = self._equity_mmr(acct)
        # Price at which closing s lots at that price leaves equity at zero (rounded so the
        # account, not the insurance fund, keeps the rounding residue).
        num = s * m.mark_q - equity
        den = s * mult
        bp = -(-num // den) if s > 0 else num // den
        bp = min(MAX_PRICE, max(1, bp))
        mq = m.mark_q
        ranked = sorted(
            (p for p in m.holders.values() if (p.size > 0) != (s > 0)),
            key=lambda p: (-(p.size * mq - p.entry_quote), p.account.index),
        )
        pq = bp * mult
        for cp in ranked:
            if pos.size == 0:
                break
            q = min(abs(pos.size), abs(cp.size))
            d = q if s < 0 else -q
            acct.collateral += self._apply_fill(pos, d, pq)
            cp.account.collateral += self._apply_fill(cp, -d, pq)
            self._mark_account(acct)
            self._mark_account(cp.account)
            out.append(
                _new(
                    PositionDeleveraged,
                    (
                        acct.index,
                        cp.account.index,
                        m.index,
                        -d,
                        bp,
                    ),
                )
            )
            self._traded.append(cp.account)
        self._mark_market(m)

    # ---- end of command -------------------------------------------------------------------------

    def _flush(self, out: list[Any]) -> None:
        append = out.append
        dirty = self._dirty_levels
        if dirty:
            for lvl in dirty:
                lvl.dirty = False
                append(_new(LevelChanged, (lvl.market_index, lvl.is_ask, lvl.price, lvl.size)))
            dirty.clear()
        dirty_p = self._dirty_positions
        if dirty_p:
            for p in dirty_p:
                p.dirty = False
                append(
                    _new(
                        PositionChanged,
                        (
                            p.account.index,
                            p.market.index,
                            p.size,
                            p.entry_quote,
                            p.realized_pnl,
                            p.funding_paid,
                            p.imf,
                            p.margin_mode,
                        ),
                    )
                )
            dirty_p.clear()
        dirty_a = self._dirty_accounts
        if dirty_a:
            for a in dirty_a:
                a.dirty = False
                append(_new(BalanceChanged, (a.index, a.collateral)))
            dirty_a.clear()
        dirty_m = self._dirty_markets
        if dirty_m:
            for m in dirty_m:
                m.dirty = False
                append(
                    _new(
                        MarketStatsChanged,
                        (
                            m.index,
                            m.mark,
                            m.last_trade_price,
                            m.open_interest,
                        ),
                    )
                )
            dirty_m.clear()
        if self._exchange_dirty:
            self._exchange_dirty = False
            append(
                _new(
                    ExchangeBalancesChanged,
                    (
                        self.fee_pool,
                        self.insurance_fund,
                        self.total_deposits,
                        self.total_withdrawals,
                    ),
                )
            )

    # ---- snapshots, hash, validation ------------------------------------------------------------

    def records(self) -> Iterator[Record]:
        """The full state as snapshot records (see ``codecs._records``), in a canonical order."""
        yield _new(
            ExchangeRecord,
            (
                self.fee_pool,
                self.insurance_fund,
                self.total_deposits,
                self.total_withdrawals,
                self._next_order_index,
                self._next_trade_id,
                self._next_priority,
            ),
        )
        markets = self._markets
        for mi in sorted(markets):
            yield _market_record(markets[mi])
        accounts = self._accounts
        ais = sorted(accounts)
        for ai in ais:
            yield _new(_AccountRecord, (ai, accounts[ai].collateral))
        for ai in ais:
            positions = accounts[ai].positions
            for mi in sorted(positions):
                yield _position_record(positions[mi])
        for ai in ais:
            keys = accounts[ai].keys
            for ki in sorted(keys):
                k = keys[ki]
                yield _new(ApiKeyRecord, (ai, ki, k.nonce, k.pub_key))
        for mi in sorted(markets):
            for o in _iter_market_orders(markets[mi]):
                yield _order_record(o)
        yield from self.funding.records()

    @classmethod
    def from_records(cls, records: Iterable[Any]) -> Engine:
        """Rebuild an engine from :meth:`records` output (rows in that order)."""
        eng = cls()
        for r in records:
            if isinstance(r, ExchangeRecord):
                (
                    eng.fee_pool,
                    eng.insurance_fund,
                    eng.total_deposits,
                    eng.total_withdrawals,
                    eng._next_order_index,
                    eng._next_trade_id,
                    eng._next_priority,
                ) = r
            elif isinstance(r, MarketRecord):
                m = Market(r.market_index, r.symbol, r.price_decimals, r.size_decimals)
                _set_params(m, r[4:14], r.status)
                m.set_mark(r.mark_price)
                m.last_trade_price = r.last_trade_price
                m.open_interest = r.open_interest
                eng._markets[m.index] = m
            elif isinstance(r, _AccountRecord):
                eng._accounts[r.account_index] = Account(r.account_index, r.collateral)
            elif isinstance(r, PositionRecord):
                acct = eng._accounts[r.account_index]
                m = eng._markets[r.market_index]
                pos = Position(acct, m, r.initial_margin_fraction)
                (pos.size, pos.entry_quote, pos.realized_pnl, pos.funding_paid) = r[2:6]
                pos.margin_mode = r.margin_mode
                acct.positions[m.index] = pos
                if pos.size:
                    m.holders[acct.index] = pos
            elif isinstance(r, ApiKeyRecord):
                acct = eng._accounts[r.account_index]
                acct.keys[r.api_key_index] = ApiKey(r.pub_key, r.nonce)
            elif isinstance(r, OrderRecord):
                acct = eng._accounts[r.account_index]
                m = eng._markets[r.market_index]
                o = Order(
                    r.order_index,
                    acct,
                    r.client_order_index,
                    m,
                    r.is_ask,
                    r.price,
                    r.initial_base_amount,
                    r.order_expiry,
                    r.order_type,
                    r.time_in_force,
                    r.reduce_only,
                    r.priority,
                )
                o.remaining = r.remaining_base_amount
                eng._rest(m, o, acct, _position_for(acct, m))
            elif isinstance(r, FundingRecord):
                eng.funding.restore(r)
            else:
                raise TypeError(f"not a snapshot record: {type(r).__name__}")
        for lvl in eng._dirty_levels:
            lvl.dirty = False
        eng._dirty_levels.clear()
        for acct in eng._accounts.values():
            if any(p.size for p in acct.positions.values()):
                equity, num = eng._equity_mmr(acct)
                eng._arm(acct, max(0, equity * BPS - num))
        return eng

    def state_hash(self) -> bytes:
        """sha256 over the canonical records: equal for equal state, whatever the history."""
        return records_hash(self.records())

    def validate_internal_state(self) -> None:
        """Check every invariant; raise :class:`InvariantViolation` on the first broken one."""
        from ._validate import validate

        validate(self)


# ---- helpers -------------------------------------------------------------------------------------


def records_hash(records: Iterable[Any]) -> bytes:
    """sha256 over snapshot records in canonical order (:meth:`Engine.records`): the state hash.
    Anything that holds the same state in another shape (the snapshot holder's delta-applied
    tables) hashes its records with this, so equal state gives the equal hash."""
    h = hashlib.sha256()
    for r in records:
        h.update(type(r).__name__.encode())
        h.update("|".join(map(str, r)).encode())
        h.update(b"\n")
    return h.digest()


def _position_for(acct: Account, m: Market) -> Position:
    pos = acct.positions.get(m.index)
    if pos is None:
        pos = acct.positions[m.index] = Position(acct, m, m.default_imf)
    return pos


def _closed_quote(ai: int, m: Market, out: list[Any], start: int) -> int:
    """Sum of price*size of trades in ``out[start:]`` where ``ai`` is the taker in ``m``."""
    total = 0
    for e in out[start:]:
        if type(e) is TradeExecuted and e.taker_account_index == ai and e.market_index == m.index:
            total += e.price * e.size
    return total


def _iter_market_orders(m: Market) -> Iterator[Order]:
    for side in (m.bids, m.asks):
        for price in side.sorted_prices():
            o = side.levels[price].head
            while o is not None:
                yield o
                o = o.next


def _valid_pub_key(pub: object) -> bool:
    """40 bytes encoding a point of the group other than the neutral (Lighter's keys): a key no
    signature could verify under, or anyone could sign for, is refused with 21136. The check
    (~0.2 ms in C, a square root in GF(p^5)) is memoised per key: a pure function of the bytes,
    so replay stays deterministic."""
    if not isinstance(pub, bytes | bytearray) or len(pub) != _PUBLIC_KEY_SIZE:
        return False
    key = bytes(pub)
    ok = _KEY_CHECKS.get(key)
    if ok is None:
        if len(_KEY_CHECKS) >= 4096:
            _KEY_CHECKS.clear()
        ok = _KEY_CHECKS[key] = _is_valid_public_key(key)
    return ok


_KEY_CHECKS: dict[bytes, bool] = {}


def _valid_params(p: tuple[Any, ...], status: object) -> bool:
    """(min_base, min_quote, maker, taker, liq fee, default imf, min imf, mmf, closeout, dev)."""
    if not all(_is_int(x) for x in p) or not _is_int(status):
        return False
    min_base, min_quote, maker, taker, liq, dimf, mimf, mmf, cmf, dev = p
    return (
        1 <= min_base <= MAX_48
        and 0 <= min_quote <= MAX_I63
        and all(0 <= f <= PPM for f in (maker, taker, liq))
        and 0 <= cmf <= mmf
        and 0 < mmf <= mimf <= dimf <= BPS
        and 0 <= dev <= BPS
        and status in (0, 1)
    )


def _set_params(m: Market, p: tuple[Any, ...], status: int) -> None:
    (
        m.min_base,
        m.min_quote,
        m.maker_fee,
        m.taker_fee,
        m.liquidation_fee,
        m.default_imf,
        m.min_imf,
        m.maintenance_mf,
        m.closeout_mf,
        m.max_price_deviation,
    ) = (int(x) for x in p)
    m.status = int(status)


def _market_changed(m: Market) -> tuple[Any, ...]:
    return (
        m.index,
        m.symbol,
        m.price_decimals,
        m.size_decimals,
        m.min_base,
        m.min_quote,
        m.maker_fee,
        m.taker_fee,
        m.liquidation_fee,
        m.default_imf,
        m.min_imf,
        m.maintenance_mf,
        m.closeout_mf,
        m.max_price_deviation,
        m.mark,
        m.status,
    )


def _market_record(m: Market) -> MarketRecord:
    return _new(MarketRecord, (*_market_changed(m), m.last_trade_price, m.open_interest))


def _position_record(p: Position) -> PositionRecord:
    return _new(
        PositionRecord,
        (
            p.account.index,
            p.market.index,
            p.size,
            p.entry_quote,
            p.realized_pnl,
            p.funding_paid,
            p.imf,
            p.margin_mode,
        ),
    )


def _order_record(o: Order) -> OrderRecord:
    return _new(
        OrderRecord,
        (
            o.market.index,
            o.index,
            o.account.index,
            o.client_index,
            o.is_ask,
            o.price,
            o.initial,
            o.remaining,
            o.expiry,
            o.order_type,
            o.tif,
            o.reduce_only,
            o.priority,
        ),
    )
