"""A Lighter bot's first steps, unmodified: an account funded from an L1 address (``L1Deposit``,
what ``raydex deposit --l1-address`` sends through Ray), found with the SDK's ``AccountApi``
(``accountsByL1Address``, ``account?by=l1_address``), an API key registered with the SDK's own
``change_api_key`` signed by a made-up L1 (Ethereum) key, then that key trades, including with
Lighter's SkipNonce attribute (a ms time as the nonce, as ccxt sends)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from raydex.codecs import L1Deposit, ResultCode

if TYPE_CHECKING:
    from conftest import Exchange

lighter = pytest.importorskip("lighter", reason="pip install lighter-sdk")
eth_account = pytest.importorskip("eth_account")

USDC = 5_000 * 10**6
#: Made-up Ethereum keys: the account's L1 key, and a stranger's.
L1_KEY = "0x" + "5a" * 32
STRANGER_KEY = "0x" + "6b" * 32
KEY_INDEX = 2


def _ok(result: tuple[Any, Any, Any]) -> Any:
    _tx, resp, err = result
    assert err is None, err
    assert resp.code == 200, resp
    return resp


async def _get(base: str, path: str, **params: str) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"{base}/api/v1/{path}", params=params) as r,
    ):
        return r.status, json.loads(await r.text())


def test_an_l1_funded_account_gets_an_sdk_key_by_change_api_key_and_trades(
    exchange: Exchange,
) -> None:
    from lighter.models import DetailedAccounts, SubAccounts
    from lighter.signer_client import create_api_key

    l1 = eth_account.Account.from_key(L1_KEY).address
    outcomes = exchange.run(
        exchange.seq.submit([L1Deposit(bytes.fromhex(l1[2:]), USDC)], operator=True)
    )
    assert [o.code for o in outcomes] == [ResultCode.OK]
    priv, pub, err = create_api_key()
    assert err is None

    async def body() -> None:
        base = exchange.base_url
        api = lighter.ApiClient(configuration=lighter.Configuration(host=base))
        accounts = lighter.AccountApi(api)
        # the raw answers are Lighter's models, strictly
        status, raw = await _get(base, "accountsByL1Address", l1_address=l1.lower())
        assert status == 200
        subs = SubAccounts.model_validate(raw, strict=True)
        assert subs.l1_address == l1 and len(subs.sub_accounts) == 1
        index = subs.sub_accounts[0].index
        status, raw = await _get(base, "account", by="l1_address", value=l1)
        assert status == 200
        detailed = DetailedAccounts.model_validate(raw, strict=True)
        assert detailed.accounts[0].index == index and detailed.accounts[0].l1_address == l1
        assert detailed.accounts[0].collateral == "5000.000000"
        # ... and through the SDK's own API class
        via_sdk = await accounts.accounts_by_l1_address(l1_address=l1)
        assert via_sdk.sub_accounts[0].index == index
        status, raw = await _get(base, "accountsByL1Address", l1_address="0x" + "00" * 19 + "01")
        assert status == 404 and raw["code"] == ResultCode.ACCOUNT_NOT_FOUND
        status, raw = await _get(base, "accountsByL1Address", l1_address="0x12")
        assert status == 400 and raw["code"] == ResultCode.INVALID_PARAM

        client = lighter.SignerClient(
            url=base, account_index=index, api_private_keys={KEY_INDEX: priv}, chain_id=304
        )
        order_api = lighter.OrderApi(api)
        try:
            # a stranger's L1 signature: refused with 21831, nothing registered
            tx_type, tx_info, _, err = client.sign_change_api_key(
                STRANGER_KEY, pub, nonce=0, api_key_index=KEY_INDEX
            )
            assert err is None
            with pytest.raises(lighter.exceptions.BadRequestException, match="21831"):
                await client.send_tx(tx_type=tx_type, tx_info=tx_info)
            keys = await accounts.apikeys(account_index=index, api_key_index=255)
            assert keys.api_keys == []

            resp, err = await client.change_api_key(
                eth_private_key=L1_KEY, new_pubkey=pub, api_key_index=KEY_INDEX
            )
            assert err is None and resp.code == 200, (resp, err)
            keys = await accounts.apikeys(account_index=index, api_key_index=KEY_INDEX)
            assert [(k.api_key_index, k.public_key) for k in keys.api_keys] == [
                (KEY_INDEX, pub.removeprefix("0x"))
            ]

            # the new key trades
            coi = exchange.next_coi()
            _ok(await client.create_order(0, coi, 100, 351_000, True, 0, 1))
            book = await order_api.order_book_orders(market_id=0, limit=100)
            assert [o.price for o in book.asks if o.owner_account_index == index] == ["3510.00"]

            # SkipNonce: a ms time as the nonce, strictly above the last one
            t_ms = time.time_ns() // 1_000_000
            tx_type, tx_info, sdk_hash, err = client.sign_cancel_order(
                0, coi, skip_nonce=1, nonce=t_ms, api_key_index=KEY_INDEX
            )
            assert err is None and json.loads(tx_info)["L2TxAttributes"] == {"4": 1}
            resp = await client.send_tx(tx_type=tx_type, tx_info=tx_info)
            assert resp.code == 200 and resp.tx_hash == sdk_hash
            book = await order_api.order_book_orders(market_id=0, limit=100)
            assert [o for o in book.asks if o.owner_account_index == index] == []
            nxt = await client.tx_api.next_nonce(account_index=index, api_key_index=KEY_INDEX)
            assert nxt.nonce == t_ms + 1
        finally:
            await client.close()
            await api.close()

    asyncio.run(body())
