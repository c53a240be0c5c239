"""Sub-accounts and transfers as Lighter's: CreateSubAccount (tx 9) opens an account at the next
index down from 2^48 - 2 for its master, with the master's L1 address; transfers between the
accounts of one master need no L1 signature, to another master's they do; USDC on the perps route
is executed, other assets and the spot route are refused by name (21840) with the nonce consumed
and nothing else changed. The Desk checks every invariant after every command."""

from __future__ import annotations

from typing import Any

from kit.engine import KEY, NOW, OK, SIG, Desk

from raydex.codecs import (
    MAX_ACCOUNT_INDEX,
    MAX_SUB_ACCOUNTS,
    CreateSubAccount,
    L1Deposit,
    RegisterApiKey,
    Transfer,
    Withdraw,
)
from raydex.codecs import ResultCode as RC
from raydex.engine import Engine

L1 = bytes.fromhex("11" * 20)
OTHER_L1 = bytes.fromhex("22" * 20)
DOLLAR = 1_000_000
FIRST_SUB = MAX_ACCOUNT_INDEX  # 2**48 - 2


def _l1_desk() -> Desk:
    """Accounts 1 and 2 made by L1 deposits (addresses L1 and OTHER_L1, $100 each), key 0 each;
    account 3 the operator's, without an L1 address."""
    d = Desk(accounts=())
    for addr in (L1, OTHER_L1):
        assert d.run(L1Deposit(addr, 100 * DOLLAR)) == OK
    for a in (1, 2, 3):
        assert d.run(RegisterApiKey(a, 0, KEY)) == OK
    assert d.deposit(3, 100 * DOLLAR) == OK
    assert d.eng.account_by_l1(L1) == 1 and d.eng.account_by_l1(OTHER_L1) == 2
    return d


def _sub(d: Desk, master: int) -> int:
    code = d.run(CreateSubAccount(master, 0, NOW + 60_000, d.nonce(master), SIG))
    assert code == OK, code
    (ev,) = d.of("SubAccountCreated")
    return int(ev.account_index)


def _transfer(d: Desk, src: int, dst: int, amount: int, **kw: Any) -> int:
    fields: dict[str, Any] = {
        "asset_index": 3,
        "from_route_type": 0,
        "to_route_type": 0,
        "usdc_fee": 0,
        "memo": bytes(32),
        "l1_sig": bytes(65),
    }
    fields.update(kw)
    tx = Transfer(
        src, 0, dst, usdc_amount=amount, expired_at=NOW + 60_000, nonce=d.nonce(src), sig=SIG,
        **fields,
    )  # fmt: skip
    return d.run(tx)


def test_a_master_opens_sub_accounts_counting_down_with_its_l1_address() -> None:
    d = _l1_desk()
    first = _sub(d, 1)
    (ev,) = d.of("SubAccountCreated")
    assert (ev.account_index, ev.master_index, ev.l1_address) == (FIRST_SUB, 1, L1)
    assert [e.account_index for e in d.of("BalanceChanged")] == [FIRST_SUB]  # a new account
    second = _sub(d, 1)
    other = _sub(d, 2)
    assert (first, second, other) == (FIRST_SUB, FIRST_SUB - 1, FIRST_SUB - 2)
    eng = d.eng
    assert [eng.master_index(a) for a in (1, first, second, other)] == [1, 1, 1, 2]
    assert eng.l1_address(second) == L1 and eng.l1_address(other) == OTHER_L1
    assert eng.account_by_l1(L1) == 1  # the address still names its master
    assert eng.account_collateral(first) == 0 and eng.pub_key(first, 0) is None


def test_only_a_master_opens_one_and_no_more_than_the_limit() -> None:
    d = _l1_desk()
    sub = _sub(d, 1)
    assert d.run(RegisterApiKey(sub, 0, KEY)) == OK  # the operator may key an existing one
    assert d.run(CreateSubAccount(sub, 0, NOW + 60_000, d.nonce(sub), SIG)) == RC.INVALID_PARAM
    for _ in range(MAX_SUB_ACCOUNTS - 1):
        _sub(d, 1)
    code = d.run(CreateSubAccount(1, 0, NOW + 60_000, d.nonce(1), SIG))
    assert code == RC.TOO_MANY_SUB_ACCOUNTS
    assert d.eng.state.accounts[1].sub_accounts == MAX_SUB_ACCOUNTS


