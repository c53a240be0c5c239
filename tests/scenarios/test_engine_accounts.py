"""Account scenarios: nonces, API keys, tx expiry, order expiry, margin, reduce-only, leverage,
transfers and withdrawals."""

from __future__ import annotations

from typing import Any

from kit.engine import IOC, KEY, NOW, SIG, Desk, Step, market, play, valid_key

from raydex.codecs import (
    ChangePubKey,
    CreateOrder,
    Deposit,
    OrderStatus,
    RegisterApiKey,
    ResultCode,
)
from raydex.engine import Engine

RC = ResultCode


def _order(account: int, nonce: int, expired_at: int = NOW + 1, key: int = 0) -> CreateOrder:
    return CreateOrder(account, key, 0, 0, 1, 9_900, 0, 0, 1, 0, 0, 0, expired_at, nonce, SIG)


def test_a_new_key_takes_nonce_zero_first_then_exactly_last_plus_one() -> None:
    d = Desk()
    assert d.eng.next_nonce(1, 0) == 0
    assert d.run(_order(1, 1)) == RC.INVALID_NONCE
    assert d.events == []
    assert d.run(_order(1, 0)) == RC.OK
    assert d.eng.next_nonce(1, 0) == 1
    assert d.run(_order(1, 0)) == RC.INVALID_NONCE
    assert d.run(_order(1, 1)) == RC.OK


def test_unknown_accounts_and_keys_are_rejected_without_side_effects() -> None:
    d = Desk()
    assert d.run(_order(99, 0)) == RC.ACCOUNT_NOT_FOUND
    assert d.run(_order(1, 0, key=5)) == RC.API_KEY_NOT_FOUND
    assert d.events == []
    assert d.eng.next_nonce(1, 5) is None


def test_keys_in_far_slots_sign_and_the_free_slots_between_do_not() -> None:
    # The gate reads an account's keys by position (Account.key_slots): a key in slot 200
    # leaves slots 1-199 empty, and indexes past the last slot are simply not found.
    d = Desk()
    assert d.change_key(1, 200, valid_key(9)) == RC.OK  # (its nonce 0)
    assert d.run(_order(1, 1, key=200)) == RC.OK
    assert d.run(_order(1, 0, key=199)) == RC.API_KEY_NOT_FOUND
    assert d.run(_order(1, 0, key=201)) == RC.API_KEY_NOT_FOUND
    assert d.run(_order(1, 0, key=2**40)) == RC.API_KEY_NOT_FOUND
    assert d.run(_order(1, 0)) == RC.OK  # slot 0 as before
    assert d.eng.next_nonce(1, 200) == 2


def test_keys_signing_in_turn_keep_their_own_nonces() -> None:
    # The gate keeps the last key's nonce on the account (Account.hot_nonce) and writes it
    # back to the key when another key signs: each key's nonces stay its own, in the queries,
    # in ChangePubKey and in the snapshot.
    d = Desk()
    assert d.change_key(1, 3, valid_key(7)) == RC.OK  # key 3's nonce 0
    assert d.run(_order(1, 0)) == RC.OK  # key 0 hot
    assert d.run(_order(1, 1, key=3)) == RC.OK  # key 3 hot, key 0's nonce written back
    assert d.run(_order(1, 1)) == RC.OK
    assert d.run(_order(1, 1, key=3)) == RC.INVALID_NONCE  # (key 3's 1 was used)
    assert d.run(_order(1, 2, key=3)) == RC.OK
    assert d.run(_order(1, 2, key=3)) == RC.INVALID_NONCE
    assert (d.eng.next_nonce(1, 0), d.eng.next_nonce(1, 3)) == (2, 3)
    change = ChangePubKey(1, 3, valid_key(8), bytes(65), NOW + 1, 3, SIG)
    assert d.run(change) == RC.OK  # with the hot key's next nonce, 3
    assert d.run(_order(1, 4, key=3)) == RC.OK
    assert d.run(_order(1, 2)) == RC.OK  # key 0 again, from its written-back nonce
    assert d.run(_order(1, 0, key=-1)) == RC.API_KEY_NOT_FOUND
    restored = Engine.from_records(d.eng.records())
    assert restored.state_hash() == d.eng.state_hash()
    assert (restored.next_nonce(1, 0), restored.next_nonce(1, 3)) == (3, 5)


