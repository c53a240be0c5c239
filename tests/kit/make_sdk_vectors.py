"""Known-answer vectors from lighter-sdk's own signer library (the bundled Go ``.so``).

``python tests/kit/make_sdk_vectors.py`` rewrites ``tests/unit/data/lighter_sdk_vectors.json``:
one fixed API key (private and public, as the SDK's ``GenerateAPIKey`` made it once and
``CreateClient`` accepts it), one made-up Ethereum key for the L1 signatures, and per case the
SDK's ``(tx_type, tx_info, tx_hash)`` for every tx type the SDK signs and raydex hashes, with
and without ``L2TxAttributes``, plus auth tokens. The SDK draws a random Schnorr nonce, so
re-running changes every ``Sig`` (and ``ExpiredAt``, which it stamps from the clock); the
hashes of the frozen tx_info stay what they are. ``--append NAME ...`` signs only the named
cases and adds them to the file, leaving the vectors already there as they were.

The SDK signs offline: ``SignerClient`` is built inside a running event loop (its nonce manager
wants one) and every call passes an explicit ``nonce`` and ``api_key_index``, so nothing is
fetched. :func:`sdk_cases` is also what ``tests/unit/test_signing_kat.py`` runs live (a few
cases) when the library loads on this machine.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

VECTORS = Path(__file__).resolve().parents[1] / "unit" / "data" / "lighter_sdk_vectors.json"
CHAIN_ID = 304
ACCOUNT = 100_000_000_007
API_KEY = 3
#: A made-up Ethereum key: only signs L1 texts in these vectors.
ETH_KEY = "0x" + "4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318"
#: One key pair made by the SDK's GenerateAPIKey, frozen here so the vectors stay reproducible.
API_PRIVATE = "0xc3f52fa3f39c651193f6d417e889ca2b1a42a8ba1078b32f82e6385ef2fccfdee333e7e2d26a5c36"
API_PUBLIC = "0xfeab24818ccdfbd3ebf7b65d6584fd73213d1f9e60bc648b8496e38868d163202022cebd81188b27"


def _order(sc: Any, **kw: int) -> Any:
    from lighter.signer_client import CreateOrderTxReq

    base = dict(
        MarketIndex=1,
        ClientOrderIndex=77,
        BaseAmount=1000,
        Price=350000,
        IsAsk=0,
        Type=0,
        TimeInForce=1,
        ReduceOnly=0,
        TriggerPrice=0,
        OrderExpiry=1900000000000,
    )
    base.update(kw)
    return CreateOrderTxReq(**base)


def _cases() -> list[tuple[str, Callable[[Any, int], Any]]]:
    """(name, call(signer_client, nonce)) for every case; each returns the SDK's 4-tuple."""
    k = {"api_key_index": API_KEY}
    return [
        ("change_pub_key", lambda c, n: c.sign_change_api_key(ETH_KEY, API_PUBLIC, nonce=n, **k)),
        (
            "change_pub_key_skip_nonce",
            lambda c, n: c.sign_change_api_key(ETH_KEY, API_PUBLIC, skip_nonce=1, nonce=n, **k),
        ),
        ("create_sub_account", lambda c, n: c.sign_create_sub_account(nonce=n, **k)),
        (
            "create_public_pool",
            lambda c, n: c.sign_create_public_pool(100_000, 1_000_000_000, 100, nonce=n, **k),
        ),
        (
            "update_public_pool",
            lambda c, n: c.sign_update_public_pool(281474976710001, 1, 50_000, 200, nonce=n, **k),
        ),
        (
            "transfer",
            lambda c, n: c.sign_transfer(
                ETH_KEY, 12, 3, 0, 0, 5_000_000_000_123, 1_000, "ab" * 32, nonce=n, **k
            ),
        ),
        (
            "transfer_same_master",
            lambda c, n: c.sign_transfer_same_master_account(
                ACCOUNT + 1, 3, 0, 1, 123_456_789, 0, "00" * 32, nonce=n, **k
            ),
        ),
        (
            "transfer_usdc_perps_no_fee",
            lambda c, n: c.sign_transfer(
                ETH_KEY, 12, 3, 0, 0, 250_000_000, 0, "00" * 32, nonce=n, **k
            ),
        ),
        ("withdraw", lambda c, n: c.sign_withdraw(3, 0, 9_876_543_210_123, nonce=n, **k)),
        (
            "create_order",
            lambda c, n: c.sign_create_order(
                0, 12, 1000, 4000, 1, 0, 1, False, 0, 1900000000000, nonce=n, **k
            ),
        ),
        (
            "create_order_market_reduce_only",
            lambda c, n: c.sign_create_order(
                2, 281474976710655, 281474976710655, 4294967295, 0, 1, 0, True, 0, 0, nonce=n, **k
            ),
        ),
        (
            "create_order_stop_loss",
            lambda c, n: c.sign_create_order(
                1, 5, 10, 5000, 1, 2, 0, True, 4900, 1900000000000, nonce=n, **k
            ),
        ),
        (
            "create_order_integrator_skip_nonce",
            lambda c, n: c.sign_create_order(
                0,
                13,
                1000,
                4000,
                1,
                0,
                1,
                False,
                0,
                1900000000000,
                integrator_account_index=9,
                integrator_taker_fee=100,
                integrator_maker_fee=50,
                skip_nonce=1,
                nonce=n,
                **k,
            ),
        ),
        (
            "create_order_self_trade",
            lambda c, n: c.sign_create_order(
                0,
                14,
                1000,
                4000,
                0,
                0,
                2,
                False,
                0,
                1900000000000,
                self_trade_behavior_mode=2,
                self_trade_equality_mode=1,
                nonce=n,
                **k,
            ),
        ),
        (
            "create_order_attributes_nil",
            lambda c, n: c.sign_create_order(
                0,
                15,
                1000,
                4000,
                0,
                0,
                1,
                False,
                0,
                1900000000000,
                integrator_account_index=0,
                self_trade_behavior_mode=0,
                nonce=n,
                **k,
            ),
        ),
        ("cancel_order", lambda c, n: c.sign_cancel_order(0, 281474976710656, nonce=n, **k)),
        (
            "cancel_order_skip_nonce",
            lambda c, n: c.sign_cancel_order(3, 12, skip_nonce=1, nonce=n, **k),
        ),
        ("cancel_all_orders", lambda c, n: c.sign_cancel_all_orders(0, 0, nonce=n, **k)),
        (
            "cancel_all_orders_scheduled",
            lambda c, n: c.sign_cancel_all_orders(1, 1900000000000, nonce=n, **k),
        ),
        (
            "cancel_all_orders_market",
            lambda c, n: c.sign_cancel_all_orders(0, 0, 4, nonce=n, **k),
        ),
        (
            "modify_order",
            lambda c, n: c.sign_modify_order(0, 12, 2000, 4100, 0, nonce=n, **k),
        ),
        (
            "modify_order_version",
            lambda c, n: c.sign_modify_order(0, 12, 2000, 4100, 0, order_version=3, nonce=n, **k),
        ),
        ("mint_shares", lambda c, n: c.sign_mint_shares(281474976710001, 5000, nonce=n, **k)),
        ("burn_shares", lambda c, n: c.sign_burn_shares(281474976710001, 5000, nonce=n, **k)),
        ("update_leverage", lambda c, n: c.sign_update_leverage(0, 2000, 0, nonce=n, **k)),
        (
            "update_leverage_isolated",
            lambda c, n: c.sign_update_leverage(7, 500, 1, skip_nonce=1, nonce=n, **k),
        ),
        (
            "create_grouped_orders",
            lambda c, n: c.sign_create_grouped_orders(
                1,
                [
                    _order(c, Type=0, TimeInForce=1),
                    _order(
                        c,
                        Type=2,
                        TimeInForce=0,
                        IsAsk=1,
                        ReduceOnly=1,
                        TriggerPrice=340000,
                        ClientOrderIndex=0,
                        BaseAmount=0,
                        Price=330000,
                    ),
                ],
                nonce=n,
                **k,
            ),
        ),
        (
            "create_grouped_orders_three",
            lambda c, n: c.sign_create_grouped_orders(
                3,
                [
                    _order(c, Type=0, TimeInForce=1),
                    _order(
                        c,
                        Type=2,
                        TimeInForce=0,
                        IsAsk=1,
                        ReduceOnly=1,
                        TriggerPrice=340000,
                        ClientOrderIndex=0,
                        BaseAmount=0,
                        Price=330000,
                    ),
                    _order(
                        c,
                        Type=4,
                        TimeInForce=0,
                        IsAsk=1,
                        ReduceOnly=1,
                        TriggerPrice=360000,
                        ClientOrderIndex=0,
                        BaseAmount=0,
                        Price=370000,
                    ),
                ],
                nonce=n,
                **k,
            ),
        ),
        ("update_margin", lambda c, n: c.sign_update_margin(1, 25_000_000, 1, nonce=n, **k)),
        (
            "update_margin_large",
            lambda c, n: c.sign_update_margin(1, 9_000_000_000_000, 0, nonce=n, **k),
        ),
        ("stake_assets", lambda c, n: c.sign_stake_assets(281474976710002, 100, nonce=n, **k)),
        ("unstake_assets", lambda c, n: c.sign_unstake_assets(281474976710002, 100, nonce=n, **k)),
        ("update_account_config", lambda c, n: c.sign_update_account_config(1, nonce=n, **k)),
        (
            "update_account_asset_config",
            lambda c, n: c.sign_update_account_asset_config(3, 1, nonce=n, **k),
        ),
        (
            "approve_integrator",
            lambda c, n: c.sign_approve_integrator(
                ETH_KEY, 9, 1000, 500, 800, 400, 1900000000000, nonce=n, **k
            ),
        ),
        (
            "create_order_expire_taker",
            lambda c, n: c.sign_create_order(
                0,
                16,
                1000,
                4000,
                1,
                0,
                1,
                False,
                0,
                1900000000000,
                self_trade_behavior_mode=1,
                nonce=n,
                **k,
            ),
        ),
        (
            "cancel_all_orders_market_skip_nonce",
            lambda c, n: c.sign_cancel_all_orders(0, 0, 0, skip_nonce=1, nonce=n, **k),
        ),
        (
            "modify_order_self_trade_version",
            lambda c, n: c.sign_modify_order(
                2,
                17,
                3000,
                4200,
                0,
                self_trade_behavior_mode=3,
                order_version=1_700_000_000_123,
                nonce=n,
                **k,
            ),
        ),
    ]


