"""Isolated margin, sub-accounts and transfers through the unmodified lighter-sdk: its own
``update_leverage(..., ISOLATED_MARGIN_MODE, ...)``, ``update_margin`` (add and remove),
``create_sub_account``, ``change_api_key`` for the sub-account, ``transfer_same_master_account``
and ``transfer`` (with the L1 signature), read back with its own API classes and models
(strict): ``account``, ``accountsByL1Address``, ``transferFeeInfo``. An isolated position is
liquidated on a mark move (the operator's SetMarkPrice) against its own collateral while the
account's cross collateral stays whole.

The isolated tests trade in a market of their own (index 2, created here), so the shared books of
the other client tests are not moved."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from raydex.actors.local import eth_market
from raydex.codecs import (
    Deposit,
    L1Deposit,
    RegisterApiKey,
    ResultCode,
    SetMarkPrice,
)

if TYPE_CHECKING:
    from conftest import Exchange

lighter = pytest.importorskip("lighter", reason="pip install lighter-sdk")
eth_account = pytest.importorskip("eth_account")

MARKET = 2
ISOLATED, COUNTERPARTY = 81, 82
L1_KEY = "0x" + "7c" * 32
USDC = 10**6
MEMO = "raydex sub-account transfer 0001"  # 32 bytes, as the SDK's memo


def _ok(result: tuple[Any, Any, Any]) -> Any:
    _tx, resp, err = result
    assert err is None, err
    assert resp.code == 200, resp
    return resp


def _refused(result: tuple[Any, Any, Any], code: int) -> None:
    _tx, resp, err = result
    assert resp is None and err is not None and str(code) in err, (resp, err)


async def _eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll ``check`` until it holds (the replica applies a block after the sequencer made it
    durable); a deadline of 10 s, never a bare wait."""
    for _ in range(500):
        if await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never: {what}")


def _register(exchange: Exchange, account: int, usdc: int) -> str:
    from lighter.signer_client import create_api_key

    priv, pub, err = create_api_key()
    assert err is None
    ops = [RegisterApiKey(account, 0, bytes.fromhex(pub[2:])), Deposit(account, usdc * USDC)]
    assert {o.code for o in exchange.run(exchange.seq.submit(ops, operator=True))} == {200}
    return str(priv)


def _operator(exchange: Exchange, *ops: Any) -> list[Any]:
    outcomes = exchange.run(exchange.seq.submit(list(ops), operator=True))
    assert {o.code for o in outcomes} == {ResultCode.OK}, outcomes
    return outcomes


async def _raw(base: str, path: str, headers: dict[str, str] | None = None, **q: Any) -> Any:
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"{base}/api/v1/{path}", params=q, headers=headers or {}) as r,
    ):
        return r.status, json.loads(await r.text())


