"""Lighter JSON shapes for the authenticated reads (pure functions over the replica's caches and
its per-account ledger, no I/O).

Every builder returns what the ``lighter-sdk`` pydantic model of that answer accepts with
``model_validate(..., strict=True)`` (``tests/unit/test_api_private.py``). Fields raydex has no
notion of (integrators, spot routes, L1 hashes, staking, pools) get neutral values. An order with
a condition (a stop-loss / take-profit, TWAP, grouped order: ``ConditionalOrderRecord`` /
``ConditionalOrderUpdated``) shows its Lighter type, trigger price, trigger status and time and
its links (``parent_order_index``, ``to_trigger_order_id_0/1``, ``to_cancel_order_id_0``): a
waiting one from its condition alone (:func:`waiting_order`), one on the book or ended from its
``OrderRecord`` / ``OrderUpdated`` with the condition it came from (``cond``); a TWAP's slice is
a ``twap-sub`` whose parent is the TWAP.
Units as Lighter sends them: USDC and sizes as decimal strings, ``Order.timestamp`` and
``PositionFunding.timestamp`` in seconds, trade, deposit, withdrawal and transfer times in ms,
funding rates as percent strings (``views.funding_pct``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

from raydex.codecs import (
    ConditionalOrderRecord,
    ConditionalOrderUpdated,
    MarketRecord,
    OrderRecord,
    OrderStatus,
    OrderType,
    OrderUpdated,
    TimeInForce,
    TriggerStatus,
    TxType,
    lots_to_str,
    ticks_to_str,
    usdc_to_str,
)

from ..cache import DoneOrder, Flow, FundingPayment, Liquidation, PnlBucket, ReplicaState
from .common import USDC_ASSET_ID, funding_pct, quote_multiplier, usdc_asset

_ORDER_TYPES = {
    int(OrderType.LIMIT): "limit",
    int(OrderType.MARKET): "market",
    int(OrderType.STOP_LOSS): "stop-loss",
    int(OrderType.STOP_LOSS_LIMIT): "stop-loss-limit",
    int(OrderType.TAKE_PROFIT): "take-profit",
    int(OrderType.TAKE_PROFIT_LIMIT): "take-profit-limit",
    int(OrderType.TWAP): "twap",
    int(OrderType.TWAP_SUB): "twap-sub",
    int(OrderType.LIQUIDATION): "liquidation",
}
_TRIGGER_STATUS = {
    int(TriggerStatus.NA): "na",
    int(TriggerStatus.READY): "ready",
    int(TriggerStatus.MARK_PRICE): "mark-price",
    int(TriggerStatus.TWAP): "twap",
    int(TriggerStatus.PARENT_ORDER): "parent-order",
}
_TWAP = int(OrderType.TWAP)
_ACTIVE = int(OrderStatus.ACTIVE_LIMIT)
#: a condition's record or event (the same fields)
Cond: TypeAlias = ConditionalOrderRecord | ConditionalOrderUpdated
_TIME_IN_FORCE = {
    int(TimeInForce.GOOD_TILL_TIME): "good-till-time",
    int(TimeInForce.IMMEDIATE_OR_CANCEL): "immediate-or-cancel",
    int(TimeInForce.POST_ONLY): "post-only",
}
_STATUS = {
    int(OrderStatus.IN_PROGRESS): "in-progress",
    int(OrderStatus.PENDING): "pending",
    int(OrderStatus.ACTIVE_LIMIT): "open",
    int(OrderStatus.FILLED): "filled",
    int(OrderStatus.CANCELED): "canceled",
    int(OrderStatus.CANCELED_POST_ONLY): "canceled-post-only",
    int(OrderStatus.CANCELED_REDUCE_ONLY): "canceled-reduce-only",
    int(OrderStatus.CANCELED_POSITION_NOT_ALLOWED): "canceled-position-not-allowed",
    int(OrderStatus.CANCELED_MARGIN_NOT_ALLOWED): "canceled-margin-not-allowed",
    int(OrderStatus.CANCELED_TOO_MUCH_SLIPPAGE): "canceled-too-much-slippage",
    int(OrderStatus.CANCELED_NOT_ENOUGH_LIQUIDITY): "canceled-not-enough-liquidity",
    int(OrderStatus.CANCELED_SELF_TRADE): "canceled-self-trade",
    int(OrderStatus.CANCELED_EXPIRED): "canceled-expired",
    int(OrderStatus.CANCELED_OCO): "canceled-oco",
    int(OrderStatus.CANCELED_CHILD): "canceled-child",
    int(OrderStatus.CANCELED_LIQUIDATION): "canceled-liquidation",
}
_FLOW_DEPOSIT = int(TxType.DEPOSIT)


def order(
    o: OrderRecord | OrderUpdated,
    m: MarketRecord,
    status: int,
    filled_quote: int,
    height: int,
    ts_ms: int,
    *,
    cond: Cond | None = None,
) -> dict[str, Any]:
    """``Order``: a resting order (``OrderRecord``, status open) or one that left the book (its
    last ``OrderUpdated``); ``filled_quote`` in ticks x lots. ``cond``: the condition it came
    from (a fired stop-loss / take-profit, a grouped entry), or the TWAP it is a slice of."""
    out = _order_body(o, m, status, filled_quote, height, ts_ms, int(o.order_version))
    if cond is not None:
        if cond.order_type == _TWAP and cond.order_index != o.order_index:
            out["type"] = "twap-sub"
            out["parent_order_index"] = int(cond.order_index)
            out["parent_order_id"] = str(cond.order_index)
        else:
            _decorate(out, cond, m)
    return out


def waiting_order(
    c: Cond, m: MarketRecord, filled_quote: int, height: int, ts_ms: int
) -> dict[str, Any]:
    """``Order`` of a conditional order off the book (waiting, running, or ended without
    firing): its status is its own (``pending``, a TWAP ``open``, or how it ended)."""
    sd = m.size_decimals
    filled = c.base_amount - c.remaining_base_amount
    out = _order_body(
        c, m, int(c.status), filled_quote, height, ts_ms, 0
    )  # never modified by version
    out["initial_base_amount"] = lots_to_str(c.base_amount, sd)
    out["base_size"] = int(c.base_amount)
    out["remaining_base_amount"] = lots_to_str(c.remaining_base_amount, sd)
    out["filled_base_amount"] = lots_to_str(filled, sd)
    _decorate(out, c, m)
    return out


def _decorate(out: dict[str, Any], c: Cond, m: MarketRecord) -> None:
    """The condition's fields of an ``Order`` (its type, trigger and links)."""
    out["type"] = _ORDER_TYPES.get(int(c.order_type), "limit")
    out["time_in_force"] = _TIME_IN_FORCE.get(int(c.time_in_force), "Unknown")
    out["order_expiry"] = int(c.order_expiry)
    out["trigger_price"] = ticks_to_str(c.trigger_price, m.price_decimals)
    out["trigger_status"] = _TRIGGER_STATUS.get(int(c.trigger_status), "na")
    out["trigger_time"] = int(c.trigger_time)
    out["parent_order_index"] = int(c.parent_order_index)
    out["parent_order_id"] = str(c.parent_order_index)
    out["to_trigger_order_id_0"] = str(c.to_trigger_order_index_0)
    out["to_trigger_order_id_1"] = str(c.to_trigger_order_index_1)
    out["to_cancel_order_id_0"] = str(c.to_cancel_order_index_0)
    out["created_at"] = int(c.created_at) // 1000


