"""The authenticated reads through the unmodified clients: lighter-sdk's ``OrderApi``,
``AccountApi`` and ``TransactionApi`` with a token from its own ``SignerClient
.create_auth_token_with_expiry`` (its Go signer), and ccxt's private ``fetch_*`` methods.

ccxt signs its tokens with its own bindings to Lighter's signer library, which do not load the
1.1.8 library (issue 11); ccxt caches tokens per (account, API key) in ``options['auths']``, so
it is handed the token the SDK signed, the way it would cache its own: everything else (the
request, the ``Authorization`` header, the parsing) is ccxt's. ccxt insists on an API key index
of at least 4 (0-3 are Lighter's apps): the account's key sits at index 5.

The account is fresh on the shared stack; its counterparty is trader 3 of the conftest. Prices
are picked inside the current spread of market 1 so nothing of other tests' orders is touched.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from raydex.actors.local import FAR_MS
from raydex.codecs import (
    Deposit,
    RegisterApiKey,
    ResultCode,
    Transfer,
    sign_tx,
    tx_to_json_str,
    tx_type_of,
)

if TYPE_CHECKING:
    from conftest import Exchange

lighter = pytest.importorskip("lighter", reason="pip install lighter-sdk")
ccxt = pytest.importorskip("ccxt", reason="pip install ccxt")
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import lighter.models as models

ACCOUNT = 61
KEY = 5
MARKET = 1
USDC = 10**12
BTC = "BTC/USDC:USDC"
RETRIES = 100


class Setup:
    """The fresh account: its SDK key, what it did, and an auth token for it."""

    def __init__(self, priv: str, token: str, ask_coi: int, cancelled_coi: int) -> None:
        self.priv, self.token = priv, token
        self.ask_coi, self.cancelled_coi = ask_coi, cancelled_coi


def _gap_price(exchange: Exchange, market: int) -> int:
    """A price strictly inside market ``market``'s spread (ticks), as near its mark as that
    allows (the fat-finger band is around the mark), with room for a bid 50 ticks under it."""
    st = exchange.replica.state
    book = exchange.run(_read(lambda: st.books[market]))
    mark = exchange.run(_read(lambda: st.markets[market].mark_price))
    lo = book.bids[0][0] if book.bids else 0
    hi = book.asks[0][0] if book.asks else 2**31
    price = min(max(mark, lo + 1), hi - 1)
    assert lo < price < hi and price > 100, (lo, price, hi)
    return int(price)


async def _read(f: Any) -> Any:
    return f()


def _ok(result: tuple[Any, Any, Any]) -> Any:
    _tx, resp, err = result
    assert err is None, err
    assert resp.code == 200, resp
    return resp


@pytest.fixture(scope="module")
def acct(exchange: Exchange) -> Iterator[Setup]:
    """Register the key, fund the account, trade, cancel, withdraw, receive a transfer."""
    from lighter.signer_client import create_api_key

    priv, pub, err = create_api_key()
    assert err is None
    ops = [RegisterApiKey(ACCOUNT, KEY, bytes.fromhex(pub[2:])), Deposit(ACCOUNT, USDC)]
    assert {o.code for o in exchange.run(exchange.seq.submit(ops, operator=True))} == {
        ResultCode.OK
    }
    carol = exchange.traders[3]
    price = _gap_price(exchange, MARKET)
    ask_coi, cancelled_coi = exchange.next_coi(), exchange.next_coi()

    async def body() -> str:
        client = lighter.SignerClient(
            url=exchange.base_url,
            account_index=ACCOUNT,
            api_private_keys={KEY: priv},
            chain_id=304,
        )
        api = lighter.ApiClient(configuration=lighter.Configuration(host=exchange.base_url))

        async def sdk(make: Callable[[], Awaitable[Any]]) -> None:
            """One SDK tx; sent again while the replica's overload door answers 429 (the tx
            was not executed: the SDK's nonce is handed back)."""
            for _ in range(RETRIES):
                try:
                    _ok(await make())
                    return
                except lighter.ApiException as e:
                    if e.status != 429:
                        raise
                    client.nonce_manager.acknowledge_failure(KEY)
                    await asyncio.sleep(0.2)
            raise AssertionError("overloaded throughout")

        async def send(tx: Any) -> None:
            for _ in range(RETRIES):
                try:
                    reply = await tx_api.send_tx(
                        tx_type=tx_type_of(type(tx)), tx_info=tx_to_json_str(tx)
                    )
                    assert reply.code == 200, reply
                    return
                except lighter.ApiException as e:
                    if e.status != 429:
                        raise
                    await asyncio.sleep(0.2)
            raise AssertionError("overloaded throughout")

        tx_api = lighter.TransactionApi(api)
        try:
            # an ask at the gap price rests; carol takes 40 of its 100 lots
            await sdk(lambda: client.create_order(MARKET, ask_coi, 100, price, True, 0, 1))
            # a bid below rests, then is cancelled
            await sdk(
                lambda: client.create_order(MARKET, cancelled_coi, 30, price - 50, False, 0, 1)
            )
            await sdk(lambda: client.cancel_order(MARKET, cancelled_coi))
            await sdk(lambda: client.withdraw(asset_id=3, route_type=0, amount=10))
            carol.nonce = (
                await tx_api.next_nonce(account_index=carol.account, api_key_index=carol.api_key)
            ).nonce
            await send(
                carol.order(price, 40, is_ask=0, market=MARKET, tif=0, coi=exchange.next_coi())
            )
            transfer = Transfer(
                carol.account, carol.api_key, ACCOUNT, 3, 0, 0, 2_000_000, 0, bytes(32), bytes(65),
                FAR_MS, carol.nonce, bytes(80),
            )  # fmt: skip
            carol.nonce += 1
            await send(sign_tx(transfer, carol.seed))
            token, err = client.create_auth_token_with_expiry(3600, api_key_index=KEY)
            assert err is None, err
            return str(token)
        finally:
            await client.close()
            await api.close()

    token = asyncio.run(asyncio.wait_for(body(), 30))
    yield Setup(priv, token, ask_coi, cancelled_coi)

    async def cleanup() -> None:  # the shared book goes back to what the other tests expect
        client = lighter.SignerClient(
            url=exchange.base_url,
            account_index=ACCOUNT,
            api_private_keys={KEY: priv},
            chain_id=304,
        )
        try:
            for _ in range(RETRIES):
                try:
                    _ok(await client.cancel_order(MARKET, ask_coi))
                    return
                except lighter.ApiException as e:
                    if e.status != 429:
                        raise
                    client.nonce_manager.acknowledge_failure(KEY)
                    await asyncio.sleep(0.2)
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(cleanup(), 30))


