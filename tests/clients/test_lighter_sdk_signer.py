"""The unmodified lighter-sdk ``SignerClient`` trades on raydex: its own Go signer, its own nonce
manager (``nextNonce`` from our replica), its own ``sendTx``.

The SDK's API key is registered by the operator (``RegisterApiKey``: raydex has no L1 deposit
flow yet) on a fresh account of the shared stack, then the SDK creates, modifies and cancels
orders, updates leverage, cancels all and withdraws, and reads the results with its own API
classes.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from raydex.codecs import Deposit, RegisterApiKey, ResultCode

if TYPE_CHECKING:
    from conftest import Exchange

lighter = pytest.importorskip("lighter", reason="pip install lighter-sdk")

ACCOUNT = 41
USDC = 10**12


def _register(exchange: Exchange, account: int = ACCOUNT) -> str:
    """A fresh SDK key registered at index 0 of ``account``, funded; its private key."""
    from lighter.signer_client import create_api_key

    priv, pub, err = create_api_key()
    assert err is None
    ops = [RegisterApiKey(account, 0, bytes.fromhex(pub[2:])), Deposit(account, USDC)]
    outcomes = exchange.run(exchange.seq.submit(ops, operator=True))
    assert {o.code for o in outcomes} == {ResultCode.OK}
    return str(priv)


def _ok(result: tuple[Any, Any, Any]) -> Any:
    _tx, resp, err = result
    assert err is None, err
    assert resp.code == 200, resp
    return resp


def test_the_sdks_own_signer_creates_modifies_and_cancels_orders(exchange: Exchange) -> None:
    priv = _register(exchange)

    async def body() -> None:
        client = lighter.SignerClient(
            url=exchange.base_url, account_index=ACCOUNT, api_private_keys={0: priv}, chain_id=304
        )
        api = lighter.ApiClient(configuration=lighter.Configuration(host=exchange.base_url))
        order_api = lighter.OrderApi(api)
        try:
            coi = exchange.next_coi()
            # an ask far above the market: it rests
            _ok(await client.create_order(0, coi, 300, 345_000, True, 0, 1))

            async def ours() -> list[Any]:
                book = await order_api.order_book_orders(market_id=0, limit=100)
                return [o for o in book.asks if o.owner_account_index == ACCOUNT]

            resting = await ours()
            assert [(o.price, o.initial_base_amount) for o in resting] == [("3450.00", "0.0300")]

            _ok(await client.modify_order(0, coi, 200, 346_000))
            assert [(o.price, o.remaining_base_amount) for o in await ours()] == [
                ("3460.00", "0.0200")
            ]

            _ok(await client.cancel_order(0, coi))
            assert await ours() == []

            _ok(await client.update_leverage(0, client.CROSS_MARGIN_MODE, 5))
            coi2 = exchange.next_coi()
            _ok(await client.create_order(0, coi2, 100, 347_000, True, 0, 1))
            assert len(await ours()) == 1
            _ok(await client.cancel_all_orders(client.CANCEL_ALL_TIF_IMMEDIATE, 0))
            assert await ours() == []

            _ok(await client.withdraw(asset_id=3, route_type=0, amount=10))
            acct = await lighter.AccountApi(api).account(by="index", value=str(ACCOUNT))
            assert acct.accounts[0].collateral == "999990.000000"
        finally:
            await client.close()
            await api.close()

    asyncio.run(body())


def test_a_tampered_sdk_signature_is_refused_with_21120(exchange: Exchange) -> None:
    import base64
    import json

    priv = _register(exchange, ACCOUNT + 1)

    async def body() -> None:
        client = lighter.SignerClient(
            url=exchange.base_url, account_index=ACCOUNT + 1, api_private_keys={0: priv},
            chain_id=304,
        )  # fmt: skip
        try:
            reply = await client.tx_api.next_nonce(account_index=ACCOUNT + 1, api_key_index=0)
            nonce = reply.nonce
            tx_type, tx_info, _, err = client.sign_create_order(
                0, exchange.next_coi(), 100, 348_000, 1, 0, 1, nonce=nonce, api_key_index=0
            )
            assert err is None
            info = json.loads(tx_info)
            sig = bytearray(base64.b64decode(info["Sig"]))
            sig[3] ^= 1
            info["Sig"] = base64.b64encode(bytes(sig)).decode()
            with pytest.raises(lighter.exceptions.BadRequestException, match="21120"):
                await client.send_tx(tx_type=tx_type, tx_info=json.dumps(info))
        finally:
            await client.close()

    asyncio.run(body())


def test_the_tx_hash_raydex_answers_is_the_one_the_sdk_computed(exchange: Exchange) -> None:
    priv = _register(exchange, ACCOUNT + 2)

    async def body() -> None:
        client = lighter.SignerClient(
            url=exchange.base_url, account_index=ACCOUNT + 2, api_private_keys={0: priv},
            chain_id=304,
        )  # fmt: skip
        try:
            reply = await client.tx_api.next_nonce(account_index=ACCOUNT + 2, api_key_index=0)
            tx_type, tx_info, sdk_hash, err = client.sign_create_order(
                0, exchange.next_coi(), 100, 349_000, 1, 0, 1, nonce=reply.nonce, api_key_index=0
            )
            assert err is None
            resp = await client.send_tx(tx_type=tx_type, tx_info=tx_info)
            assert resp.code == 200 and resp.tx_hash == sdk_hash and len(sdk_hash) == 80
            found = await client.tx_api.tx(by="hash", value=sdk_hash)
            assert (found.hash, found.type, found.account_index) == (sdk_hash, 14, ACCOUNT + 2)
        finally:
            await client.close()

    asyncio.run(body())
