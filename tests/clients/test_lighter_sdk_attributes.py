"""The unmodified lighter-sdk's ``L2TxAttributes`` and market-order helpers against raydex: its own
Go signer and ``sendTx``, read back with its own API classes and models.

- ``cancel_all_orders(..., cancel_all_market_index=M)`` cancels in market M only;
- ``modify_order(..., order_version=V)`` applies above the order's version, is refused stale;
- the SDK's nonce manager stays in step: a tx that fails in its block (a post-only order that
  would cross) is answered 200 with its code in ``codes``, as Lighter answers it; an "invalid
  nonce" makes the SDK re-read its nonce, as it does against Lighter;
- ``create_order(..., self_trade_behavior_mode=B)`` for each of Lighter's four behaviours;
- ``create_market_order`` with a wide average price, and ``create_market_order_limited_slippage``;
  one whose average limit stops it part-way (``canceled-too-much-slippage``);
- WebSocket ``jsonapi/sendtx`` with ``tx_info`` as an object and ``jsonapi/sendtxbatch``, from a
  real aiohttp WebSocket client, as Lighter's own examples send them.

Each test trades in a market of its own (made by the operator, as the stack's markets are), with
accounts of its own (markets 20-29, accounts 91-105: no other client test uses them; an L1
deposit's new account comes after them), so the shared stack's other books and accounts do not
meet it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from raydex.actors.local import eth_market
from raydex.codecs import Deposit, RegisterApiKey, ResultCode

if TYPE_CHECKING:
    from conftest import Exchange

lighter = pytest.importorskip("lighter", reason="pip install lighter-sdk")

USDC = 10**12
KEY = 0
ASK_PRICE = 320_000  # 3200.00 in markets with 2 price decimals (mark 3000.00)
WAIT_S = 10.0


def _market(exchange: Exchange, mi: int) -> int:
    """A market of the test's own (index ``mi``), made once per session."""
    (o,) = exchange.run(
        exchange.seq.submit([eth_market(mi)._replace(symbol=f"A{mi}")], operator=True)
    )
    assert o.code in (ResultCode.OK, ResultCode.MARKET_EXISTS)
    return mi


def _register(exchange: Exchange, account: int) -> str:
    """A fresh SDK key at index 0 of ``account`` (the operator's, as in the signer tests),
    funded; its private key."""
    from lighter.signer_client import create_api_key

    priv, pub, err = create_api_key()
    assert err is None
    ops = [RegisterApiKey(account, KEY, bytes.fromhex(pub[2:])), Deposit(account, USDC)]
    outcomes = exchange.run(exchange.seq.submit(ops, operator=True))
    assert {o.code for o in outcomes} == {ResultCode.OK}
    return str(priv)


def _ok(result: tuple[Any, Any, Any]) -> Any:
    _tx, resp, err = result
    assert err is None, err
    assert resp.code == 200, resp
    return resp


class Bot:
    """One account traded through the SDK's ``SignerClient``, read through its API classes."""

    def __init__(self, exchange: Exchange, account: int) -> None:
        self.exchange = exchange
        self.account = account
        priv = _register(exchange, account)
        self.client = lighter.SignerClient(
            url=exchange.base_url, account_index=account, api_private_keys={KEY: priv},
            chain_id=304,
        )  # fmt: skip
        self.api = lighter.ApiClient(configuration=lighter.Configuration(host=exchange.base_url))
        self.orders = lighter.OrderApi(self.api)
        token, err = self.client.create_auth_token_with_expiry(3600, api_key_index=KEY)
        assert err is None, err
        self.token = str(token)

    async def close(self) -> None:
        await self.client.close()
        await self.api.close()

    async def active(self, market: int) -> dict[int, Any]:
        """client order index -> the SDK's ``Order``, of its resting orders in ``market``."""
        got = await self.orders.account_active_orders(
            authorization=self.token, account_index=self.account, market_id=market
        )
        return {o.client_order_index: o for o in got.orders}

    async def done(self) -> dict[int, Any]:
        """client order index -> the SDK's ``Order``, of the orders that left the book."""
        got = await self.orders.account_inactive_orders(
            authorization=self.token, account_index=self.account, limit=50
        )
        return {o.client_order_index: o for o in got.orders}

    async def rest(self, market: int, price: int, size: int = 100, is_ask: bool = True) -> int:
        coi = self.exchange.next_coi()
        c = self.client
        _ok(
            await c.create_order(
                market, coi, size, price, is_ask, c.ORDER_TYPE_LIMIT,
                c.ORDER_TIME_IN_FORCE_GOOD_TILL_TIME,
            )
        )  # fmt: skip
        return coi