def test_the_sdks_account_order_and_transaction_apis_read_the_accounts_history(
    exchange: Exchange, acct: Setup
) -> None:
    tok = acct.token

    async def body() -> None:
        api = lighter.ApiClient(configuration=lighter.Configuration(host=exchange.base_url))
        order, account, tx = (
            lighter.OrderApi(api),
            lighter.AccountApi(api),
            lighter.TransactionApi(api),
        )
        try:
            active = await order.account_active_orders(
                authorization=tok, account_index=ACCOUNT, market_id=MARKET
            )
            [o] = active.orders
            assert (o.client_order_index, o.status, o.is_ask) == (acct.ask_coi, "open", True)
            assert (o.remaining_base_amount, o.filled_base_amount) == ("0.0060", "0.0040")

            done = await order.account_inactive_orders(
                authorization=tok, account_index=ACCOUNT, limit=10
            )
            assert [(d.client_order_index, d.status) for d in done.orders] == [
                (acct.cancelled_coi, "canceled")
            ]
            fills = await order.trades(
                sort_by="timestamp", limit=10, authorization=tok, account_index=ACCOUNT
            )
            [f] = fills.trades
            assert (f.size, f.ask_account_id, f.market_id) == ("0.0040", ACCOUNT, MARKET)

            deps = await tx.deposit_history(authorization=tok, account_index=ACCOUNT, l1_address="")
            assert [d.amount for d in deps.deposits] == ["1000000.000000"]
            wds = await tx.withdraw_history(authorization=tok, account_index=ACCOUNT)
            assert [w.amount for w in wds.withdraws] == ["10.000000"]
            trs = await tx.transfer_history(account_index=ACCOUNT, authorization=tok)
            assert [(t.type, t.amount) for t in trs.transfers] == [("L2TransferInflow", "2.000000")]
            txs = await tx.account_txs(
                limit=20, by="account_index", value=str(ACCOUNT), authorization=tok
            )
            assert {t.type for t in txs.txs} >= {14, 15, 13}

            pnl = await account.pnl(by="index", value=str(ACCOUNT), resolution="1h",
                                    start_timestamp=0, end_timestamp=int(time.time()) + 3600,
                                    count_back=0, authorization=tok)  # fmt: skip
            assert sum(e.inflow for e in pnl.pnl) == 1_000_002
            assert sum(e.outflow for e in pnl.pnl) == 10
            await account.position_funding(account_index=ACCOUNT, limit=10, authorization=tok)
            await account.liquidations(authorization=tok, account_index=ACCOUNT, limit=10)
            await account.account_limits(account_index=ACCOUNT, authorization=tok)
            meta = await account.account_metadata(by="index", value=str(ACCOUNT), authorization=tok)
            assert meta.account_metadatas[0].account_index == ACCOUNT

            # the raw answers validate strictly against the same models
            for call, model in (
                (order.account_active_orders_without_preload_content(
                    authorization=tok, account_index=ACCOUNT, market_id=MARKET), models.Orders),
                (order.trades_without_preload_content(
                    sort_by="timestamp", limit=10, authorization=tok, account_index=ACCOUNT),
                 models.Trades),
                (tx.transfer_history_without_preload_content(
                    account_index=ACCOUNT, authorization=tok), models.TransferHistory),
            ):  # fmt: skip
                resp = await call
                model.model_validate(await resp.json(), strict=True)
        finally:
            await api.close()

    asyncio.run(asyncio.wait_for(body(), 30))