def test_an_expired_tx_changes_nothing_but_a_failing_valid_tx_consumes_its_nonce() -> None:
    d = Desk()
    assert d.run(_order(1, 0, expired_at=NOW - 1)) == RC.TX_EXPIRED
    assert d.eng.next_nonce(1, 0) == 0
    bad_price = CreateOrder(1, 0, 0, 0, 1, 20_000, 0, 0, 1, 0, 0, 0, NOW, 0, SIG)
    assert d.run(bad_price) == RC.FAT_FINGER_PRICE
    assert d.eng.next_nonce(1, 0) == 1
    assert [type(e).__name__ for e in d.events] == ["NonceUpdated"]


def test_change_pub_key_installs_a_key_in_a_new_slot_consuming_its_nonce() -> None:
    d = Desk()
    new = valid_key(7)
    assert d.change_key(1, 3, new) == RC.OK  # slot 3's first nonce, 0
    assert d.eng.pub_key(1, 3) == new
    assert d.eng.next_nonce(1, 3) == 1
    assert d.change_key(1, 4, b"\x00" * 40) == RC.INVALID_PUBLIC_KEY
    assert d.eng.pub_key(1, 4) is None
    assert d.eng.next_nonce(1, 0) == 0  # other slots untouched
    # replacing the key of a used slot takes that slot's next nonce
    assert d.change_key(1, 3, valid_key(8)) == RC.OK
    assert d.eng.pub_key(1, 3) == valid_key(8) and d.eng.next_nonce(1, 3) == 2


def test_operator_registration_creates_the_account_and_keeps_an_existing_nonce() -> None:
    d = Desk()
    assert d.run(RegisterApiKey(42, 0, KEY)) == RC.OK
    assert d.eng.account_collateral(42) == 0
    assert d.buy(1, 1, 9_000) == RC.OK
    assert d.run(RegisterApiKey(1, 0, valid_key(9))) == RC.OK
    assert d.eng.next_nonce(1, 0) == 1
    assert d.run(RegisterApiKey(1, 255, KEY)) == RC.INVALID_API_KEY_INDEX
    assert d.run(Deposit(1, 0)) == RC.INVALID_AMOUNT


def test_a_resting_order_expires_when_a_later_command_touches_its_market() -> None:
    d = Desk()
    assert d.buy(1, 2, 9_900, expiry=NOW + 1_000) == RC.OK
    assert d.buy(1, 2, 9_800, expiry=NOW - 1) == RC.INVALID_EXPIRY
    d.now = NOW + 1_000
    assert d.buy(2, 1, 9_000) == RC.OK
    assert d.bids() == [(9_900, 2), (9_000, 1)]
    d.now = NOW + 1_001
    assert d.sell(3, 1, 9_000) == RC.OK
    expired = [e for e in d.of("OrderUpdated") if e.status == OrderStatus.CANCELED_EXPIRED]
    assert len(expired) == 1 and d.bids() == []
    assert d.size(1) == 0 and d.size(2) == 1


SMALL = 10_000_000  # $10: 10x leverage on 1 lot ($1) needs $0.10; 100 lots need $10.