def test_the_operator_creates_masters_only() -> None:
    d = _l1_desk()
    sub = _sub(d, 1)
    assert d.deposit(sub, DOLLAR) == OK  # an existing sub-account may be funded
    assert d.deposit(2**47 + 1, DOLLAR) == RC.INVALID_PARAM  # but not made up
    assert d.run(RegisterApiKey(2**47 + 1, 0, KEY)) == RC.INVALID_PARAM
    assert d.deposit(2**47 - 1, DOLLAR) == OK  # the highest master index


def test_transfers_within_one_master_need_no_l1_signature_to_another_they_do() -> None:
    d = _l1_desk()
    sub = _sub(d, 1)
    assert d.run(RegisterApiKey(sub, 0, KEY)) == OK
    assert _transfer(d, 1, sub, 40 * DOLLAR) == OK
    assert _transfer(d, sub, 1, 10 * DOLLAR) == OK
    assert (d.cash(1), d.cash(sub)) == (70 * DOLLAR, 30 * DOLLAR)
    assert _transfer(d, 1, 2, DOLLAR) == RC.INVALID_L1_SIGNATURE  # another master
    assert _transfer(d, sub, 2, DOLLAR) == RC.INVALID_L1_SIGNATURE
    # signed (the signature itself is checked before execution: replica and sequencer)
    assert _transfer(d, 1, 2, DOLLAR, l1_sig=b"\x01" * 65) == OK
    # an operator-made account without an L1 address has only its API key to sign with
    assert _transfer(d, 3, 2, DOLLAR) == OK
    assert d.cash(2) == 102 * DOLLAR


def test_a_transfer_pays_its_fee_to_the_fee_pool() -> None:
    d = _l1_desk()
    sub = _sub(d, 1)
    assert _transfer(d, 1, sub, 10 * DOLLAR, usdc_fee=250_000) == OK
    assert (d.cash(1), d.cash(sub), d.eng.fee_pool) == (89_750_000, 10 * DOLLAR, 250_000)
    assert _transfer(d, 1, sub, 89_750_000, usdc_fee=1) == RC.INSUFFICIENT_BALANCE


def test_other_assets_and_the_spot_route_are_refused_by_name_with_the_nonce_consumed() -> None:
    d = _l1_desk()
    sub = _sub(d, 1)
    for kw in ({"asset_index": 1}, {"from_route_type": 1}, {"to_route_type": 1}):
        assert _transfer(d, 1, sub, DOLLAR, **kw) == RC.FEATURE_NOT_SUPPORTED
        assert [type(e).__name__ for e in d.events] == ["NonceUpdated"]
    for asset, route in ((5, 0), (3, 1)):
        tx = Withdraw(1, 0, asset, route, DOLLAR, NOW + 60_000, d.nonce(1), SIG)
        assert d.run(tx) == RC.FEATURE_NOT_SUPPORTED
    assert d.cash(1) == 100 * DOLLAR and d.cash(sub) == 0


def test_sub_accounts_survive_a_snapshot_round_trip_and_keep_counting_down() -> None:
    d = _l1_desk()
    subs = [_sub(d, 1), _sub(d, 2), _sub(d, 1)]
    again = Engine.from_records(d.eng.records())
    again.validate_internal_state()
    assert again.state_hash() == d.eng.state_hash()
    assert [again.master_index(s) for s in subs] == [1, 2, 1]
    assert again.state.accounts[1].sub_accounts == 2
    assert again.state.next_sub_index == d.eng.state.next_sub_index == FIRST_SUB - 3
    out: list[Any] = []
    code = again.execute(CreateSubAccount(1, 0, NOW + 60_000, d.nonce(1), SIG), NOW, out)
    assert code == OK and again.master_index(FIRST_SUB - 3) == 1
