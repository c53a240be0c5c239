"""The dry-run: the result code the sequencer would most likely answer for a tx, from the caches.

Checks, in order: operator-only / unsigned types, account, API key (21108), signature (21120; a
ChangePubKey: the new key's, then its ``L1Sig``, 21831), nonce against the pending next nonce
(21104; ``rules.accepted_nonce``, so a SkipNonce tx needs only to be above the last pending or
used one), too many pending (21506), deadline (21810), then per type: market (a cancel-all's
market too), order fields, the limit-order price band, reduce-only and initial margin (21739). A
stop-loss / take-profit / TWAP (types 2-6) and a CreateGroupedOrders pass the engine's placement
rules (``rules.conditional_order_code``, ``rules.grouped_orders_code``, client order indexes over
resting and waiting orders, reduce-only against the position; a grouped entry is checked as a
CreateOrder); their fill-time checks happen when they fire. What needs the live book or an
order's current state (post-only crossing, fills, a modify's order and its version) is left to
the engine. UpdateLeverage: the fraction's range and the margin mode's lock (21841); UpdateMargin:
an open isolated position (21842), the amount and the margin it leaves; Transfer and Withdraw:
USDC on the perps route (21840, :func:`explain` names what was asked), the receiver, a transfer's
L1 signature (21831), the amount and the margin it leaves;
CreateSubAccount: a master (20001) under its limit (21843).
The rules are the engine's own (``raydex.engine.rules``); the sums come from the caches
(``margin.equity_and_requirement``: cross and isolated margin as the engine keeps them).

Reads the state, changes nothing: the caller notes a passed tx as sent (``note_sent``). Cost:
one Lighter signature check plus O(markets the account holds or rests orders in).
"""

from __future__ import annotations

from typing import Any

from raydex.codecs import (
    ALL_MARKETS,
    BPS,
    MAX_SUB_ACCOUNTS,
    OPERATOR_TX_TYPES,
    PERPS_ROUTE,
    USDC_ASSET_INDEX,
    CancelAllOrders,
    CancelOrder,
    ChangePubKey,
    CreateGroupedOrders,
    CreateOrder,
    CreateSubAccount,
    GroupingType,
    ModifyOrder,
    OrderType,
    ResultCode,
    Transfer,
    UpdateLeverage,
    UpdateMargin,
    Withdraw,
    grouped_canonical,
    grouped_orders,
    is_signed_type,
    l1_signer,
    signer_key,
    transfer_l1_signer,
    tx_type_of,
)
from raydex.engine.rules import (
    accepted_nonce,
    conditional_order_code,
    exposure,
    grouped_orders_code,
    initial_margin_ok,
    notional_multiplier,
    order_amount_code,
    order_kind_code,
    reduce_only_increases,
)

from .margin import equity_and_requirement, isolated_ok
from .state import AccountCache, ReplicaState

__all__ = ["MAX_PENDING_PER_KEY", "dry_run", "explain"]

#: Txs one (account, api key) may have in flight through this replica (21506 beyond).
MAX_PENDING_PER_KEY = 64
_OK = int(ResultCode.OK)
_FEATURE_NOT_SUPPORTED = int(ResultCode.FEATURE_NOT_SUPPORTED)
_MARKET = int(OrderType.MARKET)
_OCO = int(GroupingType.ONE_CANCELS_THE_OTHER)


