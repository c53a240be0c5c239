"""The account WebSocket channels through the unmodified clients: ccxt.pro's ``watch_orders``,
``watch_my_trades`` and ``watch_balance`` (their auth tokens made by ccxt's own binding of the
SDK's signer library), and the SDK's ``WsClient`` on ``account_all``.

ccxt is configured as a Lighter user would configure it for an existing API key: the account
index, the API key index (ccxt uses 4..254), the key's private key under ``options['auths']`` and
the path of lighter-sdk's bundled signer library (``libraryPath``). Its L1 onboarding
(``ChangePubKey`` signed by an Ethereum key) and the integrator-fee approval are not used: the
key is registered by the operator, ``builderFee`` is off. Orders of that account are placed by
the SDK's own ``SignerClient`` with the same key; the counterparty is a raydex ``Trader``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from raydex.codecs import Deposit, RegisterApiKey, ResultCode, TxType, tx_to_json_str

if TYPE_CHECKING:
    from conftest import Exchange

lighter = pytest.importorskip("lighter", reason="pip install lighter-sdk")
ccxt_pro = pytest.importorskip("ccxt.pro")

USDC = 10**12
KEY = 4  # ccxt refuses API key indexes below 4 (it reserves them for the web and mobile apps)
CREATE = int(TxType.CREATE_ORDER)
WAIT_S = 10.0
ETH = "ETH/USDC:USDC"


def _library() -> str:
    """The signer library lighter-sdk bundles for this platform (ccxt's ``libraryPath``)."""
    import lighter.signer_client as sc

    path = Path(sc.__file__).parent / "signers" / "lighter-signer-linux-amd64.so"
    if not path.exists():
        pytest.skip(f"no lighter signer library at {path}")
    return str(path)


def _register(exchange: Exchange, account: int) -> str:
    """A fresh SDK key registered at ``KEY`` of ``account``, funded; its private key."""
    from lighter.signer_client import create_api_key

    priv, pub, err = create_api_key()
    assert err is None
    ops = [RegisterApiKey(account, KEY, bytes.fromhex(pub[2:])), Deposit(account, USDC)]
    outcomes = exchange.run(exchange.seq.submit(ops, operator=True))
    assert {o.code for o in outcomes} == {ResultCode.OK}
    return str(priv)


def _ccxt(exchange: Exchange, account: int, priv: str) -> Any:
    base = exchange.base_url
    auth = {"signer": None, "lighterPrivateKey": priv, "deadline": None, "token": None}
    return ccxt_pro.lighter(
        {
            "urls": {"api": {"root": base, "public": base, "private": base, "ws": exchange.ws_url}},
            "timeout": 10_000,
            "enableRateLimit": False,
            "options": {
                "accountIndex": account,
                "apiKeyIndex": KEY,
                "libraryPath": _library(),
                "builderFee": False,
                "auths": {str(account): {str(KEY): auth}},
            },
        }
    )


async def _signer(exchange: Exchange, account: int, priv: str) -> Any:
    client = lighter.SignerClient(
        url=exchange.base_url, account_index=account, api_private_keys={KEY: priv}, chain_id=304
    )
    return client


def _free_price(exchange: Exchange, market: int = 0) -> int:
    """A price strictly inside the shared book's spread (other tests leave orders resting), so
    an order there is the best of its side and a cross at it fills exactly that order."""
    book = exchange.replica.state.books[market]
    bid = book.bids[0][0] if book.bids else 250_000
    ask = book.asks[0][0] if book.asks else 350_000
    assert ask - bid >= 2, (bid, ask)
    return (bid + ask) // 2


async def _take(ex: Any, exchange: Exchange, price: int, size: int, is_ask: int) -> None:
    """The shared stack's trader 3 crosses ``size`` lots at ``price`` (sent through ccxt)."""
    t = exchange.traders[3]
    q = {"account_index": t.account, "api_key_index": t.api_key}
    t.nonce = int((await ex.publicGetNextNonce(q))["nonce"])
    tx = t.order(price, size, is_ask, coi=exchange.next_coi())
    reply = await ex.publicPostSendTx({"tx_type": CREATE, "tx_info": tx_to_json_str(tx)})
    assert int(reply["code"]) == 200, reply


async def _seen(read: Callable[[], Any], pred: Callable[[Any], bool]) -> Any:
    """What ccxt parsed into its own cache (``read()``: ``ex.orders``, ``ex.myTrades``,
    ``ex.balance``) once it satisfies ``pred``. Read from the cache rather than from the next
    ``watch_*`` result: an update that lands between two ``watch_*`` calls resolves nothing."""
    for _ in range(int(WAIT_S / 0.01)):
        got = read()
        if got is not None and pred(got):
            return got
        await asyncio.sleep(0.01)
    raise AssertionError(f"ccxt never parsed the expected state; last: {read()!r}")


def _watch(coro: Any, tasks: list[asyncio.Task[Any]]) -> None:
    """Start a ccxt ``watch_*`` (it subscribes, then its parser fills ccxt's cache)."""
    tasks.append(asyncio.get_running_loop().create_task(coro))


def test_ccxt_watches_its_orders_fill_its_trades_and_its_balance(exchange: Exchange) -> None:
    account = 51
    priv = _register(exchange, account)

    async def body() -> None:
        ex = _ccxt(exchange, account, priv)
        signer = await _signer(exchange, account, priv)
        tasks: list[asyncio.Task[Any]] = []
        try:
            await ex.load_markets()
            coi = exchange.next_coi()
            price = _free_price(exchange)
            _tx, resp, err = await signer.create_order(0, coi, 200, price, True, 0, 1)
            assert err is None and resp.code == 200, (resp, err)

            def ours(status: str) -> Callable[[Any], bool]:
                return lambda orders: any(
                    o["clientOrderId"] == str(coi) and o["status"] == status for o in orders
                )

            _watch(ex.watch_orders(), tasks)
            orders = await _seen(lambda: ex.orders, ours("open"))
            mine = [o for o in orders if o["clientOrderId"] == str(coi)][-1]
            assert (mine["symbol"], mine["side"], mine["price"], mine["amount"]) == (
                ETH,
                "sell",
                price / 100,
                0.02,
            )
            await _take(ex, exchange, price, 200, 0)  # lifts the whole ask
            orders = await _seen(lambda: ex.orders, ours("closed"))
            done = [o for o in orders if o["clientOrderId"] == str(coi)][-1]
            assert (done["filled"], done["remaining"], done["cost"]) == (0.02, 0.0, price / 5000)

            token = ex.create_auth({})  # ccxt's own token, from its binding of the signer library
            assert token.split(":")[1:3] == [str(account), str(KEY)]
            _watch(ex.watch_my_trades(params={"auth": token}), tasks)
            trades = await _seen(
                lambda: ex.myTrades, lambda ts: any(t["order"] == done["id"] for t in ts)
            )
            [fill] = [t for t in trades if t["order"] == done["id"]]
            assert (fill["side"], fill["takerOrMaker"], fill["price"], fill["amount"]) == (
                "sell",
                "maker",
                price / 100,
                0.02,
            )

            _watch(ex.watch_balance({"type": "spot"}), tasks)  # account_all_assets (private)
            spot = await _seen(lambda: ex.balance.get("spot"), lambda b: "USDC" in b)
            # a perp fill moves no collateral (maker fee 0)
            assert spot["USDC"]["total"] == 1_000_000.0
            _watch(ex.watch_balance(), tasks)  # ccxt's default for lighter: swap, user_stats
            swap = await _seen(lambda: ex.balance.get("swap"), lambda b: "USDC" in b)
            assert swap["USDC"]["total"] == 1_000_000.0
            # free: the replica's available balance (equity with the short's profit at the
            # mark, minus its initial margin)
            available = exchange.replica.state.available_balance(account)
            assert swap["USDC"]["free"] == available / 1e6 != swap["USDC"]["total"]
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await ex.close()
            await signer.close()

    asyncio.run(asyncio.wait_for(body(), 60))


def test_the_sdk_ws_client_sees_its_trade_and_trade_stats_on_account_all(
    exchange: Exchange,
) -> None:
    account = 53
    priv = _register(exchange, account)
    seen: list[dict[str, Any]] = []
    ws = lighter.WsClient(
        ws_url=exchange.ws_url,
        account_ids=[account],
        on_account_update=lambda _account, msg: seen.append(msg),
    )

    async def until(cond: Callable[[], bool], what: str) -> None:
        for _ in range(int(WAIT_S / 0.01)):
            if cond():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"the WsClient never saw {what}")

    async def body() -> None:
        signer = await _signer(exchange, account, priv)
        ex = _ccxt(exchange, account, priv)
        task = asyncio.get_running_loop().create_task(ws.run_async())
        try:
            await until(lambda: bool(seen), "its subscription snapshot")
            assert seen[0]["type"] == "subscribed/account_all"
            assert seen[0]["total_trades_count"] == 0
            coi = exchange.next_coi()
            price = _free_price(exchange)
            _tx, resp, err = await signer.create_order(0, coi, 100, price, False, 0, 1)
            assert err is None and resp.code == 200, (resp, err)
            await _take(ex, exchange, price, 100, 1)  # trader 3 sells into our bid

            def traded() -> bool:
                return bool(seen[-1].get("trades"))

            await until(traded, "its trade")
            last = seen[-1]
            assert last["type"] == "update/account_all"
            [row] = last["trades"]["0"]
            lighter.models.Trade.model_validate(row, strict=True)
            assert (row["bid_account_id"], row["size"]) == (account, "0.0100")
            assert row["price"] == f"{price // 100}.{price % 100:02d}"
            assert (last["total_trades_count"], last["daily_volume"]) == (1, price / 10_000)
            lighter.models.AccountPosition.model_validate(last["positions"]["0"], strict=True)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            if ws.ws is not None:
                await ws.ws.close()
            await ex.close()
            await signer.close()

    asyncio.run(asyncio.wait_for(body(), 60))