def sdk_cases(names: set[str] | None = None) -> dict[str, Any]:
    """Sign the cases (all, or those named) with the SDK; returns the vectors document."""
    return asyncio.run(_run(names))


async def _run(names: set[str] | None) -> dict[str, Any]:
    from lighter.signer_client import SignerClient

    client = SignerClient(
        url="http://127.0.0.1:9",
        account_index=ACCOUNT,
        api_private_keys={API_KEY: API_PRIVATE},
        chain_id=CHAIN_ID,
    )
    cases = []
    try:
        for i, (name, call) in enumerate(_cases()):
            if names is not None and name not in names:
                continue
            nonce = 1000 + i
            tx_type, tx_info, tx_hash, err = call(client, nonce)
            if err is not None:
                raise RuntimeError(f"SDK refused {name}: {err}")
            cases.append({"name": name, "tx_type": tx_type, "tx_info": tx_info, "tx_hash": tx_hash})
        tokens = []
        for deadline in (1700000600, 4102444800):
            auth, err = client.create_auth_token_with_expiry(
                deadline - 1000, timestamp=1000, api_key_index=API_KEY
            )
            if err is not None:
                raise RuntimeError(f"SDK refused auth token: {err}")
            tokens.append(auth)
    finally:
        await client.close()
    return {
        "source": "lighter-sdk bundled signer (lighter/signers/lighter-signer-linux-amd64.so)",
        "chain_id": CHAIN_ID,
        "account_index": ACCOUNT,
        "api_key_index": API_KEY,
        "api_private_key": API_PRIVATE,
        "api_public_key": API_PUBLIC,
        "eth_private_key": ETH_KEY,
        "eth_address": _eth_address(ETH_KEY),
        "cases": cases,
        "auth_tokens": tokens,
    }


