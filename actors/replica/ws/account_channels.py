"""Lighter's account WebSocket channels: their addresses, who may subscribe, and their messages.

::

    Fanout.subscribe(channel, auth) ─► parse ─► private? ─► authorize(token, account) ─► snapshot
    Fanout.publish(Applied) ─► nobody watches an account the block touched: return  (O(watched))
                             └► AccountUpdates(applied, watched ∩ touched): one pass over the
                                block's events and trades for those accounts ─► per account and
                                channel one update (the block's orders / trades / positions of
                                that account coalesced into one message)

Channels (subscribe address -> the ``channel`` of replies; Lighter's shapes):

==============================  ==============================  =====  ==========================
address                         reply channel                   auth   body
==============================  ==============================  =====  ==========================
``account_all/{a}``             ``account_all:{a}``             no     positions, trades,
                                                                       funding_histories, stats
``user_stats/{a}``              ``user_stats:{a}``              no     ``stats``
``account_all_orders/{a}``      ``account_all_orders:{a}``      yes    ``orders`` {market: [..]}
``account_orders/{m}/{a}``      ``account_orders:{m}``          yes    ``account``, ``nonce``,
                                                                       ``orders`` {m: [..]}
``account_all_trades/{a}``      ``account_all_trades:{a}``      yes    ``trades`` {market: [..]},
                                                                       volumes
``account_all_positions/{a}``   ``account_all_positions:{a}``   yes    ``positions``, ``shares``
``account_all_assets/{a}``      ``account_all_assets:{a}``      yes    ``assets`` {asset id: ..}
``account_tx/{a}``              ``account_tx:{a}``              yes    ``txs`` [Lighter ``Tx``]
==============================  ==============================  =====  ==========================

- ``subscribed/<kind>``: the account's state now (resting orders, positions, assets, stats, and
  the ledger's newest ``RECENT`` trades, payments and txs). ``update/<kind>``: what one block
  changed for it, one message per channel per block: every order it touched with its status
  after the block (so a subscriber sees its order end), its trades, the positions changed, the
  funding charged, its own txs with their outcome (a rejected one too: ``status`` 0, the code in
  ``event_info``).
- Orders include the waiting conditional ones (stop-loss / take-profit, grouped children,
  TWAPs) with their trigger price and status and links; an update carries a conditional order
  whose state changed (placed, armed, fired, ended), and a fired or sliced order's fills with
  its condition (``private_views``).
- ``filled_quote_amount`` counts the fills this replica applied (from its snapshot on; earlier
  ones read 0). An order's ``nonce`` is its CreateOrder's when the update comes from that tx,
  else 0.
- A private channel (``auth: yes``) needs the subscribe message's ``auth`` token for that
  account (``authorize``: auth.py's ``require_account`` by default); a refusal is an error frame
  and nothing is subscribed.

Cost: nothing per block while no account channel is subscribed; else O(watched accounts), and
for a block that touched one, a walk over its events plus the JSON of what changed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from raydex.codecs import (
    ConditionalOrderUpdated,
    FundingChanged,
    MarketRecord,
    OrderRecord,
    OrderStatus,
    OrderUpdated,
    PositionChanged,
    TxExecuted,
    ticks_to_str,
    tx_type_of,
    usdc_to_str,
)
from raydex.codecs import (
    CreateOrder as _CreateOrder,
)
from raydex.engine.rules import notional_multiplier

from ..cache import (
    Applied,
    FundingPayment,
    ReplicaState,
    TradeRow,
    TxRecord,
    Volumes,
    liquidation_prices,
)
from ..views import common as views
from ..views import private as private_views
from ..views import public as public_views

__all__ = [
    "ACCOUNT_WIDE",
    "PRIVATE_KINDS",
    "AccountChannel",
    "AccountUpdates",
    "Authorize",
    "funding_entry",
    "order_json",
    "parse",
    "snapshot",
]

#: ``authorize(token, account) -> (code, message)``: 200 when ``token`` may read ``account``
Authorize = Callable[[object, int], tuple[int, str]]

PUBLIC_KINDS = frozenset({"account_all", "user_stats"})
PRIVATE_KINDS = frozenset(
    {
        "account_tx",
        "account_all_orders",
        "account_orders",
        "account_all_trades",
        "account_all_positions",
        "account_all_assets",
    }
)
KINDS = PUBLIC_KINDS | PRIVATE_KINDS
#: per-account kinds (everything but ``account_orders``, which is per market too)
ACCOUNT_WIDE = tuple(sorted(KINDS - {"account_orders"}))

_CREATE_ORDER = int(tx_type_of(_CreateOrder))
#: trades and funding payments a ``subscribed`` message carries (the ledger's newest)
RECENT = 100
_ACTIVE = int(OrderStatus.ACTIVE_LIMIT)
_STATUS = {
    0: "in-progress",
    1: "pending",
    2: "open",
    3: "filled",
    4: "canceled",
    5: "canceled-post-only",
    6: "canceled-reduce-only",
    7: "canceled-position-not-allowed",
    8: "canceled-margin-not-allowed",
    9: "canceled-too-much-slippage",
    10: "canceled-not-enough-liquidity",
    11: "canceled-self-trade",
    12: "canceled-expired",
    15: "canceled-liquidation",
}
_TYPE = ("limit", "market", "stop-loss", "stop-loss-limit", "take-profit", "take-profit-limit")
_TIF = ("immediate-or-cancel", "good-till-time", "post-only")


class AccountChannel(NamedTuple):
    """A parsed account channel: ``market`` is -1 except for ``account_orders``."""

    kind: str
    account: int
    market: int = -1

    @property
    def key(self) -> str:
        """The subscription key (unique per channel; also the ``channel`` of ``unsubscribed``)."""
        if self.kind == "account_orders":
            return f"account_orders:{self.market}:{self.account}"
        return f"{self.kind}:{self.account}"

    @property
    def reply(self) -> str:
        """The ``channel`` field of this channel's messages, as Lighter writes it."""
        if self.kind == "account_orders":
            return f"account_orders:{self.market}"
        return f"{self.kind}:{self.account}"

    @property
    def private(self) -> bool:
        return self.kind in PRIVATE_KINDS


