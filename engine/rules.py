"""The exchange's pure order and margin rules, written once: the engine and the replica's dry-run
(``raydex.actors.replica``) both call these, so a rule cannot drift between them.

Everything is an integer: prices in ticks, sizes in lots, money in micro-USDC, fractions in bps
(``BPS`` = 1e4), fees in ppm (``PPM`` = 1e6). Functions take plain ints (no engine objects), never
raise, allocate nothing and cost O(1).

- Notional: ``price * size * mult`` micro-USDC with ``mult = notional_multiplier(pd, sd)``
  ``= 10**(6 - pd - sd)``; ``mark_q = mark * mult`` is one lot's value at the mark.
- Worst-case exposure (:func:`exposure`): ``max(|size + bids|, |asks - size|)`` lots, the position
  if every resting non-reduce-only order of one side filled. Initial margin is charged on it.
- Account sums (cross margin), one term per position (:func:`unrealized_pnl`,
  :func:`maintenance_margin`, :func:`initial_margin`): ``equity = collateral + sum(upnl)``; an
  account is liquidatable while ``equity * BPS < sum(maintenance)``; the IMR numerator is
  ``sum(initial)`` (micro-USDC * bps).
- An order that raises the worst case by ``grow`` lots passes :func:`initial_margin_ok`:
  ``equity - adverse - fee >= IMR`` after it, ``adverse`` the loss of filling it at its estimated
  price against the mark, ``fee`` its taker fee (:func:`fee`, rounded up).
- Static order checks, in the engine's order: :func:`order_kind_code` (order type / time in force),
  :func:`order_amount_code` (minimum size and notional, then a limit order's price band: a buy
  at most ``mark * (1 + max_deviation / 1e4)``, a sell at least ``mark * (1 - max_deviation /
  1e4)``; a market order's price limits its average fill and has no band),
  :func:`reduce_only_increases`.
- Conditional orders (types 2-6) and grouped orders (tx 28), checked before they wait:
  :func:`conditional_order_code` and :func:`grouped_orders_code`, lighter-go's ``Validate``
  rules (``types/txtypes/create_order.go``, ``create_grouped_orders.go``) plus the TWAP window
  (``TWAP_MIN_MS`` .. ``TWAP_MAX_MS`` from now); their fill-time checks are the order checks
  above, when they fire. :func:`twap_slice` is a TWAP's schedule.
- Transfers: :func:`transfer_fee`, the least ``USDCFee`` a transfer carries.

Caller duty: pass the market's current values (mark, fractions, fees); the functions hold no state.
"""

from __future__ import annotations

from operator import mul
from typing import Final

from mypy_extensions import i64

from raydex.codecs import BPS as _BPS
from raydex.codecs import MAX_SKIP_NONCE as _MAX_SKIP_NONCE
from raydex.codecs import PPM as _PPM
from raydex.codecs import SKIP_NONCE_FLAG as _SKIP_NONCE_FLAG
from raydex.codecs import USDC_DECIMALS as _USDC_DECIMALS

from .codes import (
    BELOW_MIN_AMOUNT,
    DUPLICATE_CLIENT_ORDER_INDEX,
    FAT_FINGER_PRICE,
    GROUP_MARKET_MISMATCH,
    GTT,
    INVALID_CLIENT_ORDER_INDEX,
    INVALID_EXPIRY,
    INVALID_GROUP_BASE_AMOUNT,
    INVALID_GROUP_SIDE,
    INVALID_GROUP_SIZE,
    INVALID_GROUPING_TYPE,
    INVALID_ORDER_TYPE,
    INVALID_PARAM,
    INVALID_PRICE,
    INVALID_REDUCE_ONLY,
    INVALID_SIZE,
    INVALID_TIME_IN_FORCE,
    INVALID_TRIGGER_PRICE,
    IOC,
    LIMIT,
    MARKET,
    OCO,
    OTO,
    OTOCO,
    POST_ONLY,
    STOP_LOSS,
    STOP_LOSS_LIMIT,
    TAKE_PROFIT,
    TAKE_PROFIT_LIMIT,
    TWAP,
)

__all__ = [
    "MAX_GROUPED_ORDERS",
    "MAX_PRICE",
    "TWAP_CATCH_UP",
    "TWAP_MAX_MS",
    "TWAP_MIN_MS",
    "TWAP_SLICE_MS",
    "conditional_order_code",
    "fires_when_above",
    "grouped_orders_code",
    "twap_slice",
    "MAX_SKIP_NONCE",
    "SKIP_NONCE_FLAG",
    "accepted_nonce",
    "exposure",
    "fee",
    "initial_margin",
    "initial_margin_ok",
    "maintenance_margin",
    "notional_multiplier",
    "order_amount_code",
    "order_kind_code",
    "product",
    "reduce_only_increases",
    "transfer_fee",
    "unrealized_pnl",
]