def run(exchange: Exchange, accounts: list[int], body: Callable[..., Awaitable[None]]) -> None:
    async def main() -> None:
        bots = [Bot(exchange, a) for a in accounts]
        try:
            await body(*bots)
        finally:
            for b in bots:
                await b.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_cancel_all_orders_with_a_market_index_cancels_in_that_market_only(
    exchange: Exchange,
) -> None:
    m1, m2 = _market(exchange, 20), _market(exchange, 21)

    async def body(bot: Bot) -> None:
        keep = await bot.rest(m1, ASK_PRICE)
        gone = await bot.rest(m2, ASK_PRICE)
        c = bot.client
        _ok(await c.cancel_all_orders(c.CANCEL_ALL_TIF_IMMEDIATE, 0, cancel_all_market_index=m2))
        assert list(await bot.active(m1)) == [keep]
        assert await bot.active(m2) == {}
        assert (await bot.done())[gone].status == "canceled"
        _ok(await c.cancel_all_orders(c.CANCEL_ALL_TIF_IMMEDIATE, 0))  # every market
        assert await bot.active(m1) == {}

    run(exchange, [91], body)


def test_modify_order_with_an_order_version_applies_above_it_and_is_refused_stale(
    exchange: Exchange,
) -> None:
    """lighter-sdk's own example (``examples/orders/modify_order_version_http.py``): version 100
    applies, 100 again is stale and refused, 200 applies."""
    m = _market(exchange, 22)

    async def body(bot: Bot) -> None:
        coi = await bot.rest(m, ASK_PRICE, 100)
        c = bot.client
        _ok(await c.modify_order(m, coi, 110, ASK_PRICE + 100, order_version=100))
        o = (await bot.active(m))[coi]
        assert (o.price, o.initial_base_amount, o.order_version) == ("3201.00", "0.0110", 100)
        _tx, resp, err = await c.modify_order(m, coi, 120, ASK_PRICE + 200, order_version=100)
        # executed and refused in its block, its nonce used: code 200 as on Lighter, what it
        # did in ``codes``; the SDK's nonce manager keeps counting, no re-sync needed
        assert err is None and resp.code == 200, (resp, err)
        assert resp.additional_properties["codes"] == 21850
        assert "STALE_ORDER_VERSION" in resp.message
        o = (await bot.active(m))[coi]
        assert (o.price, o.order_version) == ("3201.00", 100)
        _ok(await c.modify_order(m, coi, 120, ASK_PRICE + 200, order_version=200))
        o = (await bot.active(m))[coi]
        assert (o.price, o.remaining_base_amount, o.order_version) == ("3202.00", "0.0120", 200)
        _ok(await c.modify_order(m, coi, 130, ASK_PRICE + 300))  # no version: applies
        assert (await bot.active(m))[coi].order_version == 200
        _ok(await c.cancel_order(m, coi))

    run(exchange, [92], body)


