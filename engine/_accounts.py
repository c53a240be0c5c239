"""Accounts, money and keys: deposits, transfers, withdrawals, leverage, API keys (cold paths).

Functions over the ``ExchangeState``, one per command; each returns the command's result
code and changes nothing when it refuses (a user tx's nonce is consumed by the gates first).

- Transfer / Withdraw: ``1 <= amount <= collateral`` and the initial margin met afterwards; the
  account's liquidation triggers are re-armed (its buffer shrank without a trade).
- UpdateLeverage: ``imf`` in ``[market min imf, 10_000]``; raising it must keep the cross IMR
  met (and an isolated position's own initial margin). ``margin_mode`` 0 cross / 1 isolated
  (lighter-go ``CrossMargin`` / ``IsolatedMargin``) changes only while the position is flat with
  no resting order in its market (MARGIN_MODE_LOCKED): a position never moves between pools
  with money or orders behind it. UpdateMargin moves collateral into or out of an open
  isolated position (:func:`update_margin`). ChangePubKey / RegisterApiKey: a new key starts at
  nonce -1.
- Deposit and RegisterApiKey (operator) create the account when missing; L1Deposit finds the
  account by its L1 address or creates it at the next free index (``max(index) + 1``, 1 for the
  first) with that address (``L1AddressSet``).
- ChangePubKey (Lighter's): the key slot ``api_key_index`` may be new (its last nonce is then
  -1); the nonce follows ``rules.accepted_nonce`` and is consumed only when the key is set (a
  refused ChangePubKey changes nothing, its nonce included); the tx's signature by the new key
  and its ``L1Sig`` by the account's L1 address are checked before execution, as every
  signature is (replica dry-run, sequencer), not here.

Cost: O(1) each, except the margin check after a mark move (O(markets the account holds)).
"""

from __future__ import annotations

from raydex.codecs import (
    ApiKeyChanged,
    ChangePubKey,
    CreateSubAccount,
    Deposit,
    L1AddressSet,
    L1Deposit,
    RegisterApiKey,
    SubAccountCreated,
    Transfer,
    UpdateLeverage,
    UpdateMargin,
    Withdraw,
)
from raydex.codecs.signing import PUBLIC_KEY_SIZE as _PUBLIC_KEY_SIZE
from raydex.codecs.signing import is_valid_public_key as _is_valid_public_key

from ._deltas import Deltas
from ._liquidation import rearm
from ._model import Account, ApiKey, Market, Position
from ._orders import auth, imr_ok, position_for
from ._state import (
    BPS,
    MAX_48,
    MAX_API_KEY_INDEX,
    MAX_I63,
    MAX_MASTER_ACCOUNT_INDEX,
    MAX_SHORT,
    MAX_SUB_ACCOUNTS,
    MIN_SUB_ACCOUNT_INDEX,
    PERPS_ROUTE,
    USDC_ASSET_INDEX,
    ExchangeState,
    is_int,
)
from .codes import (
    ACCOUNT_NOT_FOUND,
    FEATURE_NOT_SUPPORTED,
    INSUFFICIENT_BALANCE,
    INVALID_AMOUNT,
    INVALID_API_KEY_INDEX,
    INVALID_L1_SIGNATURE,
    INVALID_LEVERAGE,
    INVALID_NONCE,
    INVALID_PARAM,
    INVALID_PUBLIC_KEY,
    MARGIN_MODE_LOCKED,
    MARKET_NOT_FOUND,
    NO_ISOLATED_POSITION,
    NOT_ENOUGH_MARGIN,
    OK,
    SELF_TRANSFER,
    TOO_MANY_SUB_ACCOUNTS,
    TX_EXPIRED,
)
from .rules import accepted_nonce, initial_margin, product, transfer_fee, unrealized_pnl


