"""The replica's caches follow the block stream exactly: duplicates are no-ops, gaps are refused,
a snapshot boot plus later blocks equals having seen every block, and dry-run predicts the
sequencer's codes from the caches alone."""

from __future__ import annotations

import gc
import random

import pytest

from raydex.actors.local import FAR_MS, LocalExchange, Trader, new_exchange
from raydex.actors.replica.cache.dryrun import dry_run
from raydex.actors.replica.cache.state import RECENT_TRADES, GapError, ReplicaState
from raydex.actors.snapshot.tape import TAPE_DEPTH, TradeTape
from raydex.codecs import CreateOrder, ResultCode, SetMarkPrice, decode_block, sign_tx
from raydex.observability.gcstats import UNTRACKING


def replica_from_start(ex: LocalExchange) -> ReplicaState:
    st = ReplicaState()
    for frame in ex.frames:
        st.apply_block(frame)
    return st


def replica_from_snapshot(ex: LocalExchange) -> ReplicaState:
    p = ex.producer
    return ReplicaState.from_records(p.engine.records(), p.seq, p.height)


def trade_a_while(ex: LocalExchange, traders: list[Trader], blocks: int, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(blocks):
        txs = []
        for t in rng.sample(traders, 2):
            price = 300_000 + rng.randrange(-20, 21) * 50
            txs.append(t.order(price, rng.randrange(1, 40) * 10, rng.randrange(2)))
        ex.run(txs)


def test_a_replica_that_saw_every_block_has_the_engines_books() -> None:
    traders = [Trader(i) for i in range(1, 5)]
    ex = new_exchange(traders)
    live = ReplicaState()
    ex.attach(live)
    live.apply_block(ex.frames[0])
    trade_a_while(ex, traders, 40, seed=1)
    live.validate()
    eng = ex.producer.engine
    assert list(live.books[0].bids) == eng.book_levels(0, 0, 1000)
    assert list(live.books[0].asks) == eng.book_levels(0, 1, 1000)
    for t in traders:
        assert live.accounts[t.account].collateral == eng.account_collateral(t.account)
        assert live.next_nonce(t.account, 0) == eng.next_nonce(t.account, 0)
        assert live.available_balance(t.account) == eng.available_margin(t.account)
    assert (live.seq, live.height) == (ex.producer.seq, ex.producer.height)


def test_a_snapshot_boot_plus_later_blocks_equals_a_replica_that_saw_every_block() -> None:
    traders = [Trader(i) for i in range(1, 5)]
    ex = new_exchange(traders)
    trade_a_while(ex, traders, 20, seed=2)
    late = replica_from_snapshot(ex)
    ex.attach(late)
    trade_a_while(ex, traders, 20, seed=3)
    ex.run([SetMarkPrice(0, 300_500)], operator=True)
    full = replica_from_start(ex)
    late.validate()
    full.validate()
    assert late.state_hash() == full.state_hash()
    assert late.books[0].bids == full.books[0].bids and late.books[0].asks == full.books[0].asks
    assert late.state_hash() == replica_from_snapshot(ex).state_hash()


def test_a_duplicate_block_is_a_no_op_and_a_gap_raises() -> None:
    traders = [Trader(1), Trader(2)]
    ex = new_exchange(traders)
    ex.run([traders[0].order(299_000, 10, 0)])
    ex.run([traders[1].order(301_000, 10, 1)])
    ex.run([traders[1].order(301_500, 10, 1)])
    st = ReplicaState()
    st.apply_block(ex.frames[0])
    st.apply_block(ex.frames[1])
    before = st.state_hash()
    again = st.apply_block(ex.frames[1])
    assert again.duplicate and not again.books and st.state_hash() == before
    with pytest.raises(GapError) as gap:
        st.apply_block(ex.frames[3])
    assert (gap.value.expected, gap.value.got) == (3, 4)
    assert st.state_hash() == before and st.seq == 2


def test_book_nonces_chain_from_one_changed_block_to_the_next() -> None:
    traders = [Trader(1), Trader(2)]
    ex = new_exchange(traders)
    st = replica_from_snapshot(ex)
    ex.attach(st)
    assert st.books[0].nonce == ex.producer.seq
    first = ex.run([traders[0].order(299_000, 10, 0)])
    assert st.books[0].nonce == first.seq
    ex.run([traders[0].cancel(1 << 60)])  # an unknown order: no level changes, the nonce stays
    assert st.books[0].nonce == first.seq
    third = ex.run([traders[1].order(301_000, 10, 1)])
    assert st.books[0].nonce == third.seq


def test_deltas_report_absolute_levels_with_begin_nonce_the_previous_nonce() -> None:
    traders = [Trader(1), Trader(2)]
    ex = new_exchange(traders)
    st = replica_from_snapshot(ex)
    snap_nonce = st.books[0].nonce
    ex.attach(st)
    ex.run([traders[0].order(299_000, 10, 0)])
    d1 = st.apply_block(ex.frames[-1])  # duplicate: delivered already by run()
    assert d1.duplicate
    ex.producer.submit([traders[0].order(299_000, 15, 0)], 1)
    blk = ex.producer.close_block()
    assert blk is not None
    applied = st.apply_block(blk.frame)
    d = applied.books[0]
    assert d.bids == ((299_000, 25),) and d.asks == ()
    assert d.begin_nonce == blk.seq - 1 and d.nonce == blk.seq
    assert snap_nonce == blk.seq - 2
    assert applied.accounts == {1}


def test_dry_run_predicts_the_gate_codes_from_the_caches() -> None:
    traders = [Trader(1), Trader(2)]
    ex = new_exchange(traders, usdc=1_000_000)  # 1 USDC each
    st = replica_from_snapshot(ex)
    a = traders[0]
    ok = a.order(300_000, 1, 0)
    assert dry_run(st, ok, 0) == ResultCode.OK
    stranger = Trader(99)
    assert dry_run(st, stranger.order(300_000, 1, 0), 0) == ResultCode.ACCOUNT_NOT_FOUND
    other_key = Trader(1, api_key=3)
    assert dry_run(st, other_key.order(300_000, 1, 0), 0) == ResultCode.API_KEY_NOT_FOUND
    assert dry_run(st, ok._replace(price=300_001), 0) == ResultCode.INVALID_SIGNATURE
    assert dry_run(st, sign_tx(ok._replace(nonce=5), a.seed), 0) == ResultCode.INVALID_NONCE
    assert dry_run(st, ok, FAR_MS + 1) == ResultCode.TX_EXPIRED
    assert dry_run(st, sign_tx(ok._replace(market_index=9), a.seed), 0) == (
        ResultCode.MARKET_NOT_FOUND
    )
    # the band bounds the aggressive side only: a sell far under the mark, not a bid there
    far = sign_tx(ok._replace(price=100_000, is_ask=1), a.seed)
    assert dry_run(st, far, 0) == ResultCode.FAT_FINGER_PRICE
    assert dry_run(st, sign_tx(ok._replace(price=100_000), a.seed), 0) == ResultCode.OK
    wide = sign_tx(ok._replace(price=2**32 - 1, order_type=1, time_in_force=0), a.seed)
    assert dry_run(st, wide, 0) == ResultCode.OK  # a market order's average limit: no band
    big = sign_tx(ok._replace(base_amount=1_000_000), a.seed)
    assert dry_run(st, big, 0) == ResultCode.NOT_ENOUGH_MARGIN
    assert ex.producer.engine.apply(big, 0).code == ResultCode.NOT_ENOUGH_MARGIN


def test_pending_nonces_advance_until_the_block_with_the_tx_arrives() -> None:
    traders = [Trader(1)]
    ex = new_exchange(traders)
    st = replica_from_snapshot(ex)
    a = traders[0]
    first, second = a.order(299_000, 10, 0), a.order(298_000, 10, 0)
    assert dry_run(st, first, 0) == ResultCode.OK
    st.note_sent(first)
    assert st.next_nonce(a.account, 0) == 1
    assert dry_run(st, second, 0) == ResultCode.OK
    assert dry_run(st, first, 0) == ResultCode.INVALID_NONCE
    st.note_sent(second)
    ex.attach(st)
    ex.run([first])
    assert st.pending_count() == 1 and st.next_nonce(a.account, 0) == 2
    st.forget_sent(second)
    assert st.pending_count() == 0 and st.next_nonce(a.account, 0) == 1


def test_validate_catches_a_book_that_disagrees_with_its_orders() -> None:
    traders = [Trader(1)]
    ex = new_exchange(traders)
    st = replica_from_snapshot(ex)
    ex.attach(st)
    ex.run([traders[0].order(299_000, 10, 0)])
    st.validate()
    st._bids[0][299_000] = 11
    with pytest.raises(AssertionError):
        st.validate()


def test_records_of_an_unknown_kind_are_refused() -> None:
    order = CreateOrder(1, 0, 0, 0, 1, 1, 0, 0, 1, 0, 0, -1, 0, 0, bytes(80))
    with pytest.raises(TypeError):
        ReplicaState.from_records([order], 0, 0)


def test_a_book_snapshot_is_handed_out_by_reference_until_a_block_changes_its_market() -> None:
    traders = [Trader(1), Trader(2)]
    ex = new_exchange(traders)
    st = replica_from_snapshot(ex)
    ex.attach(st)
    ex.run([traders[0].order(299_000, 10, 0)])
    first = st.books[0]
    assert st.books[0] is first  # no copy, no rebuild per read
    ex.run([traders[0].cancel(1 << 60)])  # no level changed
    assert st.books[0] is first
    ex.run([traders[1].order(301_000, 10, 1), traders[0].order(299_500, 5, 0)])
    now = st.books[0]
    assert now is not first and now.nonce == ex.producer.seq == now.seq
    assert list(now.bids) == ex.producer.engine.book_levels(0, 0, 100)
    assert list(now.asks) == ex.producer.engine.book_levels(0, 1, 100)
    assert first.bids == ((299_000, 10),)  # the old snapshot is immutable
    st.validate()


@pytest.mark.skipif(not UNTRACKING, reason="built without a C compiler")
def test_the_records_a_block_leaves_behind_are_out_of_the_collectors_lists() -> None:
    traders = [Trader(i) for i in range(1, 5)]
    ex = new_exchange(traders)
    trade_a_while(ex, traders, 40, seed=2)
    st = replica_from_start(ex)
    trades = [row for tape in st.trades.values() for row in tape]
    kept = [*st.txs.values(), *trades]
    assert st.txs and trades
    assert not any(gc.is_tracked(r) for r in kept)  # tx results, the trade tape and its fills
    logs = [st.ledger.log(t.account) for t in traders]
    done = [x for log in logs if log is not None for x in (*log.orders, *log.trades)]
    assert done and not any(gc.is_tracked(x) for x in done)
    st.validate()  # and they read the same: the caches still agree with each other


def test_a_replica_booted_with_the_holders_tape_serves_the_recent_trades_its_elders_do() -> None:
    """Issue 35: a replica booted later answered recentTrades with the trades since its boot only.
    The holder keeps the market tape as of each snapshot (``actors/snapshot/tape.py``); a replica
    that starts from the snapshot with it holds, block for block, the tape of one that saw every
    block, also once trades overflow its depth."""
    assert TAPE_DEPTH == RECENT_TRADES
    traders = [Trader(i) for i in range(1, 5)]
    ex = new_exchange(traders)
    trade_a_while(ex, traders, 150, seed=4)
    tape = TradeTape()
    for frame in ex.frames:
        blk = decode_block(frame)
        tape.add(blk.seq, blk.timestamp_ns // 1_000_000, blk.events)
    tape.mark(ex.producer.seq)
    late = replica_from_snapshot(ex)
    late.seed_trades(tape.at(late.seq) or ())
    ex.attach(late)
    trade_a_while(ex, traders, 10, seed=5)
    full = replica_from_start(ex)
    assert len(full.trades[0]) == RECENT_TRADES  # the depth overflowed
    assert list(late.trades[0]) == list(full.trades[0])
    assert not replica_from_snapshot(ex).trades[0]  # what a replica booted without the tape had