def _eth_address(key: str) -> str:
    from eth_account import Account

    return str(Account.from_key(key).address)


def generated_keys(count: int) -> list[tuple[str, str]]:
    """``count`` fresh (private, public) pairs from the SDK's GenerateAPIKey."""
    from lighter.signer_client import create_api_key

    out = []
    for _ in range(count):
        priv, pub, err = create_api_key()
        if err is not None:
            raise RuntimeError(err)
        out.append((priv, pub))
    return out


def main() -> int:
    """Regenerate every vector, or with ``--append NAME ...`` sign only those cases and add them
    to the existing file (the other vectors, signed earlier, stay as they are)."""
    if sys.argv[1:2] == ["--append"]:
        names = set(sys.argv[2:])
        doc = json.loads(VECTORS.read_text())
        have = {c["name"] for c in doc["cases"]}
        doc["cases"] += [c for c in sdk_cases(names - have)["cases"]]
        VECTORS.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"appended {len(names - have)} tx vectors to {VECTORS}")
        return 0
    doc = sdk_cases()
    doc["generated_keys"] = [list(kp) for kp in generated_keys(4)]
    VECTORS.parent.mkdir(parents=True, exist_ok=True)
    VECTORS.write_text(json.dumps(doc, indent=1) + "\n")
    print(
        f"wrote {len(doc['cases'])} tx vectors, {len(doc['auth_tokens'])} auth tokens to {VECTORS}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