def dry_run(st: ReplicaState, tx: Any, now_ms: int) -> int:
    """The ResultCode the sequencer would most likely answer for ``tx`` at ``now_ms``."""
    ttype = tx_type_of(type(tx))
    if ttype in OPERATOR_TX_TYPES:
        return int(ResultCode.OPERATOR_ONLY)
    if not is_signed_type(type(tx)):
        return int(ResultCode.UNSUPPORTED_TX_TYPE)
    acct = st.accounts.get(tx.account_index)
    if acct is None:
        return int(ResultCode.ACCOUNT_NOT_FOUND)
    key = st.api_keys.get((tx.account_index, tx.api_key_index))
    if type(tx) is ChangePubKey:
        code = _check_change_pub_key(st, tx)
        if code != _OK:
            return code
    elif key is None:
        return int(ResultCode.API_KEY_NOT_FOUND)
    elif not st.verifier.verify(tx, key.pub_key):
        return int(ResultCode.INVALID_SIGNATURE)
    nxt = st.next_nonce(tx.account_index, tx.api_key_index)
    if nxt is None:  # a ChangePubKey to a slot never used: its first nonce is 0
        nxt = 0
    if tx.nonce != nxt and accepted_nonce(nxt - 1, tx.nonce) < 0:
        return int(ResultCode.INVALID_NONCE)
    if st.pending_nonces(tx.account_index, tx.api_key_index) >= MAX_PENDING_PER_KEY:
        return int(ResultCode.TOO_MANY_PENDING_TXS)
    if tx.expired_at < now_ms:
        return int(ResultCode.TX_EXPIRED)
    t = type(tx)
    if t is CreateOrder:
        if tx.order_type > _MARKET:
            return _check_conditional(st, tx, acct, now_ms)
        return _check_order(st, tx, acct)
    if t is CreateGroupedOrders:
        return _check_grouped(st, tx, acct, now_ms)
    if t is CancelOrder or t is ModifyOrder:
        return _check_market(st, tx.market_index)
    if t is CancelAllOrders:
        mi = tx.cancel_market_index
        if mi != ALL_MARKETS and mi not in st.markets:  # (an inactive market's orders go too)
            return int(ResultCode.MARKET_NOT_FOUND)
        return _OK
    if t is UpdateLeverage:
        return _check_leverage(st, tx, acct)
    if t is UpdateMargin:
        return _check_update_margin(st, tx, acct)
    if t is Transfer:
        return _check_transfer(st, tx, acct)
    if t is Withdraw:
        return _check_withdraw(st, tx, acct)
    if t is CreateSubAccount:
        return _check_create_sub_account(st, tx)
    return _OK


def explain(tx: Any, code: int) -> str:
    """What a refusal with ``code`` names beyond the code, for the answer's message: the feature
    a FEATURE_NOT_SUPPORTED transfer or withdrawal asked for; else ``""``."""
    if code != _FEATURE_NOT_SUPPORTED:
        return ""
    t = type(tx)
    if t is Transfer or t is Withdraw:
        routes = (tx.from_route_type, tx.to_route_type) if t is Transfer else (tx.route_type,)
        what = f"asset {tx.asset_index}" if tx.asset_index != USDC_ASSET_INDEX else "USDC"
        if any(r != PERPS_ROUTE for r in routes):
            what += " on the spot route"
        return (
            f"{what}: spot markets and assets and multi-asset collateral are not executed by "
            f"raydex (it moves USDC, asset {USDC_ASSET_INDEX}, on the perps route, {PERPS_ROUTE})"
        )
    return ""


def _route_code(asset: int, routes: tuple[int, ...]) -> int:
    if asset != USDC_ASSET_INDEX or any(r != PERPS_ROUTE for r in routes):
        return _FEATURE_NOT_SUPPORTED
    return _OK


def _debit_code(st: ReplicaState, acct: AccountCache, amount: int) -> int:
    """``engine._accounts.debit``: the amount in the (cross) collateral (21811) and the initial
    margin met after it (21739)."""
    if amount > acct.collateral:
        return int(ResultCode.INSUFFICIENT_BALANCE)
    equity, num = equity_and_requirement(
        st.markets, acct.collateral, acct.positions, acct.open_lots
    )
    if (equity - amount) * BPS < num:
        return int(ResultCode.NOT_ENOUGH_MARGIN)
    return _OK


def _check_transfer(st: ReplicaState, tx: Transfer, acct: AccountCache) -> int:
    """The engine's Transfer rules (``engine._accounts.transfer``), and its L1 signature: a
    transfer to another master's account from an account with an L1 address needs one made by
    that address over Lighter's transfer text (21831)."""
    code = _route_code(tx.asset_index, (tx.from_route_type, tx.to_route_type))
    if code != _OK:
        return code
    if tx.to_account_index == tx.account_index:
        return int(ResultCode.SELF_TRANSFER)
    if tx.to_account_index not in st.accounts:
        return int(ResultCode.ACCOUNT_NOT_FOUND)
    l1 = st.l1_addresses.get(tx.account_index)
    other_master = st.master_of(tx.to_account_index) != st.master_of(tx.account_index)
    if other_master and l1 is not None and transfer_l1_signer(tx, st.verifier.chain_id) != l1:
        return int(ResultCode.INVALID_L1_SIGNATURE)
    return _debit_code(st, acct, tx.usdc_amount + tx.usdc_fee)


def _check_withdraw(st: ReplicaState, tx: Withdraw, acct: AccountCache) -> int:
    code = _route_code(tx.asset_index, (tx.route_type,))
    return code if code != _OK else _debit_code(st, acct, tx.usdc_amount)


