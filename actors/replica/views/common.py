"""Lighter JSON shapes built from the replica's caches (pure functions, no I/O).

Every builder returns a plain ``dict`` that the ``lighter-sdk`` pydantic models accept: every
required field present with its JSON type (decimal strings for prices, sizes and USDC; ints where
the models say ``StrictInt``). Fields raydex has no notion of (pools, referral points, settlement,
spot assets...) get neutral values (``0``, ``""``, ``false``, ``[]``); an account's one asset is
its USDC collateral. Checked against the real clients in ``tests/clients`` (lighter-sdk, ccxt).

Units: fees are fractions of notional as decimal strings (``taker_fee`` 200 ppm -> ``"0.000200"``);
margin fractions stay integers in bps, as Lighter sends them. Daily figures are counted from the
trades this replica saw since the start of the current UTC day (``MarketStats``); Lighter types
them as JSON numbers, so they are the one place where a float is produced, at the very edge.

Cost: O(size of the answer); nothing is cached (REST is not the hot path; the WS fan-out is).
"""

from __future__ import annotations

from typing import Any

from raydex.codecs import (
    USDC_DECIMALS,
    MarketRecord,
    OrderRecord,
    PositionRecord,
    lots_to_str,
    ticks_to_str,
    usdc_to_str,
)
from raydex.codecs.signing import l1_address_text
from raydex.engine import funding_rate
from raydex.engine.rules import notional_multiplier, unrealized_pnl

from ..cache import (
    AccountCache,
    BookSnapshot,
    Funding,
    MarketStats,
    ReplicaState,
    TradeRow,
    TxRecord,
    liquidation_prices,
    sequence_index,
)

_PPM_DECIMALS = 6
#: Entries one decimal-string memo holds before it starts over (``decimal_memo``).
MEMO_ENTRIES = 8_192
_POW10 = tuple(10**i for i in range(31))


def decimal_str(ticks: int, decimals: int) -> str:
    """``ticks_to_str(ticks, decimals)``, cheaper: the digits of ``str(ticks)`` with the point put
    in (no divmod, no nested format spec). No decimals (or absurdly many): ``ticks_to_str``."""
    if 0 < decimals < 31:
        if ticks < 0:
            return "-" + decimal_str(-ticks, decimals)
        s = str(ticks)
        if ticks >= _POW10[decimals]:
            return s[:-decimals] + "." + s[-decimals:]
        return "0." + s.zfill(decimals)
    out: str = ticks_to_str(ticks, decimals)
    return out


class _DecimalMemo(dict[int, str]):
    """``ticks -> decimal_str(ticks, decimals)``, remembered: a book's prices recur block after
    block, and a hit is one dict lookup. Bounded: cleared once it holds
    ``MEMO_ENTRIES`` (well under 1 MB), so a drifting price only costs misses. The apply loop and
    the readers share one thread; a lookup racing a clear would only miss."""

    __slots__ = ("decimals",)

    def __init__(self, decimals: int) -> None:
        super().__init__()
        self.decimals = decimals

    def __missing__(self, ticks: int) -> str:
        if len(self) >= MEMO_ENTRIES:
            self.clear()
        s = self[ticks] = decimal_str(ticks, self.decimals)
        return s


#: decimals -> its memo (the few distinct price decimals of the markets)
_MEMOS: dict[int, _DecimalMemo] = {}


def decimal_memo(decimals: int) -> dict[int, str]:
    """The memo of ``ticks_to_str(., decimals)`` for values that recur (prices): ``memo[ticks]``
    is that string. Sizes and balances recur too seldom to pay for the misses:
    :func:`decimal_str`."""
    memo = _MEMOS.get(decimals)
    if memo is None:
        memo = _MEMOS[decimals] = _DecimalMemo(decimals)
    return memo


def quote_multiplier(m: MarketRecord) -> int:
    """Quote units (micro-USDC) per tick x lot of market ``m``."""
    return int(notional_multiplier(m.price_decimals, m.size_decimals))