def test_an_isolated_position_through_the_sdk_and_its_liquidation_spares_the_cross_collateral(
    exchange: Exchange,
) -> None:
    from lighter.models import DetailedAccounts

    _operator(exchange, eth_market(MARKET)._replace(symbol="ISO"))
    priv = _register(exchange, ISOLATED, 1_000)
    maker_priv = _register(exchange, COUNTERPARTY, 1_000_000)

    async def body() -> None:
        base = exchange.base_url
        client = lighter.SignerClient(
            url=base, account_index=ISOLATED, api_private_keys={0: priv}, chain_id=304
        )
        maker = lighter.SignerClient(
            url=base, account_index=COUNTERPARTY, api_private_keys={0: maker_priv}, chain_id=304
        )
        api = lighter.ApiClient(configuration=lighter.Configuration(host=base))
        accounts = lighter.AccountApi(api)

        async def mine() -> Any:
            status, raw = await _raw(base, "account", by="index", value=ISOLATED)
            assert status == 200
            return DetailedAccounts.model_validate(raw, strict=True).accounts[0]

        def position(acct: Any) -> Any:
            return next(p for p in acct.positions if p.market_id == MARKET)

        try:
            _ok(await client.update_leverage(MARKET, client.ISOLATED_MARGIN_MODE, 10))
            await _eventually(
                lambda: _has(mine, lambda a: position(a).margin_mode == 1), "isolated mode"
            )
            # 1 ISO at 3000 from the maker: 300 USDC of initial margin moves into the position
            _ok(await maker.create_order(MARKET, exchange.next_coi(), 10_000, 300_000, True, 0, 1))
            _ok(
                await client.create_order(MARKET, exchange.next_coi(), 10_000, 300_000, False, 0, 1)
            )
            await _eventually(
                lambda: _has(mine, lambda a: position(a).position == "1.0000"), "fill"
            )
            acct = await mine()
            pos = position(acct)
            assert (pos.margin_mode, pos.allocated_margin) == (1, "299.400000")  # less its fee
            assert acct.collateral == "700.000000"
            assert acct.cross_asset_value == "700.000000"
            assert acct.total_asset_value == "999.400000"
            via_sdk = await accounts.account(by="index", value=str(ISOLATED))
            assert position(via_sdk.accounts[0]).allocated_margin == "299.400000"

            _refused(
                await client.update_leverage(MARKET, client.CROSS_MARGIN_MODE, 10),
                ResultCode.MARGIN_MODE_LOCKED,
            )
            _ok(await client.update_margin(MARKET, 50, client.ISOLATED_MARGIN_ADD_COLLATERAL))
            _ok(await client.update_margin(MARKET, 40, client.ISOLATED_MARGIN_REMOVE_COLLATERAL))
            _refused(
                await client.update_margin(MARKET, 100, client.ISOLATED_MARGIN_REMOVE_COLLATERAL),
                ResultCode.NOT_ENOUGH_MARGIN,  # below its 300 of initial margin
            )
            await _eventually(
                lambda: _has(mine, lambda a: position(a).allocated_margin == "309.400000"),
                "margin moved",
            )
            acct = await mine()
            assert acct.collateral == "690.000000"
            liq = Decimal(position(acct).liquidation_price)
            # its own collateral only: 309.40 + (P - 3000) = 1.2% of P, P = 2723.279.., a tick up
            assert liq == Decimal("2723.28")

            # a bid to close against, then the mark falls under the liquidation price
            _ok(await maker.create_order(MARKET, exchange.next_coi(), 10_000, 275_000, False, 0, 1))
            _operator(exchange, SetMarkPrice(MARKET, 272_000))
            await _eventually(lambda: _has(mine, lambda a: position(a).position == "0.0000"), "liq")
            acct = await mine()
            assert position(acct).allocated_margin == "0.000000"
            # sold at 2750: 309.40 - 250 - the 0.5% liquidation fee (13.75) = 45.65 back to cross
            assert acct.collateral == "735.650000"
            assert Decimal(acct.collateral) > Decimal("690")  # the cross collateral only gained
            token, err = client.create_auth_token_with_expiry(600, api_key_index=0)
            assert err is None
            status, raw = await _raw(
                base, "liquidations", {"authorization": token}, account_index=ISOLATED, limit=10
            )
            assert status == 200
            trades = [x["trade"] for x in raw["liquidations"] if x["market_id"] == MARKET]
            assert [(t["price"], t["size"]) for t in trades] == [("2750.00", "1.0000")]
        finally:
            await client.close()
            await maker.close()
            await api.close()

    asyncio.run(asyncio.wait_for(body(), 120))


async def _has(read: Callable[[], Awaitable[Any]], cond: Callable[[Any], bool]) -> bool:
    try:
        return cond(await read())
    except StopIteration:
        return False