def _check_create_sub_account(st: ReplicaState, tx: CreateSubAccount) -> int:
    """Only a master opens sub-accounts (INVALID_PARAM), ``MAX_SUB_ACCOUNTS`` at most (21843)."""
    if tx.account_index in st.masters:
        return int(ResultCode.INVALID_PARAM)
    if len(st.sub_accounts.get(tx.account_index, ())) >= MAX_SUB_ACCOUNTS:
        return int(ResultCode.TOO_MANY_SUB_ACCOUNTS)
    return _OK


def _check_change_pub_key(st: ReplicaState, tx: ChangePubKey) -> int:
    """Lighter's ChangePubKey: the new key signs it (21120) and ``L1Sig`` is the account's L1
    address's signature of the register text (21831; an account without an L1 address can only
    get keys from the operator)."""
    if not st.verifier.verify(tx, signer_key(tx, None) or b""):
        return int(ResultCode.INVALID_SIGNATURE)
    l1 = st.l1_addresses.get(tx.account_index)
    if l1 is None or l1_signer(tx) != l1:
        return int(ResultCode.INVALID_L1_SIGNATURE)
    return _OK


def _check_market(st: ReplicaState, mi: int) -> int:
    m = st.markets.get(mi)
    if m is None:
        return int(ResultCode.MARKET_NOT_FOUND)
    if m.status != 1:
        return int(ResultCode.MARKET_NOT_ACTIVE)
    return _OK


def _check_leverage(st: ReplicaState, tx: UpdateLeverage, acct: AccountCache) -> int:
    """The market, the fraction's range (21812), and a margin mode that changes only while
    the position is flat with no resting order there (21841), as the engine rules."""
    mi = tx.market_index
    m = st.markets.get(mi)
    if m is None:
        return int(ResultCode.MARKET_NOT_FOUND)
    if not m.min_initial_margin_fraction <= tx.initial_margin_fraction <= BPS:
        return int(ResultCode.INVALID_LEVERAGE)
    pos = acct.positions.get(mi)
    mode = pos.margin_mode if pos is not None else 0
    if tx.margin_mode != mode and ((pos is not None and pos.size) or acct.order_counts.get(mi)):
        return int(ResultCode.MARGIN_MODE_LOCKED)
    return _OK


def _check_update_margin(st: ReplicaState, tx: UpdateMargin, acct: AccountCache) -> int:
    """UpdateMargin as the engine rules it (``engine._accounts.update_margin``): an open
    isolated position (21842); adding needs the amount in the cross collateral and the cross
    initial margin met after it (21811, 21739); removing, the amount in the position's
    collateral and its initial margin met after it."""
    m = st.markets.get(tx.market_index)
    if m is None:
        return int(ResultCode.MARKET_NOT_FOUND)
    pos = acct.positions.get(tx.market_index)
    if pos is None or not pos.margin_mode or not pos.size:
        return int(ResultCode.NO_ISOLATED_POSITION)
    amount = tx.usdc_amount
    if tx.direction:
        if amount > acct.collateral:
            return int(ResultCode.INSUFFICIENT_BALANCE)
        equity, num = equity_and_requirement(
            st.markets, acct.collateral, acct.positions, acct.open_lots
        )
        if (equity - amount) * BPS < num:
            return int(ResultCode.NOT_ENOUGH_MARGIN)
        return _OK
    if amount > pos.allocated_margin:
        return int(ResultCode.INSUFFICIENT_BALANCE)
    if not isolated_ok(m, pos, pos.allocated_margin - amount, pos.initial_margin_fraction):
        return int(ResultCode.NOT_ENOUGH_MARGIN)
    return _OK


def _check_order(st: ReplicaState, tx: CreateOrder, acct: AccountCache) -> int:
    code = _check_market(st, tx.market_index)
    if code != _OK:
        return code
    m = st.markets[tx.market_index]
    code = int(order_kind_code(tx.order_type, tx.time_in_force))
    if code:
        return code
    mult = notional_multiplier(m.price_decimals, m.size_decimals)
    code = int(
        order_amount_code(
            tx.base_amount,
            tx.price,
            tx.is_ask,
            tx.order_type,
            mult,
            m.min_base_amount,
            m.min_quote_amount,
            m.mark_price,
            m.max_price_deviation,
        )
    )
    if code:
        return code
    coi = tx.client_order_index
    if coi and (coi in acct.cois or (acct.conds and _cois_code(acct, [coi]) != _OK)):
        return int(ResultCode.CLIENT_ORDER_INDEX_EXISTS)
    pos = acct.positions.get(tx.market_index)
    size = pos.size if pos is not None else 0
    if tx.reduce_only:
        if reduce_only_increases(size, tx.is_ask):
            return int(ResultCode.REDUCE_ONLY_INCREASES_POSITION)
        return _OK
    est = tx.price
    if tx.order_type == _MARKET:  # the best opposite price, or the mark on an empty book
        best = st.best_price(tx.market_index, not tx.is_ask)
        est = best if best else m.mark_price
    if not _margin_ok(st, acct, tx.market_index, tx.is_ask, tx.base_amount, est):
        return int(ResultCode.NOT_ENOUGH_MARGIN)
    return _OK