BPS: Final[int] = _BPS
PPM: Final[int] = _PPM
USDC_DECIMALS: Final[int] = _USDC_DECIMALS
#: Highest price in ticks (the wire's u32): order prices, marks and liquidation bounds.
MAX_PRICE: Final = 2**32 - 1
#: Highest size in lots and client order index (2**48 - 1, the wire's range).
MAX_LOTS: Final = 2**48 - 1
#: Highest time in ms (the wire's i64).
MAX_I63: Final = 2**63 - 1
#: The largest int a compiled build keeps unboxed: a compare with ``MAX_I63`` boxes both sides,
#: so range checks test against this first (``_state.MAX_SHORT``).
MAX_SHORT: Final = 2**62 - 1
#: A TWAP slices every ``TWAP_SLICE_MS`` of block time from its placement to its end, which is
#: ``TWAP_MIN_MS`` .. ``TWAP_MAX_MS`` after its placement (Lighter: "a market order every 30
#: seconds", over 5 minutes to 24 hours); a slice catching up on a late schedule is at most
#: ``TWAP_CATCH_UP`` nominal slices.
TWAP_SLICE_MS: Final = 30 * 1_000
TWAP_MIN_MS: Final = 5 * 60_000
TWAP_MAX_MS: Final = 24 * 3_600_000
TWAP_CATCH_UP: Final = 3
#: Most orders in a group (lighter-go ``MaxGroupedOrderCount``).
MAX_GROUPED_ORDERS: Final = 3
SKIP_NONCE_FLAG: Final[int] = _SKIP_NONCE_FLAG
MAX_SKIP_NONCE: Final[int] = _MAX_SKIP_NONCE
#: :func:`product`'s machine-multiply bounds: ``|a| < 2**41`` and ``|b| < 2**21``, so the
#: product fits 62 bits (a mypyc short int) and cannot overflow an i64.
WIDE: Final = 2**41
NARROW: Final = 2**21
#: :func:`product`'s second tier, ``|a| < 2**48`` and ``|b| < 2**14``: an amount of up to ~281
#: million USDC (micro-USDC) times ``BPS``, the account sums of large accounts.
WIDER: Final = 2**48
NARROWER: Final = 2**14


def product(a: int, b: int) -> int:
    """``a * b``, exact; ``b`` is the narrow factor (a fee in ppm, a fraction in bps, a price).

    Why a function: compiled (mypyc), an ``int`` product is one machine multiply only while both
    operands are in ``[0, 2**30)``; otherwise both are boxed and ``PyNumber_Multiply`` runs (a
    notional times a fee, a margin sum times ``BPS``). Here, while the operands are within
    ``WIDE`` / ``NARROW`` (or ``WIDER`` / ``NARROWER``: an equity of more than 2.2 million USDC
    times ``BPS``), they are multiplied as ``i64`` (one instruction, no boxing; the bounds keep
    the product below 2**62); outside them, Python's exact product. Interpreted, the bounds
    check costs more than it saves, so an interpreted ``rules`` binds ``product`` to
    ``operator.mul``, the same value (below)."""
    if -WIDE < a < WIDE and -NARROW < b < NARROW:
        x: i64 = a
        y: i64 = b
        return x * y
    if -WIDER < a < WIDER and -NARROWER < b < NARROWER:  # an amount times BPS (equity * BPS)
        u: i64 = a
        v: i64 = b
        return u * v
    return a * b


if __file__.endswith(".py"):  # interpreted: modules importing ``product`` get ``operator.mul``
    globals()["product"] = mul


def accepted_nonce(last: int, nonce: int) -> int:
    """The nonce a user tx consumes given its key's ``last`` used nonce, or -1 if it is refused
    (INVALID_NONCE). Lighter's rule: exactly ``last + 1``; with the SkipNonce attribute
    (``nonce`` carries ``SKIP_NONCE_FLAG``) any nonce ``last < n < MAX_SKIP_NONCE``. The engine's
    gate and the replica's dry-run (against its pending nonces) both call this."""
    if nonce == last + 1:
        return nonce
    if nonce & SKIP_NONCE_FLAG:
        n = nonce ^ SKIP_NONCE_FLAG
        if last < n < MAX_SKIP_NONCE:
            return n
    return -1