def test_the_sdk_is_refused_with_a_token_of_another_account_or_none(
    exchange: Exchange, acct: Setup
) -> None:
    other = exchange.traders[2]

    async def body() -> None:
        api = lighter.ApiClient(configuration=lighter.Configuration(host=exchange.base_url))
        order = lighter.OrderApi(api)
        try:
            for tok, account, code in (
                (acct.token, other.account, ResultCode.AUTH_ACCOUNT_MISMATCH),
                ("", ACCOUNT, ResultCode.AUTH_REQUIRED),
                (acct.token[:-2] + "00", ACCOUNT, ResultCode.INVALID_SIGNATURE),
            ):
                with pytest.raises(lighter.ApiException) as e:
                    await order.account_active_orders(
                        authorization=tok, account_index=account, market_id=MARKET
                    )
                assert e.value.status in (401, 403)
                assert str(int(code)) in str(e.value.body)
        finally:
            await api.close()

    asyncio.run(asyncio.wait_for(body(), 30))


# ---- ccxt ---------------------------------------------------------------------------------------


def _ccxt(exchange: Exchange, token: str) -> Any:
    """ccxt's lighter on the replica, with ``token`` cached for (ACCOUNT, KEY) as ccxt caches
    the tokens it signs (see the module docstring)."""
    base = exchange.base_url
    ex = ccxt.lighter(
        {
            "urls": {"api": {"root": base, "public": base, "private": base}},
            "timeout": 10_000,
            "enableRateLimit": False,
            "options": {"accountIndex": ACCOUNT, "apiKeyIndex": KEY},
        }
    )
    ex.load_markets()
    deadline = int(time.time()) + 3000
    ex.options["auths"] = {
        str(ACCOUNT): {str(KEY): {"signer": object(), "deadline": deadline, "token": token}}
    }
    return ex


@pytest.fixture(scope="module")
def ccxt_private(exchange: Exchange, acct: Setup) -> Any:
    return _ccxt(exchange, acct.token)


def test_ccxt_fetches_balance_positions_and_open_and_closed_orders(
    ccxt_private: Any, acct: Setup
) -> None:
    ex = ccxt_private
    balance = ex.fetch_balance()
    assert balance["USDC"]["total"] is not None
    positions = ex.fetch_positions([BTC])
    assert [(p["symbol"], p["side"]) for p in positions if p["contracts"]] == [(BTC, "short")]
    [o] = ex.fetch_open_orders(BTC)
    assert (o["clientOrderId"], o["side"], o["status"]) == (str(acct.ask_coi), "sell", "open")
    assert (o["filled"], o["remaining"]) == (0.004, 0.006)
    closed = ex.fetch_closed_orders(BTC)
    assert [(c["clientOrderId"], c["status"]) for c in closed] == [
        (str(acct.cancelled_coi), "canceled")
    ]


def test_ccxt_fetches_my_trades_deposits_withdrawals_and_transfers(ccxt_private: Any) -> None:
    ex = ccxt_private
    [t] = ex.fetch_my_trades(BTC)
    assert (t["symbol"], t["amount"]) == (BTC, 0.004)
    deposits = ex.fetch_deposits(params={"address": "0x0"})
    assert [(d["amount"], d["type"]) for d in deposits] == [(1_000_000.0, "deposit")]
    withdrawals = ex.fetch_withdrawals()
    assert [(w["amount"], w["type"]) for w in withdrawals] == [(10.0, "withdrawal")]
    transfers = ex.fetch_transfers()
    assert [tr["amount"] for tr in transfers] == [2.0]


def test_ccxt_gets_the_auth_refusal_as_an_error(exchange: Exchange, acct: Setup) -> None:
    forged = acct.token[:-2] + ("00" if not acct.token.endswith("00") else "11")
    ex = _ccxt(exchange, forged)
    with pytest.raises(ccxt.BaseError) as e:
        ex.fetch_open_orders(BTC)
    assert str(int(ResultCode.INVALID_SIGNATURE)) in str(e.value)