def _cois_code(acct: AccountCache, cois: list[int]) -> int:
    """Client order indexes unique over the account's resting and waiting orders."""
    taken = {c.client_order_index for c in acct.conds.values() if c.client_order_index}
    for coi in cois:
        if coi and (coi in acct.cois or coi in taken):
            return int(ResultCode.CLIENT_ORDER_INDEX_EXISTS)
    return _OK


def _check_conditional(st: ReplicaState, tx: CreateOrder, acct: AccountCache, now_ms: int) -> int:
    """A stop-loss / take-profit or TWAP, as the engine places it (``_triggers``); one with
    self-trade modes is FEATURE_NOT_SUPPORTED (a waiting order does not keep them)."""
    if tx.self_trade_behavior or tx.self_trade_equality:
        return int(ResultCode.FEATURE_NOT_SUPPORTED)
    code = _check_market(st, tx.market_index)
    if code != _OK:
        return code
    code = int(
        conditional_order_code(
            tx.order_type, tx.time_in_force, tx.base_amount, tx.price, tx.trigger_price,
            tx.reduce_only, tx.order_expiry, now_ms,
        )
    )  # fmt: skip
    if code:
        return code
    code = _cois_code(acct, [tx.client_order_index])
    if code != _OK:
        return code
    if tx.reduce_only and reduce_only_increases(_size(acct, tx.market_index), tx.is_ask):
        return int(ResultCode.REDUCE_ONLY_INCREASES_POSITION)
    return _OK


def _check_grouped(
    st: ReplicaState, tx: CreateGroupedOrders, acct: AccountCache, now_ms: int
) -> int:
    """CreateGroupedOrders, as the engine places it: the group's rules, the client order
    indexes, then an OCO's reduce-only or the entry's checks as a CreateOrder's."""
    if not grouped_canonical(tx):
        return int(ResultCode.INVALID_PARAM)
    orders = grouped_orders(tx)
    infos: list[tuple[int, ...]] = [tuple(o) for o in orders]
    if orders:
        code = _check_market(st, orders[0].market_index)
        if code != _OK:
            return code
    code = int(grouped_orders_code(tx.grouping_type, infos, now_ms))
    if code:
        return code
    code = _cois_code(acct, [o.client_order_index for o in orders])
    if code != _OK:
        return code
    first = orders[0]
    if tx.grouping_type == _OCO:
        if reduce_only_increases(_size(acct, first.market_index), first.is_ask):
            return int(ResultCode.REDUCE_ONLY_INCREASES_POSITION)
        return _OK
    entry = CreateOrder(
        tx.account_index, tx.api_key_index, first.market_index, first.client_order_index,
        first.base_amount, first.price, first.is_ask, first.order_type, first.time_in_force,
        first.reduce_only, first.trigger_price, first.order_expiry, tx.expired_at, tx.nonce,
        tx.sig,
    )  # fmt: skip
    return _check_order(st, entry, acct)


def _size(acct: AccountCache, mi: int) -> int:
    pos = acct.positions.get(mi)
    return pos.size if pos is not None else 0


def _margin_ok(
    st: ReplicaState, acct: AccountCache, mi: int, is_ask: int, q: int, est: int
) -> bool:
    """The engine's initial-margin rule (``raydex.engine.rules``: worst-case exposure including
    resting orders, adverse fill against the mark, taker fee), from cached values."""
    opens = acct.open_lots
    m = st.markets[mi]
    mult = notional_multiplier(m.price_decimals, m.size_decimals)
    pos = acct.positions.get(mi)
    s = pos.size if pos is not None else 0
    bo, ao = opens.get(mi, (0, 0))
    before = exposure(s, bo, ao)
    after = exposure(s, bo, ao + q) if is_ask else exposure(s, bo + q, ao)
    if after <= before:
        return True
    equity, num = equity_and_requirement(st.markets, acct.collateral, acct.positions, opens)
    imf = pos.initial_margin_fraction if pos is not None else m.default_initial_margin_fraction
    return bool(
        initial_margin_ok(
            equity, num, m.mark_price, mult, imf, m.taker_fee, is_ask, q, est, after - before
        )
    )