def test_the_sdk_keeps_trading_after_a_tx_fails_in_its_block_and_after_a_foreign_nonce(
    exchange: Exchange,
) -> None:
    """A market maker's day: a post-only order that would cross fails in its block (its nonce
    used) and the SDK's next orders go through without any re-sync; then another client of the
    same key takes a nonce behind the SDK's back, the SDK's next tx gets Lighter's "invalid
    nonce", the SDK re-reads its nonce from nextNonce by itself, and its next tx goes through."""
    m = _market(exchange, 29)

    async def body(bot: Bot, other: Bot) -> None:
        await other.rest(m, ASK_PRICE, 2)
        c = bot.client
        po = c.ORDER_TIME_IN_FORCE_POST_ONLY
        coi = exchange.next_coi()
        _tx, resp, err = await c.create_order(m, coi, 2, ASK_PRICE, False, c.ORDER_TYPE_LIMIT, po)
        assert err is None and resp.code == 200, (resp, err)
        assert resp.additional_properties["codes"] == ResultCode.POST_ONLY_WOULD_CROSS
        assert coi not in await bot.active(m)
        bid = await bot.rest(m, ASK_PRICE - 100, 2, is_ask=False)  # no re-sync needed
        assert (await bot.active(m))[bid].price == "3199.00"

        # a second client of the same key uses the next nonce
        nxt = await c.tx_api.next_nonce(account_index=bot.account, api_key_index=KEY)
        tx_type, tx_info, _h, err = c.sign_cancel_order(m, bid, nonce=nxt.nonce, api_key_index=KEY)
        assert err is None
        assert (await c.send_tx(tx_type=tx_type, tx_info=tx_info)).code == 200
        _tx, resp, err = await c.create_order(
            m, exchange.next_coi(), 2, ASK_PRICE - 200, False, c.ORDER_TYPE_LIMIT, po
        )
        assert resp is None and "21104" in str(err) and "invalid nonce" in str(err), err
        await bot.rest(m, ASK_PRICE - 300, 2, is_ask=False)  # the SDK re-read its nonce
        assert [o.price for o in (await bot.active(m)).values()] == ["3197.00"]
        _ok(await c.cancel_all_orders(c.CANCEL_ALL_TIF_IMMEDIATE, 0, cancel_all_market_index=m))
        o = other.client
        _ok(await o.cancel_all_orders(o.CANCEL_ALL_TIF_IMMEDIATE, 0, cancel_all_market_index=m))

    run(exchange, [104, 105], body)


@pytest.mark.parametrize(
    ("behavior", "market", "own_left", "taker_status"),
    [
        # the bot's own ask (3 lots at 3200.00) under another account's (2 at 3200.10); the
        # bot buys 4 at 3200.10 with the behaviour
        (0, 23, None, "open"),  # ExpireMaker: own ask cancelled, 2 bought, 2 rest
        (1, 24, "0.0003", "canceled-self-trade"),  # ExpireTaker: the buy goes, the ask stays
        (2, 25, None, "canceled-self-trade"),  # CancelBoth
        (3, 26, None, "filled"),  # Reduce: 3 netted, 1 bought from the other
    ],
)
def test_create_order_with_each_self_trade_behavior(
    exchange: Exchange, behavior: int, market: int, own_left: str | None, taker_status: str
) -> None:
    m = _market(exchange, market)

    async def body(bot: Bot, other: Bot) -> None:
        own = await bot.rest(m, ASK_PRICE, 3)
        await other.rest(m, ASK_PRICE + 10, 2)
        c = bot.client
        coi = exchange.next_coi()
        _ok(
            await c.create_order(
                m, coi, 4, ASK_PRICE + 10, False, c.ORDER_TYPE_LIMIT,
                c.ORDER_TIME_IN_FORCE_GOOD_TILL_TIME, self_trade_behavior_mode=behavior,
            )
        )  # fmt: skip
        active, done = await bot.active(m), await bot.done()
        if own_left is None:
            assert done[own].status == "canceled-self-trade"
        else:
            assert active[own].remaining_base_amount == own_left
        taker = active[coi] if taker_status == "open" else done[coi]
        assert taker.status == taker_status
        _ok(await c.cancel_all_orders(c.CANCEL_ALL_TIF_IMMEDIATE, 0, cancel_all_market_index=m))
        o = other.client
        _ok(await o.cancel_all_orders(o.CANCEL_ALL_TIF_IMMEDIATE, 0, cancel_all_market_index=m))

    run(exchange, [93 + 2 * behavior, 94 + 2 * behavior], body)