def _index(s: str) -> int | None:
    if not s.isascii() or not s.isdigit() or len(s) > 15:
        return None
    return int(s)


def parse(channel: object) -> AccountChannel | None:
    """``"account_orders/0/5"`` -> ``AccountChannel("account_orders", 5, 0)``; None if the
    channel is not an account channel (or malformed)."""
    if not isinstance(channel, str) or len(channel) > 64:
        return None
    parts = channel.split("/")
    kind = parts[0]
    if kind not in KINDS:
        return None
    if kind == "account_orders":
        if len(parts) != 3:
            return None
        m, a = _index(parts[1]), _index(parts[2])
        return None if m is None or a is None else AccountChannel(kind, a, m)
    if len(parts) != 2:
        return None
    a = _index(parts[1])
    return None if a is None else AccountChannel(kind, a)


# ---- message pieces ------------------------------------------------------------------------------


def order_json(
    o: OrderRecord | OrderUpdated,
    status: int,
    m: MarketRecord,
    filled_quote: int,
    nonce: int,
    height: int,
    ts_ms: int,
    cond: private_views.Cond | None = None,
) -> dict[str, Any]:
    """Lighter's ``Order`` (private_views.order, the REST reads' own) with the ``nonce`` the
    channel knows; ``filled_quote`` in ticks x lots, as the ledger counts it; ``cond``: the
    condition it came from (or the TWAP it is a slice of)."""
    out = private_views.order(o, m, status, filled_quote, height, ts_ms, cond=cond)
    out["nonce"] = nonce
    return out


def funding_entry(p: FundingPayment, m: MarketRecord) -> dict[str, Any]:
    """Lighter's ``PositionFunding`` (private_views.position_funding, as ``positionFunding``
    answers it: ``funding_id`` is the block height)."""
    return private_views.position_funding(p, m, p.block_height)