def _num(ticks: int, decimals: int) -> float:
    return float(ticks / (_POW10[decimals] if decimals < 31 else 10**decimals))


def _daily(m: MarketRecord, s: MarketStats) -> dict[str, float]:
    """The daily figures shared by ``orderBookDetails`` and the ``market_stats`` channel."""
    pd, sd = m.price_decimals, m.size_decimals
    change = (m.last_trade_price - s.first_price) / s.first_price if s.first_price else 0.0
    return {
        "daily_base_token_volume": _num(s.base_volume, sd),
        "daily_quote_token_volume": _num(s.quote_volume, pd + sd),
        "daily_price_low": _num(s.low, pd),
        "daily_price_high": _num(s.high, pd),
        "daily_price_change": change * 100,
    }


def market_summary(m: MarketRecord) -> dict[str, Any]:
    """``OrderBook`` (the ``orderBooks`` entry)."""
    return {
        "symbol": m.symbol,
        "market_id": int(m.market_index),
        "market_type": "perp",
        "base_asset_id": 0,
        "quote_asset_id": 0,
        "status": "active" if m.status == 1 else "inactive",
        "taker_fee": ticks_to_str(m.taker_fee, _PPM_DECIMALS),
        "maker_fee": ticks_to_str(m.maker_fee, _PPM_DECIMALS),
        "liquidation_fee": ticks_to_str(m.liquidation_fee, _PPM_DECIMALS),
        "min_base_amount": lots_to_str(m.min_base_amount, m.size_decimals),
        "min_quote_amount": usdc_to_str(m.min_quote_amount),
        "supported_size_decimals": int(m.size_decimals),
        "supported_price_decimals": int(m.price_decimals),
        "supported_quote_decimals": USDC_DECIMALS,
        # Lighter sends "" when a market has no quote cap; ccxt reads "0" as "max cost 0".
        "order_quote_limit": "",
        "is_maker_fee_enabled": True,
        "is_taker_fee_enabled": True,
        "created_at": "",
        "multiplier": "1",
        "start_timestamp": 0,
        "end_timestamp": 0,
        "settlement_type": 0,
        "settlement_price": 0,
        "settlement_cap": 0,
        "outcome": 0,
        "default_price": 0,
        "operator_account_index": 0,
        "is_frozen": False,
        "open_interest": lots_to_str(m.open_interest, m.size_decimals),
    }


def market_detail(m: MarketRecord, s: MarketStats) -> dict[str, Any]:
    """``PerpsOrderBookDetail`` (the ``orderBookDetails`` entry)."""
    pd, sd = m.price_decimals, m.size_decimals
    out = market_summary(m)
    out.update(
        {
            "size_decimals": int(sd),
            "price_decimals": int(pd),
            "quote_multiplier": quote_multiplier(m),
            "default_initial_margin_fraction": int(m.default_initial_margin_fraction),
            "min_initial_margin_fraction": int(m.min_initial_margin_fraction),
            "maintenance_margin_fraction": int(m.maintenance_margin_fraction),
            "closeout_margin_fraction": int(m.closeout_margin_fraction),
            "last_trade_price": _num(m.last_trade_price, pd),
            "daily_trades_count": s.trades,
            **_daily(m, s),
            "open_interest": _num(m.open_interest, sd),
            "daily_chart": {},
            "market_config": {
                "market_margin_mode": 0,
                "insurance_fund_account_index": 0,
                "liquidation_mode": 0,
                "force_reduce_only": False,
                "trading_hours": "",
                "hidden": False,
                "rfq_enabled": False,
            },
            "strategy_index": 0,
            "funding_clamp_small": "0",
            "funding_clamp_big": "0",
            "base_interest_rate": "0",
            "mark_price": ticks_to_str(m.mark_price, pd),
            "index_price": ticks_to_str(m.mark_price, pd),
            "market_flags": 0,
            "funding_premium_multiplier": 0,
            "max_price_deviation": int(m.max_price_deviation),
        }
    )
    return out


