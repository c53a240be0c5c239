"""Lighter's conditional orders through the unmodified lighter-sdk ``SignerClient``: its own
``create_sl_order``, ``create_sl_limit_order``, ``create_tp_order``, ``create_tp_limit_order``,
``create_order`` with ``ORDER_TYPE_TWAP``, ``create_grouped_orders`` (OTO, OCO, OTOCO) and
``modify_order`` of a waiting stop-loss, signed
by its Go signer and sent with its ``sendTx``; the effects read back through the SDK's API classes
and validated strictly by its pydantic models (``Orders``, ``DetailedAccounts``).

Each test trades in a market of its own (created by the operator on the shared stack) between
two fresh SDK accounts, so no other test's orders or mark moves reach it. Marks move by the
operator's ``SetMarkPrice``; a TWAP's 30 s slices need block time to pass: the test moves the
sequencer's clock forward (``Exchange.clock``) and lets a ``SetMarkPrice`` carry the time in.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pytest

from raydex.actors.local import eth_market
from raydex.codecs import Deposit, RegisterApiKey, ResultCode, SetMarkPrice

if TYPE_CHECKING:
    from conftest import Exchange

lighter = pytest.importorskip("lighter", reason="pip install lighter-sdk")

USDC = 10**12
EXPIRY_HOUR_MS = 3_600_000


class Desk:
    """Two SDK accounts (``a`` trades, ``b`` provides liquidity) in market ``m`` of their own."""

    def __init__(self, exchange: Exchange, m: int, accounts: tuple[int, int]) -> None:
        self.ex = exchange
        self.m = m
        self.accounts = accounts
        outcomes = exchange.run(
            exchange.seq.submit([eth_market(m)._replace(symbol=f"C{m}")], operator=True)
        )
        assert [o.code for o in outcomes] == [ResultCode.OK]
        self.keys = [self._register(ai) for ai in accounts]
        self.a: Any = None
        self.b: Any = None
        self.api: Any = None

    def _register(self, account: int) -> str:
        from lighter.signer_client import create_api_key

        priv, pub, err = create_api_key()
        assert err is None
        ops = [RegisterApiKey(account, 0, bytes.fromhex(pub[2:])), Deposit(account, USDC)]
        outcomes = self.ex.run(self.ex.seq.submit(ops, operator=True))
        assert {o.code for o in outcomes} == {ResultCode.OK}
        return str(priv)

    async def open(self) -> None:
        url = self.ex.base_url
        self.a, self.b = (
            lighter.SignerClient(url=url, account_index=ai, api_private_keys={0: k}, chain_id=304)
            for ai, k in zip(self.accounts, self.keys, strict=True)
        )
        self.api = lighter.ApiClient(configuration=lighter.Configuration(host=url))

    async def close(self) -> None:
        for c in (self.a, self.b):
            await c.close()
        await self.api.close()

    def mark(self, price: int) -> None:
        outcomes = self.ex.run(self.ex.seq.submit([SetMarkPrice(self.m, price)], operator=True))
        assert [o.code for o in outcomes] == [ResultCode.OK]

    def coi(self) -> int:
        return self.ex.next_coi()

    async def _strict(self, model: Any, call: Any, **kw: Any) -> dict[str, Any]:
        """An SDK read's raw JSON, validated strictly by the SDK's ``model``."""
        resp = await call(**kw)
        body: dict[str, Any] = json.loads(await resp.read())
        model.model_validate(body, strict=True)
        return body

    async def active(self, who: Any) -> list[dict[str, Any]]:
        auth, err = who.create_auth_token_with_expiry()
        assert err is None
        body = await self._strict(
            lighter.models.Orders,
            lighter.OrderApi(self.api).account_active_orders_without_preload_content,
            authorization=auth, account_index=who.account_index, market_id=self.m,
        )  # fmt: skip
        return list(body["orders"])

    async def inactive(self, who: Any) -> list[dict[str, Any]]:
        auth, err = who.create_auth_token_with_expiry()
        assert err is None
        body = await self._strict(
            lighter.models.Orders,
            lighter.OrderApi(self.api).account_inactive_orders_without_preload_content,
            authorization=auth, account_index=who.account_index, limit=50, market_id=self.m,
        )  # fmt: skip
        return list(body["orders"])

    async def position(self, who: Any) -> tuple[str, dict[str, Any]]:
        """(the account's position size in this market, the account) from ``account``."""
        body = await self._strict(
            lighter.models.DetailedAccounts,
            lighter.AccountApi(self.api).account_without_preload_content,
            by="index", value=str(who.account_index),
        )  # fmt: skip
        [acct] = body["accounts"]
        pos = [p for p in acct["positions"] if p["market_id"] == self.m]
        return (pos[0]["position"] if pos else "0.0000"), acct


def _ok(result: tuple[Any, Any, Any]) -> Any:
    _tx, resp, err = result
    assert err is None, err
    assert resp.code == 200, resp
    return resp


def _with(exchange: Exchange, m: int, accounts: tuple[int, int],
          body: Callable[[Desk], Awaitable[None]]) -> None:  # fmt: skip
    desk = Desk(exchange, m, accounts)

    async def main() -> None:
        await desk.open()
        try:
            await body(desk)
        finally:
            await desk.close()

    asyncio.run(main())


def _by_coi(orders: list[dict[str, Any]], coi: int) -> dict[str, Any]:
    [o] = [o for o in orders if o["client_order_index"] == coi]
    return o


def test_a_stop_loss_fires_on_a_mark_move_and_closes_the_position(exchange: Exchange) -> None:
    async def body(d: Desk) -> None:
        a, b, m = d.a, d.b, d.m
        _ok(await b.create_order(m, d.coi(), 100, 300_000, True, b.ORDER_TYPE_LIMIT,
                                 b.ORDER_TIME_IN_FORCE_GOOD_TILL_TIME))  # fmt: skip
        ioc = a.ORDER_TIME_IN_FORCE_IMMEDIATE_OR_CANCEL
        _ok(await a.create_order(m, d.coi(), 100, 300_000, False, a.ORDER_TYPE_LIMIT, ioc,
                                 order_expiry=0))  # fmt: skip
        assert (await d.position(a))[0] == "0.0100"
        _ok(await b.create_order(m, d.coi(), 100, 290_000, False, b.ORDER_TYPE_LIMIT,
                                 b.ORDER_TIME_IN_FORCE_GOOD_TILL_TIME))  # fmt: skip
        sl, tp = d.coi(), d.coi()
        # sell 0.0100 if the mark falls to 2950 (no worse than 2800); take profit at 3200
        _ok(await a.create_sl_order(m, sl, 100, 295_000, 280_000, True, reduce_only=True))
        _ok(await a.create_tp_limit_order(m, tp, 100, 320_000, 320_000, True, reduce_only=True))
        waiting = await d.active(a)
        s, t = _by_coi(waiting, sl), _by_coi(waiting, tp)
        assert (s["type"], s["status"], s["trigger_status"], s["trigger_price"]) == (
            "stop-loss", "pending", "mark-price", "2950.00",
        )  # fmt: skip
        assert (t["type"], t["trigger_price"], t["price"]) == (
            "take-profit-limit", "3200.00", "3200.00",
        )  # fmt: skip
        _, acct = await d.position(a)
        assert acct["pending_order_count"] == 2

        d.mark(296_000)  # not there yet
        assert {o["client_order_index"] for o in await d.active(a)} == {sl, tp}
        d.mark(295_000)  # reached: the stop sells the position into b's bid at 2900
        assert (await d.position(a))[0] == "0.0000"
        fired = _by_coi(await d.inactive(a), sl)
        assert (fired["type"], fired["status"], fired["trigger_status"]) == (
            "stop-loss", "filled", "ready",
        )  # fmt: skip
        filled = (fired["filled_base_amount"], fired["filled_quote_amount"])
        assert filled == ("0.0100", "29.000000")
        # the take-profit (a sized reduce-only order) still waits; its owner cancels it
        [left] = await d.active(a)
        _ok(await a.cancel_order(m, left["order_index"]))
        assert await d.active(a) == []
        assert _by_coi(await d.inactive(a), tp)["status"] == "canceled"

    _with(exchange, 11, (71, 72), body)


def test_an_otoco_take_profit_fill_cancels_its_stop_loss(exchange: Exchange) -> None:
    from lighter.signer_client import CreateOrderTxReq

    async def body(d: Desk) -> None:
        a, b, m = d.a, d.b, d.m
        _ok(await b.create_order(m, d.coi(), 100, 300_000, True, b.ORDER_TYPE_LIMIT,
                                 b.ORDER_TIME_IN_FORCE_GOOD_TILL_TIME))  # fmt: skip
        exp = d.ex.clock.now_ms() + EXPIRY_HOUR_MS
        entry_coi = d.coi()
        entry = CreateOrderTxReq(
            MarketIndex=m, ClientOrderIndex=entry_coi, BaseAmount=100, Price=300_000, IsAsk=0,
            Type=a.ORDER_TYPE_LIMIT, TimeInForce=a.ORDER_TIME_IN_FORCE_IMMEDIATE_OR_CANCEL,
            ReduceOnly=0, TriggerPrice=0, OrderExpiry=0,
        )  # fmt: skip
        take = CreateOrderTxReq(
            MarketIndex=m, ClientOrderIndex=0, BaseAmount=0, Price=300_000, IsAsk=1,
            Type=a.ORDER_TYPE_TAKE_PROFIT, TimeInForce=a.ORDER_TIME_IN_FORCE_IMMEDIATE_OR_CANCEL,
            ReduceOnly=1, TriggerPrice=310_000, OrderExpiry=exp,
        )  # fmt: skip
        stop = CreateOrderTxReq(
            MarketIndex=m, ClientOrderIndex=0, BaseAmount=0, Price=280_000, IsAsk=1,
            Type=a.ORDER_TYPE_STOP_LOSS, TimeInForce=a.ORDER_TIME_IN_FORCE_IMMEDIATE_OR_CANCEL,
            ReduceOnly=1, TriggerPrice=290_000, OrderExpiry=exp,
        )  # fmt: skip
        _ok(await a.create_grouped_orders(
            a.GROUPING_TYPE_ONE_TRIGGERS_A_ONE_CANCELS_THE_OTHER, [entry, take, stop]
        ))  # fmt: skip
        assert (await d.position(a))[0] == "0.0100"  # the entry filled: the children armed
        tp, sl = await d.active(a)
        entry_done = _by_coi(await d.inactive(a), entry_coi)
        assert (entry_done["status"], entry_done["to_trigger_order_id_0"]) == (
            "filled", tp["order_id"],
        )  # fmt: skip
        assert (tp["type"], tp["trigger_status"], tp["parent_order_index"]) == (
            "take-profit", "mark-price", entry_done["order_index"],
        )  # fmt: skip
        assert (sl["type"], sl["to_cancel_order_id_0"]) == ("stop-loss", tp["order_id"])

        _ok(await b.create_order(m, d.coi(), 100, 310_000, False, b.ORDER_TYPE_LIMIT,
                                 b.ORDER_TIME_IN_FORCE_GOOD_TILL_TIME))  # fmt: skip
        d.mark(310_000)  # the take-profit fires and sells into b's bid at 3100
        assert (await d.position(a))[0] == "0.0000"
        assert await d.active(a) == []
        done = {o["order_index"]: o for o in await d.inactive(a)}
        took = done[tp["order_index"]]
        assert (took["status"], took["filled_base_amount"]) == ("filled", "0.0100")
        assert done[sl["order_index"]]["status"] == "canceled-oco"

    _with(exchange, 12, (73, 74), body)


def test_oto_and_oco_groups_and_the_other_stop_loss_take_profit_helpers(
    exchange: Exchange,
) -> None:
    from lighter.signer_client import CreateOrderTxReq

    async def body(d: Desk) -> None:
        a, b, m = d.a, d.b, d.m
        exp = d.ex.clock.now_ms() + EXPIRY_HOUR_MS
        # OTO: a resting entry and a stop-loss waiting for it
        entry_coi = d.coi()
        _ok(await a.create_grouped_orders(a.GROUPING_TYPE_ONE_TRIGGERS_THE_OTHER, [
            CreateOrderTxReq(MarketIndex=m, ClientOrderIndex=entry_coi, BaseAmount=100,
                             Price=290_000, IsAsk=0, Type=a.ORDER_TYPE_LIMIT,
                             TimeInForce=a.ORDER_TIME_IN_FORCE_GOOD_TILL_TIME, ReduceOnly=0,
                             TriggerPrice=0, OrderExpiry=exp),
            CreateOrderTxReq(MarketIndex=m, ClientOrderIndex=0, BaseAmount=0, Price=270_000,
                             IsAsk=1, Type=a.ORDER_TYPE_STOP_LOSS_LIMIT,
                             TimeInForce=a.ORDER_TIME_IN_FORCE_GOOD_TILL_TIME, ReduceOnly=1,
                             TriggerPrice=280_000, OrderExpiry=exp),
        ]))  # fmt: skip
        entry, child = await d.active(a)
        assert (entry["status"], child["status"], child["trigger_status"]) == (
            "open", "pending", "parent-order",
        )  # fmt: skip
        assert child["parent_order_id"] == entry["order_id"]
        _ok(await a.cancel_order(m, entry["order_index"]))  # unfilled: the child goes with it
        assert await d.active(a) == []
        assert _by_coi(await d.inactive(a), 0)["status"] == "canceled-child"

        # a short position, then an OCO pair on it (both reduce-only, size 0)
        _ok(await b.create_order(m, d.coi(), 100, 300_000, False, b.ORDER_TYPE_LIMIT,
                                 b.ORDER_TIME_IN_FORCE_GOOD_TILL_TIME))  # fmt: skip
        ioc = a.ORDER_TIME_IN_FORCE_IMMEDIATE_OR_CANCEL
        _ok(await a.create_order(m, d.coi(), 100, 300_000, True, a.ORDER_TYPE_LIMIT, ioc,
                                 order_expiry=0))  # fmt: skip
        assert (await d.position(a))[1]["positions"][0]["sign"] == -1
        _ok(await a.create_grouped_orders(a.GROUPING_TYPE_ONE_CANCELS_THE_OTHER, [
            CreateOrderTxReq(MarketIndex=m, ClientOrderIndex=0, BaseAmount=0, Price=290_000,
                             IsAsk=0, Type=a.ORDER_TYPE_TAKE_PROFIT_LIMIT,
                             TimeInForce=a.ORDER_TIME_IN_FORCE_GOOD_TILL_TIME, ReduceOnly=1,
                             TriggerPrice=290_000, OrderExpiry=exp),
            CreateOrderTxReq(MarketIndex=m, ClientOrderIndex=0, BaseAmount=0, Price=320_000,
                             IsAsk=0, Type=a.ORDER_TYPE_STOP_LOSS,
                             TimeInForce=a.ORDER_TIME_IN_FORCE_IMMEDIATE_OR_CANCEL, ReduceOnly=1,
                             TriggerPrice=310_000, OrderExpiry=exp),
        ]))  # fmt: skip
        tp, sl = await d.active(a)
        links = (tp["to_cancel_order_id_0"], sl["to_cancel_order_id_0"])
        assert links == (sl["order_id"], tp["order_id"])
        _, acct = await d.position(a)
        assert [(p["pending_order_count"], p["position_tied_order_count"])
                for p in acct["positions"]] == [(2, 2)]  # fmt: skip
        _ok(await a.cancel_order(m, sl["order_index"]))  # one cancelled: the other too
        assert await d.active(a) == []
        assert {o["order_index"]: o["status"] for o in await d.inactive(a)}[tp["order_index"]] == (
            "canceled-oco"
        )
        # the remaining helpers: a market take-profit and a stop-loss-limit buying back
        tp2, sl2 = d.coi(), d.coi()
        _ok(await a.create_tp_order(m, tp2, 100, 290_000, 295_000, False, reduce_only=True))
        _ok(await a.create_sl_limit_order(m, sl2, 100, 310_000, 311_000, False, reduce_only=True))
        waiting = await d.active(a)
        assert [(o["type"], o["trigger_price"], o["time_in_force"]) for o in waiting] == [
            ("take-profit", "2900.00", "immediate-or-cancel"),
            ("stop-loss-limit", "3100.00", "good-till-time"),
        ]
        # the stop moved up (a trailing stop): modify_order with a new trigger price
        _ok(await a.modify_order(m, waiting[1]["order_index"], 100, 313_000, trigger_price=312_000))
        moved = (await d.active(a))[1]
        assert (moved["trigger_price"], moved["price"], moved["status"]) == (
            "3120.00", "3130.00", "pending",
        )  # fmt: skip
        _ok(await a.cancel_all_orders(a.CANCEL_ALL_TIF_IMMEDIATE, 0))
        assert await d.active(a) == []

    _with(exchange, 13, (75, 76), body)


def test_a_twap_fills_in_slices_as_block_time_passes(exchange: Exchange) -> None:
    async def body(d: Desk) -> None:
        a, b, m = d.a, d.b, d.m
        _ok(await b.create_order(m, d.coi(), 1_000, 300_000, True, b.ORDER_TYPE_LIMIT,
                                 b.ORDER_TIME_IN_FORCE_GOOD_TILL_TIME))  # fmt: skip
        twap_coi = d.coi()
        end = d.ex.clock.now_ms() + 6 * 60_000 + 20_000  # twelve 30 s slices
        gtt = a.ORDER_TIME_IN_FORCE_GOOD_TILL_TIME
        _ok(await a.create_order(m, twap_coi, 120, 301_000, False, a.ORDER_TYPE_TWAP, gtt,
                                 order_expiry=end))  # fmt: skip
        [twap] = await d.active(a)
        assert (twap["type"], twap["status"], twap["trigger_status"]) == ("twap", "open", "twap")
        for _ in range(2):
            d.ex.clock.advance(30_000)
            d.mark(300_000)  # carries the block time in: the slice due runs
        [twap] = await d.active(a)
        assert (twap["filled_base_amount"], twap["remaining_base_amount"]) == ("0.0020", "0.0100")
        assert (await d.position(a))[0] == "0.0020"
        subs = [o for o in await d.inactive(a) if o["type"] == "twap-sub"]
        assert [(s["parent_order_index"], s["filled_base_amount"], s["price"]) for s in subs] == [
            (twap["order_index"], "0.0010", "3010.00"),
        ] * 2
        _ok(await a.cancel_order(m, twap["order_index"]))
        assert _by_coi(await d.inactive(a), twap_coi)["status"] == "canceled"

    _with(exchange, 14, (77, 78), body)