def _ratio(num: int, den: int, decimals: int) -> str:
    """``num / den`` with ``decimals`` digits, rounded down; "0" style zeros when ``den`` <= 0."""
    out: str = ticks_to_str(num * 10**decimals // den if den > 0 else 0, decimals)
    return out


def user_stats(st: ReplicaState, ai: int) -> dict[str, Any]:
    """Lighter's ``user_stats`` ``stats``: collateral, portfolio value (equity), leverage
    (position notional / equity), available balance, margin usage (initial margin / equity, in
    percent), buying power (available balance at the default leverage of the account's markets:
    available / the smallest default initial margin fraction). ``cross_stats``: the cross pool
    alone; the top figures and ``total_stats`` add the isolated positions (their collateral,
    equity, notional and initial margin)."""
    acct = st.accounts[ai]
    margin = st.margin_summary(ai)
    available = margin.available
    cross_notional = iso_notional = iso_im = 0
    imf = 10_000
    for mi, p in acct.positions.items():
        m = st.markets[mi]
        mult = notional_multiplier(m.price_decimals, m.size_decimals)
        notional = abs(p.size) * m.mark_price * mult
        if p.margin_mode:
            iso_notional += notional
            iso_im += -(-notional * p.initial_margin_fraction // 10_000)
        else:
            cross_notional += notional
        imf = min(imf, m.default_initial_margin_fraction or imf)
    if not acct.positions:
        for m in st.markets.values():
            imf = min(imf, m.default_initial_margin_fraction or imf)

    def figures(collateral: int, equity: int, notional: int, im: int) -> dict[str, str]:
        return {
            "collateral": usdc_to_str(collateral),
            "portfolio_value": usdc_to_str(equity),
            "leverage": _ratio(notional, equity, 2),
            "available_balance": usdc_to_str(available),
            "margin_usage": _ratio(im * 100, equity, 2),
            "buying_power": usdc_to_str(max(available, 0) * 10_000 // imf),
        }

    cross = figures(acct.collateral, margin.cross_equity, cross_notional, margin.cross_initial)
    total = figures(
        acct.collateral + margin.isolated_collateral,
        margin.total_equity,
        cross_notional + iso_notional,
        margin.cross_initial + iso_im,
    )
    return {**total, "account_trading_mode": 0, "cross_stats": cross, "total_stats": total}


def _volumes(v: Volumes) -> dict[str, Any]:
    return {
        "daily_trades_count": v.daily_trades,
        "daily_volume": float(v.daily_volume / 1e6),
        "weekly_trades_count": v.weekly_trades,
        "weekly_volume": float(v.weekly_volume / 1e6),
        "monthly_trades_count": v.monthly_trades,
        "monthly_volume": float(v.monthly_volume / 1e6),
        "total_trades_count": v.total_trades,
        "total_volume": float(v.total_volume / 1e6),
    }


def _positions(st: ReplicaState, ai: int, only: Iterable[int] | None = None) -> dict[str, Any]:
    acct = st.accounts[ai]
    liq = liquidation_prices(st.markets, acct.collateral, acct.positions)
    counts = acct.order_counts
    pending = views.pending_counts(acct) if acct.conds else {}
    mids = acct.positions if only is None else [mi for mi in only if mi in acct.positions]
    return {
        str(mi): views.position(
            acct.positions[mi], st.markets[mi], counts.get(mi, 0), liq[mi],
            pending=pending.get(mi, (0, 0)),
        )
        for mi in mids
    }  # fmt: skip


def _assets(st: ReplicaState, ai: int) -> dict[str, Any]:
    acct = st.accounts[ai]
    margin = st.margin_summary(ai)
    asset = views.usdc_asset(acct.collateral + margin.isolated_collateral, margin.available)
    return {str(views.USDC_ASSET_ID): asset}


def _trades_by_market(
    st: ReplicaState, rows: Iterable[TradeRow], memo: dict[int, dict[str, Any]] | None = None
) -> dict[str, list[Any]]:
    """Lighter ``Trade``s by market; ``memo`` (trade id -> its JSON) shares one rendering of a
    trade between the channels and accounts of one block (both sides of a trade may be
    watched, on several channels)."""
    out: dict[str, list[Any]] = {}
    for r in rows:
        t = r.trade
        mi = t.market_index
        view = memo.get(t.trade_id) if memo is not None else None
        if view is None:
            view = views.trade(r, st.markets[mi])
            if memo is not None:
                memo[t.trade_id] = view
        out.setdefault(str(mi), []).append(view)
    return out


def _recent_trades(st: ReplicaState, ai: int) -> list[TradeRow]:
    log = st.ledger.log(ai)
    if log is None:
        return []
    n = len(log.trades)
    return list(itertools.islice(log.trades, max(0, n - RECENT), n))


def recent_fundings(st: ReplicaState, ai: int) -> dict[str, list[Any]]:
    """The account's last ``RECENT`` funding payments (the ledger's), by market."""
    log = st.ledger.log(ai)
    out: dict[str, list[Any]] = {}
    if log is None:
        return out
    n = len(log.fundings)
    for f in itertools.islice(log.fundings, max(0, n - RECENT), n):
        entry = funding_entry(f, st.markets[f.market_index])
        out.setdefault(str(f.market_index), []).append(entry)
    return out


def seed_filled(st: ReplicaState, ai: int, filled: dict[int, int]) -> None:
    """Start the filled-quote memo (ticks x lots) of ``ai``'s resting orders from the ledger's
    (exact for the fills this replica applied; 0 for an order it saw no fill of)."""
    for oi in st.accounts[ai].orders:
        q = st.ledger.filled_quote(oi)
        if q:
            filled[oi] = q


def _resting(st: ReplicaState, ai: int, market: int, filled: dict[int, int]) -> dict[str, Any]:
    """The account's active orders (one market, or all with ``market`` -1), by market: resting
    ones and waiting conditional ones (``private_views.active_orders``)."""
    out: dict[str, list[Any]] = {}
    keep = None if market < 0 else (lambda mi, _coi: mi == market)

    def quote(oi: int) -> int:
        return filled.get(oi) or st.ledger.filled_quote(oi)

    for mi, view in private_views.active_orders(st, ai, keep, quote):
        out.setdefault(str(mi), []).append(view)
    if market >= 0:
        out.setdefault(str(market), [])
    return out


def snapshot(
    st: ReplicaState, ch: AccountChannel, ts_ms: int, filled: dict[int, int]
) -> dict[str, Any] | None:
    """``subscribed/<kind>``: the channel's state now; None for an unknown account or market."""
    ai = ch.account
    if ai not in st.accounts or (ch.market >= 0 and ch.market not in st.markets):
        return None
    kind = ch.kind
    body: dict[str, Any] = {"channel": ch.reply, "timestamp": ts_ms, "type": f"subscribed/{kind}"}
    if kind == "account_all_orders":
        body["orders"] = _resting(st, ai, -1, filled)
    elif kind == "account_orders":
        body.update(account=ai, nonce=st.seq, orders=_resting(st, ai, ch.market, filled))
    elif kind == "account_all_trades":
        body["trades"] = _trades_by_market(st, _recent_trades(st, ai))
        body.update(_trade_volumes(st, ai))
    elif kind == "account_all_positions":
        body.update(positions=_positions(st, ai), shares=[])
    elif kind == "account_all_assets":
        body.update(assets=_assets(st, ai), account_id=ai)
    elif kind == "user_stats":
        body["stats"] = user_stats(st, ai)
    elif kind == "account_tx":
        log = st.ledger.log(ai)
        rows = list(log.txs)[-RECENT:] if log is not None else []
        body["txs"] = public_views.tx_list(st.history, rows)
    else:
        return None  # account_all: Fanout's own body (it predates these channels)
    return body


def _trade_volumes(st: ReplicaState, ai: int) -> dict[str, float]:
    v = st.history.volumes.get(ai, st.timestamp_ns // 1_000_000)
    return {
        "total_volume": float(v.total_volume / 1e6),
        "monthly_volume": float(v.monthly_volume / 1e6),
        "weekly_volume": float(v.weekly_volume / 1e6),
        "daily_volume": float(v.daily_volume / 1e6),
    }


def account_all_extra(
    st: ReplicaState,
    ai: int,
    trades: Sequence[TradeRow],
    fundings: dict[str, list[Any]],
    memo: dict[int, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The fields ``account_all`` carries besides collateral and positions: ``trades`` (by
    market), ``funding_histories`` (by market), ``shares`` and the trade counts and volumes."""
    v = st.history.volumes.get(ai, st.timestamp_ns // 1_000_000)
    return {
        "trades": _trades_by_market(st, trades, memo),
        "funding_histories": fundings,
        "shares": [],
        **_volumes(v),
    }


def recent_trades(st: ReplicaState, ai: int) -> list[TradeRow]:
    """The account's trades among the replica's recent trades of every market (snapshots)."""
    return _recent_trades(st, ai)


# ---- per-block updates ---------------------------------------------------------------------------


class AccountUpdates:
    """What one block changed for the watched accounts it touched, gathered in one pass.

    ``filled`` (order index -> filled quote, micro-USDC) and ``funding_paid`` (account ->
    market -> the position's ``funding_paid`` last seen) are the fan-out's, kept for watched
    accounts only; this pass advances them."""

    __slots__ = ("conds", "fundings", "orders", "positions", "trade_views", "trades", "txs")

    def __init__(
        self,
        st: ReplicaState,
        applied: Applied,
        hits: set[int],
        filled: dict[int, int],
        funding_paid: dict[int, dict[int, int]],
    ) -> None:
        #: account -> order index -> (its last OrderUpdated or ConditionalOrderUpdated, the
        #: nonce to show)
        self.orders: dict[int, dict[int, tuple[OrderUpdated | ConditionalOrderUpdated, int]]] = {}
        #: the block's conditions by order index (and a TWAP's by its slice's)
        self.conds: dict[int, ConditionalOrderUpdated] = {}
        self.trades: dict[int, list[TradeRow]] = {}
        #: trade id -> its Lighter JSON, rendered once for every channel of the block
        self.trade_views: dict[int, dict[str, Any]] = {}
        self.positions: dict[int, set[int]] = {}
        #: account -> market -> PositionFunding entries
        self.fundings: dict[int, dict[str, list[Any]]] = {}
        #: account -> its own txs of the block (executed or rejected)
        self.txs: dict[int, list[TxRecord]] = {}
        for rec in applied.txs:
            if rec.account_index in hits:
                self.txs.setdefault(rec.account_index, []).append(rec)
        ts_ms = applied.timestamp_ns // 1_000_000
        for rows in applied.trades.values():
            for r in rows:
                t = r.trade
                for ai, oi in (
                    (t.taker_account_index, t.taker_order_index),
                    (t.maker_account_index, t.maker_order_index),
                ):
                    if ai in hits:
                        self.trades.setdefault(ai, []).append(r)
                        filled[oi] = filled.get(oi, 0) + t.price * t.size
        settled: set[int] = set()
        tx_account, tx_nonce = -1, 0
        for ev in applied.events:
            t = type(ev)
            if t is OrderUpdated:
                ai = ev.account_index
                if ai in hits:
                    nonce = tx_nonce if ai == tx_account else 0
                    self.orders.setdefault(ai, {})[ev.order_index] = (ev, nonce)
            elif t is TxExecuted:
                tx_account = ev.account_index if ev.tx_type == _CREATE_ORDER else -1
                tx_nonce = ev.nonce
            elif t is ConditionalOrderUpdated:
                self.conds[ev.order_index] = ev
                if ev.slice_order_index:
                    self.conds[ev.slice_order_index] = ev
                ai = ev.account_index
                if ai in hits:
                    nonce = tx_nonce if ai == tx_account else 0
                    self.orders.setdefault(ai, {})[ev.order_index] = (ev, nonce)
            elif t is PositionChanged:
                ai = ev.account_index
                if ai in hits:
                    self.positions.setdefault(ai, set()).add(ev.market_index)
                    self._funding(st, ev, funding_paid, ts_ms, ev.market_index in settled)
            elif t is FundingChanged:
                settled.add(ev.market_index)

    def _funding(
        self,
        st: ReplicaState,
        ev: PositionChanged,
        funding_paid: dict[int, dict[int, int]],
        ts_ms: int,
        settled: bool,
    ) -> None:
        known = funding_paid.setdefault(ev.account_index, {})
        old = known.get(ev.market_index, ev.funding_paid)
        known[ev.market_index] = ev.funding_paid
        if not settled or old == ev.funding_paid:
            return
        mi = ev.market_index
        clock = st.history.funding.get(mi)
        rate = clock.last_rate if clock is not None else 0
        paid = FundingPayment(mi, old - ev.funding_paid, ev.size, rate, st.height, ts_ms)
        entry = funding_entry(paid, st.markets[mi])
        self.fundings.setdefault(ev.account_index, {}).setdefault(str(mi), []).append(entry)

    def order_bodies(
        self, st: ReplicaState, ai: int, filled: dict[int, int], market: int = -1
    ) -> dict[str, list[Any]]:
        """The block's orders of ``ai`` (one market, or all with -1) as Lighter ``Order``s, by
        market; ends the ``filled`` memo of orders that are no longer resting."""
        out: dict[str, list[Any]] = {}
        ts_ms = st.timestamp_ns // 1_000_000
        for oi, (ev, nonce) in sorted(self.orders.get(ai, {}).items()):
            if market >= 0 and ev.market_index != market:
                continue
            m = st.markets[ev.market_index]
            fq = filled.get(oi, 0)
            if type(ev) is ConditionalOrderUpdated:
                view = private_views.waiting_order(ev, m, fq, st.height, ts_ms)
                view["nonce"] = nonce
            else:
                cond = self.conds.get(oi) or st.attached.get(oi)
                o: OrderUpdated = ev  # type: ignore[assignment]
                view = order_json(o, o.status, m, fq, nonce, st.height, ts_ms, cond)
            out.setdefault(str(ev.market_index), []).append(view)
        return out

    def update(
        self, st: ReplicaState, ch: AccountChannel, ts_ms: int, filled: dict[int, int]
    ) -> dict[str, Any] | None:
        """``update/<kind>`` for one channel, or None when the block changed nothing it shows."""
        ai = ch.account
        kind = ch.kind
        body: dict[str, Any] = {"channel": ch.reply, "timestamp": ts_ms, "type": f"update/{kind}"}
        if kind == "account_all_orders":
            orders = self.order_bodies(st, ai, filled)
            if not orders:
                return None
            body["orders"] = orders
        elif kind == "account_orders":
            orders = self.order_bodies(st, ai, filled, ch.market)
            if not orders:
                return None
            body.update(account=ai, nonce=st.seq, orders=orders)
        elif kind == "account_all_trades":
            rows = self.trades.get(ai)
            if not rows:
                return None
            body["trades"] = _trades_by_market(st, rows, self.trade_views)
            body.update(_trade_volumes(st, ai))
        elif kind == "account_all_positions":
            changed = self.positions.get(ai)
            if not changed:
                return None
            body.update(positions=_positions(st, ai, sorted(changed)), shares=[])
        elif kind == "account_all_assets":
            body.update(assets=_assets(st, ai), account_id=ai)
        elif kind == "user_stats":
            body["stats"] = user_stats(st, ai)
        elif kind == "account_tx":
            txs = public_views.tx_list(st.history, self.txs.get(ai, []))
            if not txs:
                return None
            body["txs"] = txs
        else:
            return None
        return body

    def forget_final(self, filled: dict[int, int]) -> None:
        """Drop the memo of the orders this block ended (filled, canceled, ...)."""
        for orders in self.orders.values():
            for oi, (ev, _) in orders.items():
                if ev.status != _ACTIVE or ev.remaining_base_amount == 0:
                    filled.pop(oi, None)