def funding_pct(rate: int) -> str:
    """An hourly rate in 1e-8 as Lighter writes funding rates: percent, ``"0.001250"``."""
    return decimal_str(rate, 6)


def market_stats(m: MarketRecord, s: MarketStats, funding: Funding | None = None) -> dict[str, Any]:
    """The WS ``market_stats`` entry (what ccxt.pro's ``watch_ticker`` parses). Funding, in
    percent per hour: ``current_funding_rate`` the rate the running hour would settle at now,
    ``funding_rate`` the last settled one, ``funding_timestamp`` its hour mark (ms); the daily
    figures are ``market_detail``'s."""
    prices = decimal_memo(m.price_decimals)
    current = funding_rate(funding.premium_sum, funding.samples) if funding else 0
    mark = prices[m.mark_price]
    return {
        "market_id": int(m.market_index),
        "index_price": mark,
        "mark_price": mark,
        "open_interest": decimal_str(m.open_interest, m.size_decimals),
        "open_interest_limit": "",
        "funding_clamp_small": "0",
        "funding_clamp_big": "0",
        "last_trade_price": prices[m.last_trade_price],
        "current_funding_rate": funding_pct(current),
        "funding_rate": funding_pct(funding.last_rate if funding else 0),
        "funding_timestamp": funding.last_funding_ms if funding else 0,
        **_daily(m, s),
    }


def simple_order(o: OrderRecord, m: MarketRecord, ts_ms: int) -> dict[str, Any]:
    """``SimpleOrder`` (an ``orderBookOrders`` entry)."""
    return {
        "order_index": int(o.order_index),
        "order_id": str(o.order_index),
        "owner_account_index": int(o.account_index),
        "initial_base_amount": lots_to_str(o.initial_base_amount, m.size_decimals),
        "remaining_base_amount": lots_to_str(o.remaining_base_amount, m.size_decimals),
        "price": ticks_to_str(o.price, m.price_decimals),
        "order_expiry": int(o.order_expiry),
        "transaction_time": ts_ms,
    }


def levels(levels: tuple[tuple[int, int], ...], m: MarketRecord) -> list[dict[str, str]]:
    """``[{"price": "3327.46", "size": "29.0915"}, ...]`` for WS order-book messages."""
    prices, sd, fmt = decimal_memo(m.price_decimals), m.size_decimals, decimal_str
    return [{"price": prices[p], "size": fmt(q, sd)} for p, q in levels]


def book_body(b: BookSnapshot, m: MarketRecord, offset: int) -> dict[str, Any]:
    return {
        "code": 0,
        "asks": levels(b.asks, m),
        "bids": levels(b.bids, m),
        "offset": offset,
        "nonce": b.nonce,
        "begin_nonce": b.nonce,
    }


#: ``Trade`` in field order with its constant fields; :func:`trade` copies it and fills the rest
#: (a copy and 20 stores cost ~2/3 of building the 50-key literal, once per trade and block)
_TRADE: dict[str, Any] = {
    "trade_id": 0,
    "tx_hash": "",
    "type": "trade",
    "market_id": 0,
    "size": "",
    "price": "",
    "usd_amount": "",
    "ask_id": 0,
    "bid_id": 0,
    "ask_account_id": 0,
    "bid_account_id": 0,
    "is_maker_ask": False,
    "block_height": 0,
    "timestamp": 0,
    "taker_fee": 0,
    "taker_position_size_before": "0",
    "taker_entry_quote_before": "0",
    "taker_initial_margin_fraction_before": 0,
    "taker_position_sign_changed": False,
    "maker_fee": 0,
    "maker_position_size_before": "0",
    "maker_entry_quote_before": "0",
    "maker_initial_margin_fraction_before": 0,
    "maker_position_sign_changed": False,
    "transaction_time": 0,
    "bid_account_pnl": "0",
    "ask_account_pnl": "0",
    "ask_client_id": 0,
    "bid_client_id": 0,
    "ask_client_id_str": "0",
    "bid_client_id_str": "0",
    "ask_id_str": "",
    "bid_id_str": "",
    "trade_id_str": "",
    "integrator_maker_fee": 0,
    "integrator_maker_fee_collector_index": 0,
    "integrator_taker_fee": 0,
    "integrator_taker_fee_collector_index": 0,
    "taker_allocated_margin_usdc_before": 0,
    "taker_allocated_margin_usdc_after": 0,
    "maker_allocated_margin_usdc_before": 0,
    "maker_allocated_margin_usdc_after": 0,
    "bid_order_version": 0,
    "ask_order_version": 0,
    "market_symbol": "",
    "market_kind": "perps",
}