def transfer(st: ExchangeState, c: Transfer, now: int, out: Deltas) -> int:
    """Transfer (Lighter's tx 12): USDC (asset 3) from the perps route to another account's perps
    route; any other asset or route is FEATURE_NOT_SUPPORTED (raydex has no spot markets or
    other assets). The sender pays ``usdc_amount`` plus ``usdc_fee`` (to the fee pool; at least
    ``rules.transfer_fee``, which ``transferFeeInfo`` reports) and must meet its initial margin
    afterwards. A transfer to another master's account needs an ``l1_sig`` from an account with
    an L1 address (INVALID_L1_SIGNATURE without one; its validity is checked before execution,
    as every signature is); one between accounts of one master needs none, nor does one from
    an account the operator made without an L1 address (its API key is all it has)."""
    ai, ki, to, asset, src_route, dst_route, amount, fee, _memo, l1_sig, exp_at, nonce, _s = c
    code = auth(st, ai, ki, nonce, exp_at, now, out)
    if code:
        return code
    if asset != USDC_ASSET_INDEX or src_route != PERPS_ROUTE or dst_route != PERPS_ROUTE:
        return FEATURE_NOT_SUPPORTED
    if amount < 1 or fee < 0 or _over_i63(amount) or _over_i63(fee):
        return INVALID_AMOUNT
    if to == ai:
        return SELF_TRANSFER
    dst = st.accounts.get(to)
    if dst is None:
        return ACCOUNT_NOT_FOUND
    src = st.accounts[ai]
    same_master = dst.master_index == src.master_index
    if not same_master and src.l1_address and not any(l1_sig):
        return INVALID_L1_SIGNATURE
    if fee < transfer_fee(same_master) or _over_i63(amount + fee):
        return INVALID_AMOUNT
    if _over_i63(dst.collateral + amount):
        return INVALID_AMOUNT
    code = debit(st, src, amount + fee)
    if code:
        return code
    dst.collateral += amount
    st.mark_account(dst)
    if fee:
        st.fee_pool += fee
        st.mark_exchange()
    return OK


def withdraw(st: ExchangeState, c: Withdraw, now: int, out: Deltas) -> int:
    """Withdraw (Lighter's tx 13): USDC (asset 3) from the perps route; any other asset or route
    is FEATURE_NOT_SUPPORTED."""
    ai, ki, asset, route, amount, exp_at, nonce, _s = c
    code = auth(st, ai, ki, nonce, exp_at, now, out)
    if code:
        return code
    if asset != USDC_ASSET_INDEX or route != PERPS_ROUTE:
        return FEATURE_NOT_SUPPORTED
    if amount < 1 or _over_i63(amount):
        return INVALID_AMOUNT
    code = debit(st, st.accounts[ai], amount)
    if code:
        return code
    st.total_withdrawals += amount
    st.mark_exchange()
    return OK


def create_sub_account(st: ExchangeState, c: CreateSubAccount, now: int, out: Deltas) -> int:
    """CreateSubAccount (Lighter's tx 9), signed by an API key of the master: a new account at
    the next free sub-account index, counting down from ``MAX_ACCOUNT_INDEX`` (2^48 - 2, as
    Lighter allocates them; never below ``MIN_SUB_ACCOUNT_INDEX``, 2^47), with the master's L1
    address, no collateral and no key (``SubAccountCreated``). Only a master opens one
    (INVALID_PARAM), at most ``MAX_SUB_ACCOUNTS`` each (TOO_MANY_SUB_ACCOUNTS). The
    sub-account gets API keys as any account does: a ChangePubKey authorised by the L1
    address it shares with its master."""
    ai, ki, exp_at, nonce, _s = c
    code = auth(st, ai, ki, nonce, exp_at, now, out)
    if code:
        return code
    master = st.accounts[ai]
    if master.master_index != master.index or ai > MAX_MASTER_ACCOUNT_INDEX:
        return INVALID_PARAM
    if master.sub_accounts >= MAX_SUB_ACCOUNTS:
        return TOO_MANY_SUB_ACCOUNTS
    sub = st.next_sub_index
    while sub in st.accounts:  # (an index the operator funded before: skipped)
        sub -= 1
    if sub < MIN_SUB_ACCOUNT_INDEX:
        return TOO_MANY_SUB_ACCOUNTS
    acct = account_for(st, sub)
    acct.master_index = master.index
    acct.l1_address = master.l1_address
    master.sub_accounts += 1
    st.next_sub_index = sub - 1
    out.event(SubAccountCreated(sub, master.index, master.l1_address or bytes(20)))
    return OK


def _over_i63(x: int) -> bool:
    """``x > MAX_I63``, the short constant tested first: compiled, a comparison with ``MAX_I63``
    (beyond a short int) boxes both sides and calls ``PyObject_RichCompare``."""
    return x > MAX_SHORT and x > MAX_I63


def debit(st: ExchangeState, acct: Account, amount: int) -> int:
    """Take ``amount`` out of ``acct`` (transfer, withdrawal) if it has it and still meets its
    initial margin afterwards; its liquidation triggers are re-armed. 0, or the refusal."""
    if amount > acct.collateral:
        return INSUFFICIENT_BALANCE
    if not imr_ok(st, acct, amount):
        return NOT_ENOUGH_MARGIN
    acct.collateral -= amount
    rearm(st, acct)
    st.mark_account(acct)
    return 0