MARGIN: dict[str, list[Step]] = {
    "an order that adds exposure needs initial margin including resting orders": [
        Step("buy", (1, 100, 10_000)),
        Step("buy", (1, 1, 10_000), code=RC.NOT_ENOUGH_MARGIN, bids=[(10_000, 100)]),
        Step("sell", (1, 100, 10_050), asks=[(10_050, 100)]),
        Step("sell", (1, 1, 10_050), code=RC.NOT_ENOUGH_MARGIN),
    ],
    "reduce-only is rejected on a flat position and clipped to the position": [
        Step("sell", (1, 1, 10_000), kw={"ro": 1}, code=RC.REDUCE_ONLY_INCREASES_POSITION),
        Step("sell", (2, 50, 10_000)),
        Step("buy", (1, 50, 10_000), sizes={1: 50, 2: -50}),
        Step("buy", (3, 80, 10_000)),
        Step("sell", (1, 80, 10_000), kw={"ro": 1, "tif": IOC}, sizes={1: 0}, bids=[(10_000, 30)]),
        Step("buy", (1, 1, 10_000), kw={"ro": 1}, code=RC.REDUCE_ONLY_INCREASES_POSITION),
    ],
    "withdraw and transfer must leave initial margin": [
        Step("buy", (1, 50, 10_000)),
        Step("withdraw", (1, 6_000_000), code=RC.NOT_ENOUGH_MARGIN),
        Step("withdraw", (1, 20_000_000), code=RC.INSUFFICIENT_BALANCE),
        Step("transfer", (1, 2, 5_000_000)),
        Step("transfer", (1, 2, 1), code=RC.NOT_ENOUGH_MARGIN),
        Step("transfer", (2, 2, 1), code=RC.SELF_TRANSFER),
        Step("transfer", (2, 77, 1), code=RC.ACCOUNT_NOT_FOUND),
        Step("withdraw", (2, 15_000_000)),
    ],
    "leverage can go down to the market minimum only while margin allows it": [
        Step("leverage", (1, 499), code=RC.INVALID_LEVERAGE),
        Step("leverage", (1, 500)),
        Step("buy", (1, 200, 10_000)),
        Step("leverage", (1, 1_000), code=RC.NOT_ENOUGH_MARGIN),
        Step("leverage", (1, 1_000, 0, 1), code=RC.MARGIN_MODE_LOCKED),  # an order rests there
    ],
}


def test_margin_scenarios() -> None:
    for name, steps in MARGIN.items():
        try:
            play(Desk(collateral=SMALL), steps)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from e


def test_transfers_move_collateral_between_accounts() -> None:
    d = Desk(collateral=SMALL)
    assert d.transfer(1, 2, 3_000_000) == RC.OK
    assert (d.cash(1), d.cash(2)) == (SMALL - 3_000_000, SMALL + 3_000_000)
    assert d.withdraw(2, SMALL) == RC.OK
    assert d.cash(2) == 3_000_000
    assert d.eng.total_withdrawals == SMALL


def test_inactive_markets_take_no_orders_but_allow_cancels() -> None:
    from raydex.codecs import UpdateMarket

    d = Desk()
    assert d.buy(1, 1, 9_900) == RC.OK
    m = market()
    upd = UpdateMarket(0, *m[4:14], 0)
    assert d.run(upd) == RC.OK
    assert d.buy(1, 1, 9_900) == RC.MARKET_NOT_ACTIVE
    assert d.cancel_all(1) == RC.OK
    assert d.bids() == []


def test_available_margin_is_equity_minus_initial_margin_including_resting_orders() -> None:
    d = Desk(collateral=SMALL)
    assert d.eng.available_margin(1) == SMALL
    assert d.deposit(2, 10**12) == RC.OK
    assert d.buy(1, 30, 10_000) == RC.OK  # $30 of bids at 10x: $3 of initial margin
    assert d.eng.available_margin(1) == SMALL - 3_000_000
    assert d.sell(2, 30, 10_000) == RC.OK
    assert d.mark(9_900) == RC.OK  # the long lost $0.30; its margin is now $2.97
    assert d.eng.available_margin(1) == SMALL - 300_000 - 2_970_000
    assert d.eng.available_margin(99) == 0