def test_a_market_order_with_a_wide_slippage_price_fills(exchange: Exchange) -> None:
    """``create_market_order`` with the widest average price (no FAT_FINGER_PRICE), and
    ``create_market_order_limited_slippage``, which reads the best price from our book."""
    m = _market(exchange, 27)

    async def body(taker: Bot, maker: Bot) -> None:
        await maker.rest(m, ASK_PRICE, 2)
        await maker.rest(m, ASK_PRICE + 5_000, 2)  # 3250.00: 1.6% up
        c = taker.client
        _ok(await c.create_market_order(m, exchange.next_coi(), 3, 2**32 - 1, False))
        pos = await lighter.AccountApi(taker.api).account(by="index", value=str(taker.account))
        [p] = [p for p in pos.accounts[0].positions if p.market_id == m]
        assert (p.position, p.sign) == ("0.0003", 1)
        # 1% slippage from the best ask (3250.00): the 1 lot left there fills
        _ok(await c.create_market_order_limited_slippage(m, exchange.next_coi(), 1, 0.01, False))
        assert [o.price for o in (await maker.active(m)).values()] == []
        # the price limits the average: 2 at 3200.00 leave 40.00 under 3220.00, so 1 lot at
        # 3250.00 (30.00 over) fills and a second would not; the rest is canceled
        await maker.rest(m, ASK_PRICE, 2)
        await maker.rest(m, ASK_PRICE + 5_000, 2)
        coi = exchange.next_coi()
        _ok(await c.create_market_order(m, coi, 4, ASK_PRICE + 2_000, False))
        o = (await taker.done())[coi]
        assert (o.status, o.filled_base_amount) == ("canceled-too-much-slippage", "0.0003")
        assert [o.remaining_base_amount for o in (await maker.active(m)).values()] == ["0.0001"]

    run(exchange, [101, 102], body)


def test_ws_sendtx_takes_an_sdk_signed_tx_info_as_an_object_and_sendtxbatch_its_strings(
    exchange: Exchange,
) -> None:
    """Lighter's ``examples/utils.py``: ``ws_send_tx`` puts ``json.loads(tx_info)`` in
    ``data.tx_info`` and the ``id`` in ``data``; ``ws_send_batch_tx`` sends ``json.dumps`` of the
    types and of the tx_info strings."""
    m = _market(exchange, 28)
    from lighter.models.resp_send_tx import RespSendTx
    from lighter.models.resp_send_tx_batch import RespSendTxBatch

    async def body(bot: Bot) -> None:
        c = bot.client
        nonce = (await c.tx_api.next_nonce(account_index=bot.account, api_key_index=KEY)).nonce
        coi = exchange.next_coi()
        tx_type, tx_info, tx_hash, err = c.sign_create_order(
            m, coi, 100, ASK_PRICE, 1, 0, 1, nonce=nonce, api_key_index=KEY
        )
        assert err is None
        batch = [
            c.sign_create_order(
                m, exchange.next_coi(), 100, ASK_PRICE + i, 1, 0, 1, nonce=nonce + 1 + i,
                api_key_index=KEY,
            )
            for i in range(2)
        ]  # fmt: skip
        async with aiohttp.ClientSession() as s, s.ws_connect(exchange.ws_url) as ws:
            assert (await ws.receive_json(timeout=WAIT_S))["type"] == "connected"
            data = {"id": "my_random_id_1", "tx_type": tx_type, "tx_info": json.loads(tx_info)}
            await ws.send_str(json.dumps({"type": "jsonapi/sendtx", "data": data}))
            reply = await _reply(ws, "jsonapi/sendtx")
            assert (reply["code"], reply["id"], reply["tx_hash"]) == (
                200,
                "my_random_id_1",
                tx_hash,
            )
            RespSendTx.model_validate(_fields(reply, RespSendTx), strict=True)
            await ws.send_str(json.dumps({"type": "jsonapi/sendtxbatch", "data": {
                "id": "my_random_id_2", "tx_types": json.dumps([b[0] for b in batch]),
                "tx_infos": json.dumps([b[1] for b in batch])}}))  # fmt: skip
            reply = await _reply(ws, "jsonapi/sendtxbatch")
            assert (reply["code"], reply["id"]) == (200, "my_random_id_2")
            assert reply["tx_hash"] == [b[2] for b in batch]
            RespSendTxBatch.model_validate(_fields(reply, RespSendTxBatch), strict=True)
        assert len(await bot.active(m)) == 3
        _ok(await c.cancel_all_orders(c.CANCEL_ALL_TIF_IMMEDIATE, 0, cancel_all_market_index=m))

    run(exchange, [103], body)


async def _reply(ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict[str, Any]:
    for _ in range(50):
        msg: dict[str, Any] = await ws.receive_json(timeout=WAIT_S)
        if msg.get("type") == kind:
            return msg
    raise AssertionError(f"no {kind} reply")


def _fields(reply: dict[str, Any], model: Any) -> dict[str, Any]:
    return {k: reply[k] for k in model.model_fields if k in reply}
