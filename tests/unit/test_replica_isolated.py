"""A replica's view of isolated margin is the engine's: an isolated position shows its mode, its
collateral and a liquidation price from that collateral alone (at that mark the engine keeps it,
one tick beyond it liquidates it), the cross figures leave it out, and the dry-run answers
UpdateLeverage and UpdateMargin with the engine's own codes. Real engine and BlockProducer
in-process; the replica's caches fed every block; answers validated by the SDK's models."""

from __future__ import annotations

import warnings
from typing import Any

from raydex.actors.local import FAR_MS, LocalExchange, Trader, new_exchange
from raydex.actors.replica import views
from raydex.actors.replica.cache import margin
from raydex.actors.replica.cache.dryrun import dry_run
from raydex.actors.replica.ws.account_channels import AccountChannel, parse, snapshot
from raydex.codecs import (
    PositionDeleveraged,
    PositionLiquidated,
    ResultCode,
    SetMarkPrice,
    UpdateLeverage,
    UpdateMargin,
    decode_block,
    sign_tx,
)

with warnings.catch_warnings():  # the SDK's own imports of deprecated websockets APIs
    warnings.simplefilter("ignore", DeprecationWarning)
    import lighter.models as models

USDC = 1_000_000
ETH = 10_000  # lots of the kit's market (2 price and 4 size decimals, mark 3000.00)


def _signed(t: Trader, tx: Any) -> Any:
    """``tx`` with the trader's next nonce, signed by its key."""
    tx = tx._replace(nonce=t.nonce)
    t.nonce += 1
    return sign_tx(tx, t.seed)


def leverage(t: Trader, market: int, imf: int, mode: int) -> UpdateLeverage:
    return _signed(t, UpdateLeverage(t.account, t.api_key, market, imf, mode, FAR_MS, 0, bytes(80)))


def update_margin(t: Trader, market: int, usdc: int, add: int) -> UpdateMargin:
    return _signed(t, UpdateMargin(t.account, t.api_key, market, usdc, add, FAR_MS, 0, bytes(80)))


def isolated_long() -> tuple[LocalExchange, Trader]:
    """A trader with 1,000 USDC: isolated long 1 ETH at 3000 on market 0 (10x: 300 USDC of
    collateral) and a cross short 1 ETH on market 1."""
    maker, lev = Trader(1), Trader(2)
    ex = new_exchange([maker], markets=2)
    ex.run(lev.setup(1_000 * USDC), operator=True)
    ex.run([leverage(lev, 0, 1_000, 1)])
    ex.run([maker.order(300_000, ETH, 1, market=0)])
    ex.run([lev.order(300_000, ETH, 0, market=0)])
    ex.run([maker.order(300_000, ETH, 0, market=1)])
    ex.run([lev.order(300_000, ETH, 1, market=1)])
    return ex, lev


def liquidated_at(ex: LocalExchange, account: int, market: int, mark: int) -> bool:
    block = ex.run([SetMarkPrice(market, mark)], operator=True)
    events = decode_block(block.frame).events
    closed = (PositionLiquidated, PositionDeleveraged)
    return any(type(e) in closed and e.account_index == account for e in events)


def test_an_isolated_position_is_shown_with_its_collateral_and_its_own_liquidation_price() -> None:
    ex, lev = isolated_long()
    st = ex.serve().state
    acct = st.accounts[lev.account]
    iso, cross = acct.positions[0], acct.positions[1]
    fee = 600_000  # the market's taker fee, 0.02% of 3000 USDC, on each trade
    assert (iso.margin_mode, iso.allocated_margin) == (1, 300 * USDC - fee)  # its own fee
    assert (cross.margin_mode, cross.allocated_margin) == (0, 0)
    assert acct.collateral == 700 * USDC - fee  # less what the isolated position took
    body = views.account(st, lev.account, acct)
    models.DetailedAccount.model_validate(body, strict=True)
    shown = {p["market_id"]: (p["margin_mode"], p["allocated_margin"]) for p in body["positions"]}
    assert shown == {0: (1, "299.400000"), 1: (0, "0.000000")}
    assert body["cross_asset_value"] == "699.400000"
    assert body["total_asset_value"] == "998.800000"
    assert body["available_balance"] == "549.400000"  # less the short's 150 of initial margin
    assert body["cross_initial_margin_requirement"] == "150.000000"
    assert body["cross_maintenance_margin_requirement"] == "36.000000"
    assert body["assets"][0]["balance"] == "998.800000"
    prices = margin.liquidation_prices(st.markets, acct.collateral, acct.positions)
    iso_liq = prices[0]
    # 299.4 + (P - 3000) = 1.2% of P (maintenance): P = 2700.6 / 0.988 = 2733.4008, up a tick
    assert iso_liq == 273_341
    assert not liquidated_at(ex, lev.account, 0, iso_liq)
    assert liquidated_at(ex, lev.account, 0, iso_liq - 1)
    after = ex.replicas[-1][0].accounts[lev.account]
    # no bid: deleveraged at its bankruptcy price, its collateral spent, the cross untouched
    assert (after.positions[0].size, after.positions[0].allocated_margin) == (0, 0)
    assert after.positions[1].size == -ETH
    assert after.collateral == 700 * USDC - fee