def _order_body(
    o: OrderRecord | OrderUpdated | Cond,
    m: MarketRecord,
    status: int,
    filled_quote: int,
    height: int,
    ts_ms: int,
    version: int,
) -> dict[str, Any]:
    pd, sd = m.price_decimals, m.size_decimals
    initial = o[6]  # initial_base_amount (base_amount of a condition)
    remaining = o[7]  # remaining_base_amount
    filled = initial - remaining
    ts_s = ts_ms // 1000
    return {
        "order_index": int(o.order_index),
        "client_order_index": int(o.client_order_index),
        "order_id": str(o.order_index),
        "client_order_id": str(o.client_order_index),
        "market_index": int(o.market_index),
        "owner_account_index": int(o.account_index),
        "initial_base_amount": lots_to_str(initial, sd),
        "price": ticks_to_str(o.price, pd),
        "nonce": 0,
        "remaining_base_amount": lots_to_str(remaining, sd),
        "is_ask": bool(o.is_ask),
        "base_size": int(initial),
        "base_price": int(o.price),
        "filled_base_amount": lots_to_str(filled, sd),
        "filled_quote_amount": usdc_to_str(filled_quote * quote_multiplier(m)),
        "side": "sell" if o.is_ask else "buy",
        "type": _ORDER_TYPES.get(int(o.order_type), "limit"),
        "time_in_force": _TIME_IN_FORCE.get(int(o.time_in_force), "Unknown"),
        "reduce_only": bool(o.reduce_only),
        "trigger_price": "0",
        "order_expiry": int(o.order_expiry),
        "status": _STATUS.get(status, "canceled"),
        "trigger_status": "na",
        "trigger_time": 0,
        "parent_order_index": 0,
        "parent_order_id": "0",
        "to_trigger_order_id_0": "0",
        "to_trigger_order_id_1": "0",
        "to_cancel_order_id_0": "0",
        "block_height": height,
        "timestamp": ts_s,
        "created_at": ts_s,
        "updated_at": ts_s,
        "transaction_time": ts_ms,
        "integrator_fee_collector_index": "0",
        "integrator_maker_fee": "0",
        "integrator_taker_fee": "0",
        "order_flags": 0,
        "order_version": version,
        "market_symbol": m.symbol,
        "market_kind": "perps",
    }


