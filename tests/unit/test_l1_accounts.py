"""Accounts carry an L1 (Ethereum) address: ``L1Deposit`` finds or creates the account of an
address, every role holds the address (engine, snapshot, holder's deltas, replica caches, state
hash), and Lighter's ChangePubKey is authorised by that address's ``L1Sig``: a stranger's L1
signature is refused with 21831 by the replica's dry-run and by the sequencer alike."""

from __future__ import annotations

from pathlib import Path

from eth_account import Account as EthAccount
from eth_account.messages import encode_defunct

from raydex.actors.local import FAR_MS, Trader, new_exchange
from raydex.actors.replica.cache.dryrun import dry_run
from raydex.actors.replica.cache.state import ReplicaState
from raydex.codecs import (
    ChangePubKey,
    L1AddressRecord,
    L1Deposit,
    ResultCode,
    generate_key,
    read_snapshot_ipc,
    records_to_tables,
    sign_tx,
    tables_to_records,
    write_snapshot_ipc,
)
from raydex.codecs.signing import change_pub_key_message
from raydex.engine import Engine, state_digest

OWNER = EthAccount.from_key("0x" + "21" * 32)
STRANGER = EthAccount.from_key("0x" + "43" * 32)
L1 = bytes.fromhex(OWNER.address[2:])


def _change_pub_key(
    account: int, slot: int, nonce: int, l1_key: EthAccount
) -> tuple[ChangePubKey, bytes]:
    """A Lighter ChangePubKey of ``slot``: signed by the new key, L1Sig by ``l1_key``."""
    seed, pub = generate_key()
    text = change_pub_key_message(pub, nonce, account, slot)
    l1_sig = bytes(l1_key.sign_message(encode_defunct(text=text)).signature)
    tx = ChangePubKey(account, slot, pub, l1_sig, FAR_MS, nonce, bytes(80))
    return sign_tx(tx, seed), seed


def test_an_l1_deposit_creates_the_next_account_once_and_then_credits_it() -> None:
    eng = Engine()
    out: list[object] = []
    assert eng.execute(L1Deposit(L1, 5_000_000), 0, out) == ResultCode.OK
    first = eng.account_by_l1(L1)
    assert first == 1 and eng.l1_address(1) == L1 and eng.account_collateral(1) == 5_000_000
    assert eng.execute(L1Deposit(L1, 1_000_000), 0, out) == ResultCode.OK
    assert eng.account_by_l1(L1) == 1 and eng.account_collateral(1) == 6_000_000
    other = bytes.fromhex(STRANGER.address[2:])
    assert eng.execute(L1Deposit(other, 1), 0, out) == ResultCode.OK
    assert eng.account_by_l1(other) == 2
    assert eng.execute(L1Deposit(bytes(20), 1), 0, out) == ResultCode.INVALID_PARAM
    eng.validate_internal_state()
    records = list(eng.records())
    assert [r for r in records if type(r) is L1AddressRecord] == [
        L1AddressRecord(1, L1),
        L1AddressRecord(2, other),
    ]
    restored = Engine.from_records(records)
    assert restored.state_hash() == eng.state_hash() and restored.account_by_l1(other) == 2


def test_change_pub_key_needs_the_accounts_l1_signature_in_dry_run_and_sequencer() -> None:
    funder = Trader(7)
    ex = new_exchange([funder])
    ex.run([L1Deposit(L1, 10**9)], operator=True)
    ai = ex.producer.engine.account_by_l1(L1)
    assert ai is not None
    st = ReplicaState.from_records(ex.producer.engine.records(), ex.producer.seq, 0)
    ex.attach(st)
    assert st.l1_addresses[ai] == L1 and st.by_l1[L1] == ai

    forged, _ = _change_pub_key(ai, 2, 0, STRANGER)
    assert dry_run(st, forged, 0) == ResultCode.INVALID_L1_SIGNATURE
    block = ex.run([forged])  # straight to the sequencer: refused there too, nothing changes
    assert block.outcomes[0].code == ResultCode.INVALID_L1_SIGNATURE
    assert ex.producer.engine.pub_key(ai, 2) is None

    good, seed = _change_pub_key(ai, 2, 0, OWNER)
    assert dry_run(st, good, 0) == ResultCode.OK
    tampered = good._replace(l1_sig=forged.l1_sig)
    assert dry_run(st, tampered, 0) == ResultCode.INVALID_L1_SIGNATURE
    assert dry_run(st, good._replace(sig=bytes(80)), 0) == ResultCode.INVALID_SIGNATURE
    assert ex.run([good]).outcomes[0].code == ResultCode.OK
    assert ex.producer.engine.pub_key(ai, 2) == good.pub_key
    assert st.next_nonce(ai, 2) == 1
    # the new key trades; an account without an L1 address cannot take a ChangePubKey
    trader = Trader(ai, api_key=2)
    trader.seed, trader.pub, trader.nonce = seed, good.pub_key, 1
    assert dry_run(st, trader.order(300_000, 1, 1), 0) == ResultCode.OK
    plain, _ = _change_pub_key(funder.account, 3, 0, OWNER)
    assert dry_run(st, plain, 0) == ResultCode.INVALID_L1_SIGNATURE
    assert st.state_hash() == state_digest(ex.producer.engine.records())


def test_l1_addresses_go_through_arrow_snapshots_and_an_older_snapshot_reads_without_them(
    tmp_path: Path,
) -> None:
    eng = Engine()
    assert eng.execute(L1Deposit(L1, 5_000_000), 0, []) == ResultCode.OK
    write_snapshot_ipc(tmp_path / "s", 3, records_to_tables(eng.records()))
    seq, tables = read_snapshot_ipc(tmp_path / "s")
    back = Engine.from_records(tables_to_records(tables))
    assert seq == 3 and back.state_hash() == eng.state_hash() and back.account_by_l1(L1) == 1
    booted = ReplicaState.from_records(tables_to_records(tables), seq, 0)
    assert booted.by_l1 == {L1: 1} and booted.state_hash() == state_digest(eng.records())
    (tmp_path / "s" / "l1_addresses.arrow").unlink()  # a snapshot from before L1 addresses
    _, old = read_snapshot_ipc(tmp_path / "s")
    assert old["l1_addresses"].num_rows == 0
    assert Engine.from_records(tables_to_records(old)).account_by_l1(L1) is None
