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
    FAT_FINGER_PRICE,
    GTT,
    INVALID_ORDER_TYPE,
    INVALID_TIME_IN_FORCE,
    IOC,
    LIMIT,
    MARKET,
    POST_ONLY,
)

__all__ = [
    "MAX_PRICE",
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