def active_orders(
    st: ReplicaState,
    ai: int,
    keep: Callable[[int, int], bool] | None = None,
    quote: Callable[[int], int] | None = None,
) -> list[tuple[int, dict[str, Any]]]:
    """``(market, Order)`` of every active order of ``ai``, by order index: its resting orders
    (with the condition they came from) and its waiting conditional orders (pending stop-loss /
    take-profit and grouped children, running TWAPs). ``keep(market, client order index)``
    filters them (None: all); ``quote(order index)``: its filled quote (ticks x lots; the
    ledger's by default)."""
    acct = st.accounts[ai]
    filled_quote = quote if quote is not None else st.ledger.filled_quote
    ts = st.timestamp_ns // 1_000_000
    attached = st.attached
    out: list[tuple[int, int, dict[str, Any]]] = []
    for o in acct.orders.values():
        mi = o.market_index
        if keep is None or keep(mi, o.client_order_index):
            q = filled_quote(o.order_index)
            cond = attached.get(o.order_index)
            view = order(o, st.markets[mi], _ACTIVE, q, st.height, ts, cond=cond)
            out.append((o.order_index, mi, view))
    for c in acct.conds.values():
        mi = c.market_index
        if keep is None or keep(mi, c.client_order_index):
            q = filled_quote(c.order_index)
            out.append((c.order_index, mi, waiting_order(c, st.markets[mi], q, st.height, ts)))
    out.sort(key=lambda x: x[0])
    return [(mi, view) for _, mi, view in out]


def done_order(d: DoneOrder, m: MarketRecord) -> dict[str, Any]:
    """An order of the ledger that is not active any more (ended on the book, or a conditional
    order that ended without firing)."""
    o = d.order
    if type(o) is ConditionalOrderUpdated:
        return waiting_order(o, m, d.filled_quote, d.block_height, d.timestamp_ms)
    return order(
        o,  # type: ignore[arg-type]
        m,
        int(o.status),
        d.filled_quote,
        d.block_height,
        d.timestamp_ms,
        cond=d.cond,
    )


def deposit(f: Flow) -> dict[str, Any]:
    """``DepositHistoryItem``."""
    return {
        "id": f.tx_hash.hex(),
        "amount": usdc_to_str(f.amount),
        "timestamp": f.timestamp_ms,
        "status": "completed",
        "l1_tx_hash": "",
        "asset_id": USDC_ASSET_ID,
    }


def withdrawal(f: Flow) -> dict[str, Any]:
    """``WithdrawHistoryItem`` (raydex withdrawals complete in their block)."""
    return {
        "id": f.tx_hash.hex(),
        "amount": usdc_to_str(f.amount),
        "timestamp": f.timestamp_ms,
        "status": "completed",
        "type": "secure",
        "l1_tx_hash": "",
        "asset_id": USDC_ASSET_ID,
    }


def transfer(f: Flow, account: int) -> dict[str, Any]:
    """``TransferHistoryItem`` as ``account`` sees it (inflow or outflow)."""
    return {
        "id": f.tx_hash.hex(),
        "amount": usdc_to_str(f.amount),
        "timestamp": f.timestamp_ms,
        "type": "L2TransferOutflow" if f.from_account == account else "L2TransferInflow",
        "from_l1_address": "",
        "to_l1_address": "",
        "from_account_index": f.from_account,
        "to_account_index": f.to_account,
        "tx_hash": f.tx_hash.hex(),
        "asset_id": USDC_ASSET_ID,
        "fee": "0.000000",
        "from_route": "perps",
        "to_route": "perps",
    }


def is_deposit(f: Flow) -> bool:
    return f.tx_type == _FLOW_DEPOSIT


def position_funding(p: FundingPayment, m: MarketRecord, funding_id: int) -> dict[str, Any]:
    """``PositionFunding``: ``change`` to the account (negative: paid)."""
    return {
        "timestamp": p.timestamp_ms // 1000,
        "market_id": p.market_index,
        "funding_id": funding_id,
        "change": usdc_to_str(p.change),
        "discount": "0",
        "rate": funding_pct(p.rate),
        "position_size": lots_to_str(abs(p.position_size), m.size_decimals),
        "position_side": "short" if p.position_size < 0 else "long",
    }