def notional_multiplier(price_decimals: int, size_decimals: int) -> int:
    """Micro-USDC per (tick * lot) of a market quoting ``price_decimals`` / ``size_decimals``."""
    mult: int = 10 ** (USDC_DECIMALS - price_decimals - size_decimals)
    return mult


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


def unrealized_pnl(size: int, mark_q: int, entry_quote: int) -> int:
    """Unrealized PnL (micro-USDC) of ``size`` signed lots at ``mark_q`` = mark * mult."""
    return product(size, mark_q) - entry_quote


def maintenance_margin(lots: int, mark_q: int, mmf: int) -> int:
    """MMR numerator (micro-USDC * bps) of ``lots`` (``|size|``) at ``mmf`` bps."""
    return product(product(lots, mark_q), mmf)


def initial_margin(worst: int, mark_q: int, imf: int) -> int:
    """IMR numerator (micro-USDC * bps) of ``worst`` lots (:func:`exposure`) at ``imf`` bps."""
    return product(product(worst, mark_q), imf)


def fee(notional: int, ppm: int) -> int:
    """Fee (micro-USDC) of ``notional`` at ``ppm``, rounded up (the exchange never undercharges)."""
    # ceil(a / b) == (a + b - 1) // b for any integer a and b > 0
    return (product(notional, ppm) + PPM - 1) // PPM


def initial_margin_ok(
    equity: int,
    im_num: int,
    mark: int,
    mult: int,
    imf: int,
    taker_fee: int,
    is_ask: int,
    q: int,
    est: int,
    grow: int,
) -> bool:
    """``equity - adverse - fee >= IMR`` after an order of ``q`` lots at estimated price ``est``
    that raises the worst case by ``grow`` lots; ``im_num`` is the account's IMR numerator
    before it, ``imf`` the position's initial margin fraction."""
    # the adverse move, counted only when it is a loss (q, mult >= 1: its sign is gap's)
    gap = mark - est if is_ask else est - mark
    qm = q * mult
    if gap > 0:
        equity -= product(qm, gap)
    equity -= fee(product(qm, est), taker_fee)
    return product(equity, BPS) >= im_num + product(product(grow, mark * mult), imf)


def order_kind_code(order_type: int, tif: int) -> int:
    """0, or why the pair is refused: Limit takes IOC, GoodTillTime or PostOnly; Market takes IOC
    only (INVALID_TIME_IN_FORCE); other types are INVALID_ORDER_TYPE."""
    if order_type == LIMIT:
        if tif != GTT and tif != IOC and tif != POST_ONLY:
            return INVALID_TIME_IN_FORCE
        return 0
    if order_type == MARKET:
        return 0 if tif == IOC else INVALID_TIME_IN_FORCE
    return INVALID_ORDER_TYPE


def order_amount_code(
    size: int,
    price: int,
    is_ask: int,
    order_type: int,
    mult: int,
    min_base: int,
    min_quote: int,
    mark: int,
    max_deviation: int,
) -> int:
    """0, or BELOW_MIN_AMOUNT (under the market's minimum size in lots or notional in
    micro-USDC), or FAT_FINGER_PRICE (a limit order more aggressive than the band around the
    mark: a buy's ``(price - mark) * 1e4 > mark * dev``, a sell's ``(mark - price) * 1e4 > mark *
    dev``; a passive price is not bounded), checked in that order.

    A Market order's price is the limit of its average fill (``_orders._match``), any value the
    wire takes: no band, and its notional is counted at the mark (at its price while the market
    has none)."""
    px = price
    if order_type == MARKET and mark:
        px = mark
    # px * (size * mult), not (px * size) * mult: the same integer, and compiled its two
    # operands stay small (a mypyc int product is fast only while both are below 2**30)
    if size < min_base or px * (size * mult) < min_quote:
        return BELOW_MIN_AMOUNT
    if order_type == MARKET:
        return 0
    dev = mark - price if is_ask else price - mark
    if dev > 0 and dev * BPS > mark * max_deviation:
        return FAT_FINGER_PRICE
    return 0


def transfer_fee(same_master: bool) -> int:
    """The fee (micro-USDC) a Transfer must carry at least (its ``USDCFee``; what it carries is
    charged, to the fee pool): raydex's rule is none, between the accounts of one master and to
    anyone else, as a transfer inside raydex costs it no bridge or gas."""
    return 0


def reduce_only_increases(size: int, is_ask: int) -> bool:
    """True if a reduce-only order on this side cannot reduce the position of ``size`` lots (it is
    flat or on the order's side)."""
    return (size <= 0) if is_ask else (size >= 0)