def trade(row: TradeRow, m: MarketRecord) -> dict[str, Any]:
    """``Trade``: ask/bid sides resolved from the taker side."""
    t, tx_hash, height, ts_ms = row
    (mi, trade_id, price, size, taker, maker, taker_oi, maker_oi, taker_is_ask, taker_fee,
     maker_fee) = t  # fmt: skip
    if taker_is_ask:
        ask_acct, bid_acct, ask_id, bid_id = taker, maker, taker_oi, maker_oi
    else:
        ask_acct, bid_acct, ask_id, bid_id = maker, taker, maker_oi, taker_oi
    out = _TRADE.copy()  # every key below is in the template: the field order stays
    out["trade_id"] = int(trade_id)
    out["tx_hash"] = tx_hash.hex()
    out["market_id"] = int(mi)
    out["size"] = decimal_str(size, m.size_decimals)
    out["price"] = decimal_memo(m.price_decimals)[price]
    out["usd_amount"] = decimal_str(price * size * quote_multiplier(m), USDC_DECIMALS)
    out["ask_id"] = int(ask_id)
    out["bid_id"] = int(bid_id)
    out["ask_account_id"] = int(ask_acct)
    out["bid_account_id"] = int(bid_acct)
    out["is_maker_ask"] = not taker_is_ask
    out["block_height"] = height
    out["timestamp"] = ts_ms
    out["taker_fee"] = int(taker_fee)
    out["maker_fee"] = int(maker_fee)
    out["transaction_time"] = ts_ms
    out["ask_id_str"] = str(ask_id)
    out["bid_id_str"] = str(bid_id)
    out["trade_id_str"] = str(trade_id)
    out["market_symbol"] = m.symbol
    return out


def position(
    p: PositionRecord,
    m: MarketRecord,
    open_orders: int,
    liquidation_price: int,
    *,
    pending: tuple[int, int] = (0, 0),
) -> dict[str, Any]:
    """``AccountPosition``; ``liquidation_price`` in ticks (``margin.liquidation_prices``: an
    isolated position's from its own collateral), 0 = none (sent as ``"0"``); ``margin_mode``
    0 cross / 1 isolated with its ``allocated_margin`` (USDC); ``pending``: the account's waiting
    conditional orders in the market and how many of them are position-tied (size 0)
    (:func:`pending_counts`)."""
    pd, sd = m.price_decimals, m.size_decimals
    mult = quote_multiplier(m)
    size = int(p.size)
    value = abs(size) * m.mark_price * mult
    avg = abs(p.entry_quote) // (abs(size) * mult) if size else 0
    return {
        "market_id": int(m.market_index),
        "symbol": m.symbol,
        "initial_margin_fraction": decimal_str(p.initial_margin_fraction, 2),
        "open_order_count": open_orders,
        "pending_order_count": pending[0],
        "position_tied_order_count": pending[1],
        "sign": 1 if size >= 0 else -1,
        "position": decimal_str(abs(size), sd),
        "avg_entry_price": decimal_str(avg, pd),
        "position_value": decimal_str(value, USDC_DECIMALS),
        "unrealized_pnl": decimal_str(
            unrealized_pnl(size, m.mark_price * mult, p.entry_quote), USDC_DECIMALS
        ),
        "realized_pnl": decimal_str(p.realized_pnl, USDC_DECIMALS),
        "liquidation_price": decimal_str(liquidation_price, pd) if liquidation_price else "0",
        "total_funding_paid_out": decimal_str(p.funding_paid, USDC_DECIMALS),
        "margin_mode": int(p.margin_mode),
        "allocated_margin": decimal_str(p.allocated_margin, USDC_DECIMALS),
        "total_discount": "0",
        "margin_set_flag": 0,
    }