def update_leverage(st: ExchangeState, c: UpdateLeverage, now: int, out: Deltas) -> int:
    ai, ki, mi, imf, mode, exp_at, nonce, _s = c
    code = auth(st, ai, ki, nonce, exp_at, now, out)
    if code:
        return code
    m = st.markets.get(mi)
    if m is None:
        return MARKET_NOT_FOUND
    if mode != 0 and mode != 1:
        return INVALID_PARAM
    if not m.min_imf <= imf <= BPS:
        return INVALID_LEVERAGE
    acct = st.accounts[ai]
    new_pos = mi not in acct.positions
    pos = position_for(acct, m)
    old_mode = pos.margin_mode
    if mode != old_mode and (pos.size or _has_orders_in(acct, m)):
        if new_pos:  # (cannot be: a new position is flat without orders)
            acct.drop_position(mi)
        return MARGIN_MODE_LOCKED
    old = pos.imf
    _set_mode(acct, pos, mode)
    pos.imf = imf
    acct.c_epoch = -1
    if imf > old and (not imr_ok(st, acct) or not isolated_im_ok(pos)):
        pos.imf = old
        _set_mode(acct, pos, old_mode)
        acct.c_epoch = -1
        if new_pos:  # a rejected tx leaves no trace (see _orders._place)
            acct.drop_position(mi)
        return NOT_ENOUGH_MARGIN
    if mode != old_mode:
        rearm(st, acct)
    st.mark_position(pos)
    return OK


def _set_mode(acct: Account, pos: Position, mode: int) -> None:
    if mode != pos.margin_mode:
        acct.isolated += 1 if mode else -1
        pos.margin_mode = mode


def _has_orders_in(acct: Account, m: Market) -> bool:
    """``acct`` rests an order in ``m`` (reduce-only ones included). O(its orders)."""
    o = acct.first_order
    while o is not None:
        if o.market is m:
            return True
        o = o.acct_next
    return False


def isolated_im_ok(pos: Position) -> bool:
    """An isolated position's equity (its collateral plus unrealized PnL) meets its initial
    margin at the mark; True for a cross or a flat one."""
    s = pos.size
    if not pos.margin_mode or not s:
        return True
    mq = pos.market.mark_q
    equity = pos.allocated + unrealized_pnl(s, mq, pos.entry_quote)
    return product(equity, BPS) >= initial_margin(s if s > 0 else -s, mq, pos.imf)


def update_margin(st: ExchangeState, c: UpdateMargin, now: int, out: Deltas) -> int:
    """UpdateMargin (Lighter's tx 29): ``usdc_amount`` into (``direction`` 1) or out of (0) the
    collateral of the account's open isolated position in ``market_index``, from or to its cross
    collateral. Adding needs the amount in the cross collateral with its initial margin still
    met afterwards (as a withdrawal); removing, the amount in the position's collateral with
    the position's initial margin still met afterwards (equity = collateral + unrealized PnL,
    so profit may come out). Either way the account is re-armed."""
    ai, ki, mi, amount, direction, exp_at, nonce, _s = c
    code = auth(st, ai, ki, nonce, exp_at, now, out)
    if code:
        return code
    m = st.markets.get(mi)
    if m is None:
        return MARKET_NOT_FOUND
    if not 1 <= amount <= MAX_I63:
        return INVALID_AMOUNT
    if direction != 0 and direction != 1:
        return INVALID_PARAM
    acct = st.accounts[ai]
    pos = acct.positions.get(mi)
    if pos is None or not pos.margin_mode or not pos.size:
        return NO_ISOLATED_POSITION
    if direction:
        if pos.allocated + amount > MAX_I63:
            return INVALID_AMOUNT
        code = debit(st, acct, amount)
        if code:
            return code
        pos.allocated += amount
    else:
        if amount > pos.allocated:
            return INSUFFICIENT_BALANCE
        pos.allocated -= amount
        if not isolated_im_ok(pos):
            pos.allocated += amount
            return NOT_ENOUGH_MARGIN
        acct.collateral += amount
        rearm(st, acct)
        st.mark_account(acct)
    st.mark_position(pos)
    return OK