def fires_when_above(order_type: int, is_ask: int) -> bool:
    """True if a stop-loss / take-profit of this type and side fires when the mark rises to its
    trigger (``mark >= trigger``), False if when it falls to it (``mark <= trigger``): a stop
    sells as the mark falls and buys as it rises, a take-profit the other way round."""
    stop = order_type in (STOP_LOSS, STOP_LOSS_LIMIT)
    return (not is_ask) if stop else bool(is_ask)


def conditional_order_code(
    order_type: int,
    tif: int,
    size: int,
    price: int,
    trigger_price: int,
    reduce_only: int,
    order_expiry: int,
    now: int,
) -> int:
    """0, or why a stop-loss / take-profit (market 2, 4; limit 3, 5) or TWAP (6) is refused before
    it waits, in lighter-go's order (``create_order.go`` ``Validate``): the size (0 only
    reduce-only: the position's size when it fires; a TWAP needs one), the price, the time in
    force (market stop / take-profit: IOC; TWAP: GoodTillTime), the trigger price (required,
    1 .. MAX_PRICE; none on a TWAP), the expiry (an absolute time >= now: Lighter's nil, 0 or
    -1, is refused; a TWAP's is its end, ``TWAP_MIN_MS`` .. ``TWAP_MAX_MS`` from now)."""
    if reduce_only != 0 and reduce_only != 1:
        return INVALID_PARAM
    if not 0 <= size <= MAX_LOTS or (size == 0 and (not reduce_only or order_type == TWAP)):
        return INVALID_SIZE
    if not 1 <= price <= MAX_PRICE:
        return INVALID_PRICE
    if order_type in (STOP_LOSS, TAKE_PROFIT):
        if tif != IOC:
            return INVALID_TIME_IN_FORCE
    elif order_type in (STOP_LOSS_LIMIT, TAKE_PROFIT_LIMIT):
        if tif != IOC and tif != GTT and tif != POST_ONLY:
            return INVALID_TIME_IN_FORCE
    elif order_type == TWAP:
        if tif != GTT:
            return INVALID_TIME_IN_FORCE
        if trigger_price != 0:
            return INVALID_TRIGGER_PRICE
        if not now + TWAP_MIN_MS <= order_expiry <= now + TWAP_MAX_MS:
            return INVALID_EXPIRY
        return 0
    else:
        return INVALID_ORDER_TYPE
    if not 1 <= trigger_price <= MAX_PRICE:
        return INVALID_TRIGGER_PRICE
    if order_expiry < now or (order_expiry > MAX_SHORT and order_expiry > MAX_I63):
        return INVALID_EXPIRY
    return 0


def _entry_code(o: tuple[int, ...]) -> int:
    """lighter-go ``ValidateParentOrder``: a grouped entry is a market order (IOC, no expiry,
    no trigger) or a limit order (no trigger; an expiry exactly when it is not IOC)."""
    otype, tif, trigger, expiry = o[5], o[6], o[8], o[9]
    if otype == MARKET:
        if tif != IOC:
            return INVALID_TIME_IN_FORCE
        if expiry != 0:
            return INVALID_EXPIRY
        if trigger != 0:
            return INVALID_TRIGGER_PRICE
        return 0
    if otype == LIMIT:
        if trigger != 0:
            return INVALID_TRIGGER_PRICE
        if (tif == IOC) != (expiry == 0):
            return INVALID_EXPIRY
        return 0
    return INVALID_ORDER_TYPE


def _child_code(o: tuple[int, ...], now: int) -> int:
    """lighter-go ``ValidateChildOrder``: a stop-loss or take-profit (market or limit)."""
    otype = o[5]
    if otype < STOP_LOSS or otype > TAKE_PROFIT_LIMIT:
        return INVALID_ORDER_TYPE
    return conditional_order_code(otype, o[6], o[2], o[3], o[8], o[7], o[9], now)


def _siblings_code(orders: list[tuple[int, ...]], now: int) -> int:
    """lighter-go ``ValidateSiblingOrders``: two children, one stop-loss and one take-profit."""
    if len(orders) != 2:
        return INVALID_GROUP_SIZE
    stop = profit = False
    for o in orders:
        code = _child_code(o, now)
        if code:
            return code
        if o[5] in (STOP_LOSS, STOP_LOSS_LIMIT):
            stop = True
        else:
            profit = True
    return 0 if stop and profit else INVALID_ORDER_TYPE


