"""Commitments chain every block and root the account state, whatever history led to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from raydex.actors.committer import Committer, GapError
from raydex.actors.local import eth_market
from raydex.actors.sequencer import BlockProducer
from raydex.codecs import CreateOrder, Deposit, RegisterApiKey, Verifier, generate_key, sign_tx
from raydex.engine import Engine

SEED, PUB = generate_key()
FAR = 4_000_000_000_000
ETH = eth_market()  # ETH-PERP: 2 price / 4 size decimals, mark 3000.00


def frames(tmp: Path, blocks: int) -> tuple[list[bytes], list[list[object]]]:
    p = BlockProducer(Engine(), None, Verifier())
    setup: list[object] = [ETH]
    for a in range(1, 5):
        setup += [RegisterApiKey(a, 0, PUB), Deposit(a, 10**12)]
    p.submit(setup, 1, operator=True)
    out = [p.close_block()]
    records = [list(p.engine.records())]
    for i in range(blocks):
        txs = [
            sign_tx(
                CreateOrder(
                    a, 0, 0, i + 1, 10 + a, 300_000, a % 2, 0, 1, 0, 0, -1, FAR, i, bytes(64)
                ),
                SEED,
            )
            for a in range(1, 5)
        ]
        p.submit(txs, 10 + i)
        out.append(p.close_block())
        records.append(list(p.engine.records()))
    return [b.frame for b in out if b is not None], records


def test_two_committers_fed_the_same_blocks_agree_and_duplicates_are_ignored(
    tmp_path: Path,
) -> None:
    fs, _ = frames(tmp_path, 5)
    a, b = Committer(), Committer()
    for f in fs:
        assert a.apply(f) is not None
        b.apply(f)
        assert b.apply(f) is None
    assert a.chain == b.chain and a.seq == len(fs)
    assert len({c.chain for c in a.commitments.values()}) == len(fs)


def test_a_gap_is_refused() -> None:
    fs, _ = frames(Path("."), 3)
    c = Committer()
    c.apply(fs[0])
    with pytest.raises(GapError):
        c.apply(fs[2])


def test_a_committer_booted_from_a_snapshot_has_the_same_account_root(tmp_path: Path) -> None:
    fs, records = frames(tmp_path, 6)
    full = Committer()
    for f in fs:
        full.apply(f)
    late = Committer.from_records(records[3], seq=4)
    for f in fs[4:]:
        late.apply(f)
    assert late.seq == full.seq
    assert late.tree.root == full.tree.root
