"""The liquidation price a replica reports is where the engine liquidates: at that mark the
account survives, one tick further it is liquidated (cross margin, the other position held).
Real engine and BlockProducer in-process; the replica's caches fed every block."""

from __future__ import annotations

from raydex.actors.local import LocalExchange, Trader, new_exchange
from raydex.actors.replica import views
from raydex.actors.replica.cache import margin
from raydex.actors.replica.cache.margin import liquidation_price
from raydex.codecs import PositionDeleveraged, PositionLiquidated, SetMarkPrice, decode_block

USDC = 1_000_000
LOTS_PER_ETH = 10_000  # the kit's market: 2 price and 4 size decimals, mark 3000.00


def leveraged() -> tuple[LocalExchange, Trader]:
    """A trader with 400 USDC, long 1 ETH on market 0 and short 1 ETH on market 1 at 3000."""
    maker, lev = Trader(1), Trader(2)
    ex = new_exchange([maker], markets=2)
    ex.run(lev.setup(400 * USDC), operator=True)
    ex.run([maker.order(300_000, LOTS_PER_ETH, 1, market=0)])
    ex.run([lev.order(300_000, LOTS_PER_ETH, 0, market=0)])
    ex.run([maker.order(300_000, LOTS_PER_ETH, 0, market=1)])
    ex.run([lev.order(300_000, LOTS_PER_ETH, 1, market=1)])
    return ex, lev


def liquidated_at(ex: LocalExchange, account: int, market: int, mark: int) -> bool:
    block = ex.run([SetMarkPrice(market, mark)], operator=True)
    events = decode_block(block.frame).events
    closed = (PositionLiquidated, PositionDeleveraged)  # against the book, or the counterparty
    return any(type(e) in closed and e.account_index == account for e in events)


def test_at_the_reported_liquidation_price_the_engine_keeps_the_account_one_tick_beyond_not() -> (
    None
):
    ex, lev = leveraged()
    st = ex.serve().state
    acct = st.accounts[lev.account]
    assert (acct.positions[0].size, acct.positions[1].size) == (LOTS_PER_ETH, -LOTS_PER_ETH)
    prices = margin.liquidation_prices(st.markets, acct.collateral, acct.positions)
    long_liq, short_liq = prices[0], prices[1]
    assert 0 < long_liq < 300_000 < short_liq
    assert not liquidated_at(ex, lev.account, 0, long_liq)
    assert liquidated_at(ex, lev.account, 0, long_liq - 1)

    ex, lev = leveraged()  # the same history again, now moving the short's market
    assert not liquidated_at(ex, lev.account, 1, short_liq)
    assert liquidated_at(ex, lev.account, 1, short_liq + 1)


def test_the_account_view_reports_it_in_the_markets_decimals() -> None:
    ex, lev = leveraged()
    st = ex.serve().state
    acct = st.accounts[lev.account]
    body = views.account(st, lev.account, acct)
    prices = margin.liquidation_prices(st.markets, acct.collateral, acct.positions)
    shown = {p["market_id"]: p["liquidation_price"] for p in body["positions"]}
    assert shown == {mi: f"{prices[mi] // 100}.{prices[mi] % 100:02d}" for mi in (0, 1)}


def test_flat_and_unreachable_positions_have_no_liquidation_price() -> None:
    assert liquidation_price(0, 0, 1, 120, 10**9, 0) == 0  # flat
    # a long covered at any price: equity never reaches maintenance above 0
    assert liquidation_price(10_000, 3 * 10**9, 1, 120, 10**12, 0) == 0
    # a short needing a price beyond the u32 tick range
    assert liquidation_price(-1, -300_000, 1, 120, 10**12, 0) == 0
    # a long that is already under maintenance reports a price above the mark
    assert liquidation_price(10_000, 3 * 10**9, 1, 120, -(10**9), 0) > 300_000