def test_money_that_would_overflow_its_i64_field_is_refused_and_changes_nothing() -> None:
    """Collateral and the exchange's total deposits travel as i64 in their events: a deposit or
    transfer that would take either past 2**63 - 1 is INVALID_AMOUNT and leaves the state as it
    was (a transfer's nonce is consumed, as for any tx refused after its gates)."""
    from raydex.codecs import L1Deposit

    top = 2**63 - 1
    d = Desk(collateral=SMALL)
    before = d.eng.state_hash()
    assert d.deposit(1, top - SMALL + 1) == RC.INVALID_AMOUNT
    assert d.run(Deposit(77, top)) == RC.INVALID_AMOUNT  # the exchange's total would overflow
    assert d.run(L1Deposit(b"\x01" * 20, top)) == RC.INVALID_AMOUNT
    assert d.events == [] and d.eng.state_hash() == before
    assert d.deposit(2, top - 3 * SMALL) == RC.OK  # up to the limit is fine
    assert d.cash(2) == top - 2 * SMALL
    # 2's collateral would pass 2**63 - 1 (checked before 1's balance, which cannot cover it)
    assert d.transfer(1, 2, 2 * SMALL + 1) == RC.INVALID_AMOUNT
    assert (d.cash(1), d.cash(2)) == (SMALL, top - 2 * SMALL)
    assert d.transfer(1, 2, SMALL) == RC.OK
    assert (d.cash(1), d.cash(2)) == (0, top - SMALL)


def _chain_markets(acct: Any) -> list[int]:
    """The markets of an account's position chain (``Account.first_pos``), in order."""
    out = []
    p = acct.first_pos
    while p is not None:
        out.append(p.market.index)
        p = p.next_pos
    return out


def test_a_refused_leverage_change_in_a_new_market_leaves_no_position_behind() -> None:
    # Account 1 at exactly initial margin in market 0 ($10 for 100 lots); the mark falls to
    # 9_900, so its equity ($9) is under initial margin but above maintenance. Raising its
    # margin fraction in market 1, where it has no position yet, is refused, and the position
    # the engine made to try it is dropped again (the Desk validates after every command).
    d = Desk(accounts=(1, 2), collateral=SMALL, markets=(market(0), market(1)))
    assert d.sell(2, 100, 10_000) == ResultCode.OK and d.buy(1, 100, 10_000) == ResultCode.OK
    assert d.mark(9_900) == ResultCode.OK
    assert d.leverage(1, 2_000, m=1) == ResultCode.NOT_ENOUGH_MARGIN
    assert d.eng.position(1, 1) is None
    assert _chain_markets(d.eng.state.accounts[1]) == [0]
    assert d.buy(1, 1, 9_000, m=1) == ResultCode.NOT_ENOUGH_MARGIN  # and still short of margin
    assert d.deposit(1, SMALL) == ResultCode.OK
    assert d.buy(1, 1, 9_000, m=1) == ResultCode.OK  # rests: the position is made again
    assert _chain_markets(d.eng.state.accounts[1]) == [0, 1]


DENSE_ACCOUNTS = 2**20


def test_accounts_far_apart_in_index_trade_like_any_other() -> None:
    # The engine also finds accounts below DENSE_ACCOUNTS (2**20) by position in a list (the
    # order gate's fast path); the others (Lighter's masters go to 2**47 - 1, its sub-accounts
    # to 2**48 - 2) only through its map.
    high = (DENSE_ACCOUNTS - 1, DENSE_ACCOUNTS, 2**47 - 5)
    d = Desk(accounts=(1, *high))
    for ai in high:
        assert d.sell(ai, 1, 10_000) == ResultCode.OK
        assert d.buy(1, 1, 10_000) == ResultCode.OK
        assert d.eng.position(ai, 0).size == -1  # type: ignore[union-attr]
    assert d.eng.position(1, 0).size == 3  # type: ignore[union-attr]
    assert len(d.eng.state.account_slots) == DENSE_ACCOUNTS
    assert d.buy(DENSE_ACCOUNTS + 1, 1, 10_000) == ResultCode.ACCOUNT_NOT_FOUND
    assert d.buy(2, 1, 10_000) == ResultCode.ACCOUNT_NOT_FOUND  # a free slot below the highest