def change_pub_key(st: ExchangeState, c: ChangePubKey, now: int, out: Deltas) -> int:
    ai, ki, pub, _l1_sig, exp_at, nonce, _s = c
    acct = st.accounts.get(ai)
    if acct is None:
        return ACCOUNT_NOT_FOUND
    if not is_int(ki) or not 0 <= ki <= MAX_API_KEY_INDEX:
        return INVALID_API_KEY_INDEX
    key = acct.keys.get(ki)
    last = acct.last_nonce(key) if key is not None else -1
    n = accepted_nonce(last, nonce)
    if n < 0:
        return INVALID_NONCE
    if not exp_at >= now:
        return TX_EXPIRED
    if not valid_pub_key(pub):
        return INVALID_PUBLIC_KEY
    set_key(st, acct, ki, bytes(pub), out)
    acct.set_nonce(acct.keys[ki], n)
    out.nonce_updated(ai, ki, n)
    return OK


def set_key(st: ExchangeState, acct: Account, ki: int, pub: bytes, out: Deltas) -> None:
    key = acct.keys.get(ki)
    if key is None:
        key = ApiKey(pub)
        acct.add_key(ki, key)
        out.nonce_updated(acct.index, ki, key.nonce)
    else:
        key.pub_key = pub
    out.event(ApiKeyChanged(acct.index, ki, pub))


def fits(st: ExchangeState, acct: Account | None, amount: int) -> bool:
    """A deposit of ``amount`` leaves the account's collateral and the exchange's total deposits
    within their i64 fields (``BalanceChanged``, ``ExchangeBalancesChanged``)."""
    held = 0 if acct is None else acct.collateral
    return held + amount <= MAX_I63 and st.total_deposits + amount <= MAX_I63


def _may_exist(st: ExchangeState, ai: int) -> bool:
    """An operator command may name ``ai``: an account that exists, or a master's index (the
    operator creates masters; sub-accounts come from CreateSubAccount)."""
    return ai <= MAX_MASTER_ACCOUNT_INDEX or ai in st.accounts


def account_for(st: ExchangeState, ai: int) -> Account:
    acct = st.accounts.get(ai)
    if acct is None:
        acct = Account(ai)
        st.add_account(acct)
        st.mark_account(acct)
    return acct


def deposit(st: ExchangeState, c: Deposit, now: int, out: Deltas) -> int:
    ai, amount = c
    if not is_int(ai) or not 0 <= ai <= MAX_48 or not _may_exist(st, ai):
        return INVALID_PARAM
    if not is_int(amount) or not 1 <= amount <= MAX_I63:
        return INVALID_AMOUNT
    if not fits(st, st.accounts.get(ai), amount):
        return INVALID_AMOUNT
    acct = account_for(st, ai)
    acct.collateral += amount
    st.total_deposits += amount
    st.mark_exchange()
    st.mark_account(acct)
    return OK


def l1_deposit(st: ExchangeState, c: L1Deposit, now: int, out: Deltas) -> int:
    addr, amount = c
    if not isinstance(addr, bytes) or len(addr) != 20 or addr == bytes(20):
        return INVALID_PARAM
    if not is_int(amount) or not 1 <= amount <= MAX_I63:
        return INVALID_AMOUNT
    ai = st.by_l1.get(addr)
    if not fits(st, None if ai is None else st.accounts[ai], amount):
        return INVALID_AMOUNT
    if ai is None:
        ai = max((a for a in st.accounts if a <= MAX_MASTER_ACCOUNT_INDEX), default=0) + 1
        if ai > MAX_MASTER_ACCOUNT_INDEX:
            return INVALID_PARAM
        acct = account_for(st, ai)
        acct.l1_address = addr
        st.by_l1[addr] = ai
        out.event(L1AddressSet(ai, addr))
    else:
        acct = st.accounts[ai]
    acct.collateral += amount
    st.total_deposits += amount
    st.mark_exchange()
    st.mark_account(acct)
    return OK


def register_api_key(st: ExchangeState, c: RegisterApiKey, now: int, out: Deltas) -> int:
    ai, ki, pub = c
    if not is_int(ai) or not 0 <= ai <= MAX_48 or not _may_exist(st, ai):
        return INVALID_PARAM
    if not is_int(ki) or not 0 <= ki <= MAX_API_KEY_INDEX:
        return INVALID_API_KEY_INDEX
    if not valid_pub_key(pub):
        return INVALID_PUBLIC_KEY
    set_key(st, account_for(st, ai), ki, bytes(pub), out)
    return OK


def valid_pub_key(pub: object) -> bool:
    """40 bytes encoding a point of the group other than the neutral (Lighter's keys): a key no
    signature could verify under, or anyone could sign for, is refused with 21136. The check
    (costly: a square root in GF(p^5)) is memoised per key: a pure function of the bytes, so
    replay stays deterministic."""
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