def grouped_orders_code(grouping_type: int, orders: list[tuple[int, ...]], now: int) -> int:
    """0, or why a CreateGroupedOrders is refused (lighter-go ``create_grouped_orders.go``
    ``Validate``), checking ``orders`` (each ``codecs.OrderInfo``: market, client order index,
    base amount, price, is_ask, type, time in force, reduce-only, trigger price, expiry) in its
    order: the count (1 .. 3), one market, client order indexes distinct, each order's ranges,
    then per grouping type: OCO (2) a stop-loss and a take-profit, same size, same side, both
    reduce-only, same expiry; OTO (1) an entry and a child with no size on the other side, their
    expiries equal when the entry has one; OTOCO (3) an entry and two such children with one
    expiry. Each child also passes :func:`conditional_order_code`. What needs the state (the
    market, the position, margin) is the engine's, at placement."""
    if not 1 <= len(orders) <= MAX_GROUPED_ORDERS:
        return INVALID_GROUP_SIZE
    market = orders[0][0]
    for k, o in enumerate(orders):
        mi, coi, size, price, is_ask, _otype, tif, ro, trigger, expiry = o
        if mi != market:
            return GROUP_MARKET_MISMATCH
        if coi:
            if not 0 < coi <= MAX_LOTS:
                return INVALID_CLIENT_ORDER_INDEX
            for j in range(k):  # (at most 2 before it: no set built per group)
                if orders[j][1] == coi:
                    return DUPLICATE_CLIENT_ORDER_INDEX
        if (ro != 1 and size == 0) or not 0 <= size <= MAX_LOTS:
            return INVALID_SIZE
        if not 1 <= price <= MAX_PRICE:
            return INVALID_PRICE
        if is_ask != 0 and is_ask != 1:
            return INVALID_PARAM
        if tif != IOC and tif != GTT and tif != POST_ONLY:
            return INVALID_TIME_IN_FORCE
        if ro != 0 and ro != 1:
            return INVALID_PARAM
        if expiry < 0 or (expiry > MAX_SHORT and expiry > MAX_I63):
            return INVALID_EXPIRY
        if not 0 <= trigger <= MAX_PRICE:
            return INVALID_TRIGGER_PRICE
    if grouping_type == OCO:
        if len(orders) != 2:
            return INVALID_GROUP_SIZE
        a, b = orders
        if a[2] != b[2]:
            return INVALID_GROUP_BASE_AMOUNT
        if a[4] != b[4]:
            return INVALID_GROUP_SIDE
        if a[7] != 1 or b[7] != 1:
            return INVALID_REDUCE_ONLY
        if a[9] != b[9]:
            return INVALID_EXPIRY
        return _siblings_code(orders, now)
    if grouping_type == OTO:
        if len(orders) != 2:
            return INVALID_GROUP_SIZE
        entry, child = orders
        if child[2] != 0:
            return INVALID_GROUP_BASE_AMOUNT
        if entry[4] == child[4]:
            return INVALID_GROUP_SIDE
        if entry[9] != 0 and entry[9] != child[9]:
            return INVALID_EXPIRY
        return _entry_code(entry) or _child_code(child, now)
    if grouping_type == OTOCO:
        if len(orders) != 3:
            return INVALID_GROUP_SIZE
        entry, one, two = orders
        if one[2] != 0 or two[2] != 0:
            return INVALID_GROUP_BASE_AMOUNT
        if entry[4] == one[4] or entry[4] == two[4]:
            return INVALID_GROUP_SIDE
        if one[9] != two[9]:
            return INVALID_EXPIRY
        if entry[9] != 0 and entry[9] != one[9]:
            return INVALID_EXPIRY
        return _entry_code(entry) or _siblings_code(orders[1:], now)
    return INVALID_GROUPING_TYPE


def twap_slice(size: int, filled: int, start: int, end: int, now: int, min_base: int) -> int:
    """The lots a TWAP's slice at ``now`` takes: what brings its fill to the schedule, ``size *
    k / n`` after the ``k``-th of ``n = (end - start) // TWAP_SLICE_MS`` slices (k = slices due
    by ``now``), at least the market's minimum size, at most ``TWAP_CATCH_UP`` nominal slices
    (``ceil(size / n)``) and never more than is left; 0 when it is on schedule already."""
    n = (end - start) // TWAP_SLICE_MS
    if n < 1:
        n = 1
    k = (now - start) // TWAP_SLICE_MS
    if k > n:
        k = n
    behind = size * k // n - filled
    if behind <= 0:
        return 0
    left = size - filled
    cap = TWAP_CATCH_UP * -(-size // n)
    q = behind if behind < cap else cap
    if q < min_base:
        q = min_base
    return q if q < left else left