def test_a_master_opens_a_sub_account_with_the_sdk_and_moves_usdc_to_it(
    exchange: Exchange,
) -> None:
    from lighter.models import SubAccounts, TransferFeeInfo
    from lighter.signer_client import create_api_key

    l1 = eth_account.Account.from_key(L1_KEY).address
    _operator(exchange, L1Deposit(bytes.fromhex(l1[2:]), 500 * USDC))
    master_priv, master_pub, err = create_api_key()
    sub_priv, sub_pub, err2 = create_api_key()
    assert err is None and err2 is None

    async def body() -> None:
        base = exchange.base_url
        api = lighter.ApiClient(configuration=lighter.Configuration(host=base))
        accounts = lighter.AccountApi(api)
        info = lighter.InfoApi(api)
        found = await accounts.accounts_by_l1_address(l1_address=l1)
        master = found.sub_accounts[0].index
        client = lighter.SignerClient(
            url=base, account_index=master, api_private_keys={1: master_priv}, chain_id=304
        )
        sub_client: Any = None
        try:
            resp, err = await client.change_api_key(
                eth_private_key=L1_KEY, new_pubkey=master_pub, api_key_index=1
            )
            assert err is None and resp.code == 200, (resp, err)
            _ok(await client.create_sub_account())

            async def both() -> bool:
                status, raw = await _raw(base, "accountsByL1Address", l1_address=l1)
                return status == 200 and len(raw["sub_accounts"]) == 2

            await _eventually(both, "the sub-account listed")
            _, raw = await _raw(base, "accountsByL1Address", l1_address=l1)
            listed = SubAccounts.model_validate(raw, strict=True).sub_accounts
            assert [(a.index == master, a.account_type) for a in listed] == [(True, 0), (False, 1)]
            sub = listed[1].index
            assert sub >= 2**47 and listed[1].l1_address == l1

            # the sub-account's key: the SDK's change_api_key, signed by the shared L1 key
            sub_client = lighter.SignerClient(
                url=base, account_index=sub, api_private_keys={0: sub_priv}, chain_id=304
            )
            resp, err = await sub_client.change_api_key(
                eth_private_key=L1_KEY, new_pubkey=sub_pub, api_key_index=0
            )
            assert err is None and resp.code == 200, (resp, err)

            _ok(await client.transfer_same_master_account(sub, 3, 0, 0, 120, 0, MEMO))
            _ok(await sub_client.transfer_same_master_account(master, 3, 0, 0, 20, 0, MEMO))

            async def balances() -> tuple[str, str]:
                got = await accounts.account(by="index", value=str(sub))
                m = await accounts.account(by="index", value=str(master))
                return m.accounts[0].collateral, got.accounts[0].collateral

            async def moved() -> bool:
                return await balances() == ("400.000000", "100.000000")

            await _eventually(moved, "the transfers applied")
            # to another master: the same-master form (no L1 signature) is refused ...
            _refused(
                await client.transfer_same_master_account(1, 3, 0, 0, 5, 0, MEMO),
                ResultCode.INVALID_L1_SIGNATURE,
            )
            # ... the SDK's transfer with the L1 key's signature goes through
            _ok(await client.transfer(L1_KEY, 1, 3, 0, 0, 5, 0, MEMO))
            # the spot route and other assets: refused by name
            _tx, resp, err = await client.transfer_same_master_account(sub, 3, 0, 1, 1, 0, MEMO)
            assert resp is None and "21840" in err and "spot" in err, err

            token, err = client.create_auth_token_with_expiry(600, api_key_index=1)
            assert err is None
            fee = await info.transfer_fee_info(
                authorization=token, account_index=master, to_account_index=sub
            )
            assert isinstance(fee, TransferFeeInfo) and fee.transfer_fee_usdc == 0
            status, raw = await _raw(
                base, "transferFeeInfo", {"authorization": token}, account_index=master
            )
            assert status == 200
            assert TransferFeeInfo.model_validate(raw, strict=True).transfer_fee_usdc == 0
        finally:
            await client.close()
            if sub_client is not None:
                await sub_client.close()
            await api.close()

    asyncio.run(asyncio.wait_for(body(), 120))