def test_the_cross_liquidation_price_leaves_the_isolated_position_out() -> None:
    ex, lev = isolated_long()
    st = ex.serve().state
    acct = st.accounts[lev.account]
    short_liq = margin.liquidation_prices(st.markets, acct.collateral, acct.positions)[1]
    assert not liquidated_at(ex, lev.account, 1, short_liq)
    assert liquidated_at(ex, lev.account, 1, short_liq + 1)
    pos = ex.producer.engine.position(lev.account, 0)
    assert pos is not None and (pos.size, pos.allocated_margin) == (ETH, 299_400_000)


def test_the_dry_run_answers_margin_modes_and_update_margin_as_the_engine_does() -> None:
    ex, lev = isolated_long()
    st = ex.serve().state
    cases = [
        leverage(lev, 0, 1_000, 0),  # open position: locked
        leverage(lev, 1, 1_000, 1),  # cross short open: locked
        leverage(lev, 0, 1, 1),  # under the market's minimum fraction
        update_margin(lev, 1, USDC, 1),  # a cross position
        update_margin(lev, 0, 2_000 * USDC, 1),  # more than the cross collateral
        update_margin(lev, 0, 300 * USDC, 0),  # more than it holds
        update_margin(lev, 0, 1 * USDC, 0),  # below its initial margin
        update_margin(lev, 0, 50 * USDC, 1),
        update_margin(lev, 0, 40 * USDC, 0),  # 309.4 left, 300 needed
    ]
    want = [
        ResultCode.MARGIN_MODE_LOCKED,
        ResultCode.MARGIN_MODE_LOCKED,
        ResultCode.INVALID_LEVERAGE,
        ResultCode.NO_ISOLATED_POSITION,
        ResultCode.INSUFFICIENT_BALANCE,
        ResultCode.INSUFFICIENT_BALANCE,
        ResultCode.NOT_ENOUGH_MARGIN,
        ResultCode.OK,
        ResultCode.OK,
    ]
    got = []
    for tx in cases:
        predicted = dry_run(st, tx, 0)
        outcome = ex.run([tx]).outcomes[0].code
        assert predicted == outcome, (tx, predicted, outcome)
        got.append(outcome)
    assert got == want
    assert st.accounts[lev.account].positions[0].allocated_margin == 309_400_000


def test_the_account_channels_show_the_isolated_position_and_the_split() -> None:
    ex, lev = isolated_long()
    st = ex.serve().state
    ai = lev.account
    positions = snapshot(st, _channel(f"account_all_positions/{ai}"), 0, {})
    assert positions is not None
    iso = positions["positions"]["0"]
    assert (iso["margin_mode"], iso["allocated_margin"]) == (1, "299.400000")
    models.AccountPosition.model_validate(iso, strict=True)
    stats = snapshot(st, _channel(f"user_stats/{ai}"), 0, {})
    assert stats is not None
    cross, total = stats["stats"]["cross_stats"], stats["stats"]["total_stats"]
    assert (cross["collateral"], total["collateral"]) == ("699.400000", "998.800000")
    assert (cross["portfolio_value"], total["portfolio_value"]) == ("699.400000", "998.800000")
    assert cross["available_balance"] == total["available_balance"] == "549.400000"
    assets = snapshot(st, _channel(f"account_all_assets/{ai}"), 0, {})
    assert assets is not None and assets["assets"]["3"]["balance"] == "998.800000"


def _channel(name: str) -> AccountChannel:
    ch = parse(name)
    assert ch is not None
    return ch