def _risk(collateral: int) -> dict[str, Any]:
    c = usdc_to_str(collateral)
    zero = "0.000000"
    return {
        "cross_risk_parameters": {
            "market_id": 0,
            "collateral": c,
            "total_account_value": c,
            "initial_margin_req": zero,
            "maintenance_margin_req": zero,
            "close_out_margin_req": zero,
            "total_account_liquidation_threshold": zero,
            "usdc_collateral_with_funding": c,
            "usdc_portfolio_value": c,
            "total_portfolio_value": c,
        },
        "isolated_risk_parameters": [],
    }


def liquidation(q: Liquidation, m: MarketRecord, collateral: int) -> dict[str, Any]:
    """``Liquidation``: the position taken over (``PositionLiquidated``) at its price. What the
    engine does not report (the risk figures before and after) is the account's collateral now."""
    ev = q.event
    pd, sd = m.price_decimals, m.size_decimals
    closed = ev.size  # the position's size before: a long (> 0) is sold
    ask, bid = (ev.account_index, 0) if closed > 0 else (0, ev.account_index)
    return {
        "id": q.block_height,
        "market_id": int(ev.market_index),
        "type": "partial",
        "trade": {
            "price": ticks_to_str(ev.price, pd),
            "size": lots_to_str(abs(closed), sd),
            "taker_fee": usdc_to_str(ev.fee),
            "maker_fee": "0.000000",
            "transaction_time": q.timestamp_ms,
            "bid_account_id": bid,
            "ask_account_id": ask,
        },
        "info": {
            "positions": [],
            "risk_info_before": _risk(collateral),
            "risk_info_after": _risk(collateral),
            "mark_prices": {str(m.market_index): m.mark_price / 10**pd},
            "assets": [usdc_asset(collateral, collateral)],
            "asset_index_prices": {},
        },
        "executed_at": q.timestamp_ms,
    }


def pnl_entry(b: PnlBucket, start_ms: int) -> dict[str, Any]:
    """``PnLEntry`` of one resolution bucket (sums of the hourly buckets in it), in USDC; the
    fields of pools, spot and staking are 0."""
    scale = 1_000_000
    return {
        "timestamp": start_ms // 1000,
        "trade_pnl": b.trade_pnl / scale,
        "inflow": b.inflow / scale,
        "outflow": b.outflow / scale,
        "pool_pnl": 0,
        "pool_inflow": 0,
        "pool_outflow": 0,
        "pool_total_shares": 0,
        "spot_inflow": 0,
        "spot_outflow": 0,
        "staked_lit": 0,
        "staking_inflow": 0,
        "staking_outflow": 0,
        "staking_pnl": 0,
        "trade_spot_pnl": 0,
        "volume": b.volume / scale,
    }


def pnl(buckets: list[PnlBucket], width_ms: int, start_s: int, end_s: int) -> list[dict[str, Any]]:
    """``PnLEntry`` rows, oldest first: the hourly buckets starting in ``[start_s, end_s]``
    (seconds), summed per ``width_ms``."""
    out: dict[int, PnlBucket] = {}
    for b in buckets:
        if not start_s * 1000 <= b.start_ms <= end_s * 1000:
            continue
        key = b.start_ms - b.start_ms % width_ms
        acc = out.get(key)
        if acc is None:
            acc = out[key] = PnlBucket(key)
        acc.trade_pnl += b.trade_pnl
        acc.inflow += b.inflow
        acc.outflow += b.outflow
        acc.volume += b.volume
    return [pnl_entry(out[k], k) for k in sorted(out)]


def account_limits() -> dict[str, Any]:
    """``AccountLimits``: raydex has one tier, no pools, no staking."""
    return {
        "max_llp_percentage": 0,
        "user_tier": "standard",
        "can_create_public_pool": False,
        "max_llp_amount": "0",
        "current_maker_fee_tick": 0,
        "current_taker_fee_tick": 0,
        "effective_lit_stakes": "0",
        "leased_lit": "0",
        "user_tier_name": "standard",
        "bo_user_tier_name": "standard",
        "bo_fee_rate": 1,
    }


def account_metadata(account: int) -> dict[str, Any]:
    """``AccountMetadata``: raydex keeps no names or descriptions."""
    return {
        "account_index": account,
        "name": "",
        "description": "",
        "can_invite": False,
        "referral_points_percentage": "0",
        "created_at": 0,
        "can_rfq": False,
        "can_rfq_market_ids": [],
        "metadata": {"color": ""},
        "agent_enabled": False,
    }


__all__ = [
    "Cond",
    "account_limits",
    "active_orders",
    "account_metadata",
    "deposit",
    "done_order",
    "is_deposit",
    "liquidation",
    "order",
    "pnl",
    "pnl_entry",
    "position_funding",
    "transfer",
    "waiting_order",
    "withdrawal",
]