USDC_ASSET_ID = 3  # Lighter's asset id for USDC


def usdc_asset(collateral: int, available: int) -> dict[str, Any]:
    """``AccountAsset`` for the one asset raydex has: USDC collateral (cross and isolated), with
    the part backing margin (collateral minus available balance) as ``locked_balance``."""
    balance = usdc_to_str(collateral)
    return {
        "symbol": "USDC",
        "asset_id": USDC_ASSET_ID,
        "balance": balance,
        "locked_balance": usdc_to_str(max(collateral - available, 0)),
        "margin_balance": balance,
        "margin_mode": "enabled",
        "multiplier": "1",
    }


def usdc_asset_detail() -> dict[str, Any]:
    """``Asset`` (the ``assetDetails`` entry): USDC, the collateral of every perp market.
    Lending and supply caps do not exist in raydex: neutral values."""
    one = usdc_to_str(10**USDC_DECIMALS)
    return {
        "asset_id": USDC_ASSET_ID,
        "symbol": "USDC",
        "l1_decimals": USDC_DECIMALS,
        "decimals": USDC_DECIMALS,
        "min_transfer_amount": one,
        "min_withdrawal_amount": one,
        "margin_mode": "enabled",
        "index_price": one,
        "l1_address": "",
        "global_supply_cap": "0",
        "liquidation_fee": "0",
        "liquidation_threshold": "0",
        "loan_to_value": "0",
        "price_decimals": USDC_DECIMALS,
        "total_supplied": "0",
        "user_supply_cap": "0",
        "liquidation_factor": "0",
        "multiplier": "1",
    }


def pending_counts(acct: AccountCache) -> dict[int, tuple[int, int]]:
    """market -> (waiting conditional orders, of which position-tied) of an account."""
    out: dict[int, tuple[int, int]] = {}
    for c in acct.conds.values():
        n, tied = out.get(c.market_index, (0, 0))
        out[c.market_index] = (n + 1, tied + (c.base_amount == 0))
    return out


def account(state: ReplicaState, ai: int, acct: AccountCache) -> dict[str, Any]:
    """``DetailedAccount``; its waiting conditional orders count as orders, and as pending."""
    ts_ms = state.timestamp_ns // 1_000_000
    counts = acct.order_counts
    liq = liquidation_prices(state.markets, acct.collateral, acct.positions)
    pending = pending_counts(acct) if acct.conds else {}
    positions = [
        position(p, state.markets[mi], counts.get(mi, 0), liq[mi], pending=pending.get(mi, (0, 0)))
        for mi, p in sorted(acct.positions.items())
    ]
    collateral = usdc_to_str(acct.collateral)
    margin = state.margin_summary(ai)
    available = margin.available
    return {
        "code": 200,
        "account_type": account_type(state, ai),
        "index": ai,
        "l1_address": l1_address(state, ai),
        "cancel_all_time": 0,
        "total_order_count": len(acct.orders) + len(acct.conds),
        "total_isolated_order_count": isolated_order_count(acct),
        "pending_order_count": len(acct.conds),
        "available_balance": usdc_to_str(available),
        "status": 1,
        "collateral": collateral,
        "account_index": ai,
        "name": "",
        "description": "",
        "can_invite": False,
        "referral_points_percentage": "0",
        "positions": positions,
        "assets": [usdc_asset(acct.collateral + margin.isolated_collateral, available)],
        "total_asset_value": usdc_to_str(margin.total_equity),
        "cross_asset_value": usdc_to_str(margin.cross_equity),
        "pool_info": {
            "status": 0,
            "operator_fee": "0",
            "min_operator_share_rate": "0",
            "total_shares": 0,
            "operator_shares": 0,
            "annual_percentage_yield": 0,
            "daily_returns": [],
            "share_prices": [],
            "sharpe_ratio": 0,
            "strategies": [],
        },
        "shares": [],
        "created_at": 0,
        "transaction_time": ts_ms,
        "can_rfq": False,
        "cross_initial_margin_requirement": usdc_to_str(margin.cross_initial),
        "cross_maintenance_margin_requirement": usdc_to_str(margin.cross_maintenance),
        "can_rfq_market_ids": [],
        "metadata": {"color": ""},
        "agent_enabled": False,
    }


def account_type(state: ReplicaState, ai: int) -> int:
    """Lighter's ``account_type``: 0 a master account, 1 a sub-account."""
    return 1 if ai in state.masters else 0


def isolated_order_count(acct: AccountCache) -> int:
    """The account's resting orders in the markets where its position is isolated."""
    counts = acct.order_counts
    return sum(counts.get(mi, 0) for mi, p in acct.positions.items() if p.margin_mode)


def l1_address(state: ReplicaState, ai: int) -> str:
    """An account's L1 address as Lighter writes it (EIP-55), ``""`` for one without."""
    raw = state.l1_addresses.get(ai)
    return l1_address_text(raw) if raw is not None else ""


def sub_accounts(state: ReplicaState, l1: bytes, ais: list[int]) -> dict[str, Any]:
    """``SubAccounts`` (``accountsByL1Address``): the accounts of one L1 address (its master and
    its sub-accounts) as Lighter's ``Account``, ``account_type`` telling them apart."""
    ts_ms = state.timestamp_ns // 1_000_000
    rows = []
    for ai in ais:
        acct = state.accounts[ai]
        rows.append(
            {
                "code": 200,
                "account_type": account_type(state, ai),
                "account_trading_mode": 0,
                "index": ai,
                "l1_address": l1_address(state, ai),
                "cancel_all_time": 0,
                "total_order_count": len(acct.orders),
                "total_isolated_order_count": 0,
                "pending_order_count": 0,
                "available_balance": usdc_to_str(state.available_balance(ai)),
                "status": 1,
                "collateral": usdc_to_str(acct.collateral),
                "transaction_time": ts_ms,
            }
        )
    return {"l1_address": l1_address_text(l1), "sub_accounts": rows}


def tx_record(r: TxRecord, info: str = "") -> dict[str, Any]:
    """``EnrichedTx``: status 2 executed, 0 failed (the engine's code in ``event_info``);
    ``info``: the tx's JSON when this replica knows its body (``History.body``), else ``""``."""
    return {
        "code": 200,
        "hash": r.tx_hash.hex(),
        "type": r.tx_type,
        "info": info,
        "event_info": f'{{"code":{r.code}}}',
        "status": 2 if r.code == 200 else 0,
        "transaction_index": r.position,
        "l1_address": "",
        "account_index": r.account_index,
        "nonce": r.nonce,
        "expire_at": 0,
        "block_height": r.block_height,
        "queued_at": r.timestamp_ms,
        "executed_at": r.timestamp_ms,
        "sequence_index": sequence_index(r),
        "parent_hash": "",
        "api_key_index": r.api_key_index,
        "transaction_time": r.timestamp_ms,
        "committed_at": r.timestamp_ms,
        "verified_at": 0,
        "result_code": r.code,
    }
