"""The one state hash every role reports: ``state_digest(records)``.

The sequencer and the snapshot holder hold an :class:`Engine`; a replica holds caches built from
a snapshot and advanced by blocks. Both can list their state as snapshot records
(``Engine.records()``, ``ReplicaState.records()``), and this function hashes those records, so
equal state at equal seq gives an equal digest whichever role computed it, and ``raydex status``
can compare them.

What it covers is the state every role holds: the exchange's fee pool and insurance fund, every
market's parameters and stats, every account's collateral, master account and L1 address, every
position not at its defaults, every API key (public key and nonce), every resting order (with its
version), every live conditional order (``ConditionalOrderRecord``: a state without any hashes as it
did before they existed). Left out, because the block stream never carries them: order priority (the
order of a level is covered by the orders themselves), the engine's id counters and
deposit/withdrawal totals, the markets' funding clocks (``FundingRecord``: a replica keeps only what
its public endpoints show of them), and positions still at their defaults (size, entry, pnl and
funding 0, the market's default margin fraction: the engine creates them when an order is placed, a
replica only when one is reported).

``Engine.state_hash()`` remains the full-state integrity hash written into each snapshot's
``meta.json`` (it covers priority and counters too); this digest is what actors report.

Semantics: order-independent (records are keyed and sorted here), so callers may list them in any
order. Cost: O(state log state): one pass to key the records, one sort per kind, one sha256 over
one short line per record. Callers cache it per seq.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Iterable, Iterator
from typing import Any

from raydex.codecs import (
    AccountRecord,
    ApiKeyRecord,
    ConditionalOrderRecord,
    ExchangeRecord,
    FundingRecord,
    L1AddressRecord,
    MarketRecord,
    OrderRecord,
    PositionRecord,
)

__all__ = ["digest_steps", "state_digest"]


def state_digest(records: Iterable[Any]) -> bytes:
    """sha256 of the state in ``records`` every role holds (see the module docstring)."""
    steps = digest_steps(records)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            digest: bytes = done.value
            return digest


def digest_steps(records: Iterable[Any], chunk: int = 2048) -> Generator[None, None, bytes]:
    """:func:`state_digest` in steps: yields after every ``chunk`` records keyed and every
    ``chunk`` lines hashed, returns the digest. An event loop drives it a step per turn
    (``actors/runtime/checks.py``), so hashing a large state never holds the loop for more
    than one chunk. Same digest whatever the chunk."""
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    exchange = (0, 0)
    markets: dict[int, MarketRecord] = {}
    accounts: dict[int, tuple[int, int]] = {}
    positions: dict[tuple[int, int], PositionRecord] = {}
    keys: dict[tuple[int, int], ApiKeyRecord] = {}
    orders: dict[int, tuple[Any, ...]] = {}
    l1: dict[int, bytes] = {}
    conds: dict[int, ConditionalOrderRecord] = {}
    for n, r in enumerate(records, 1):
        if n % chunk == 0:
            yield
        t = type(r)
        if t is OrderRecord:
            orders[r.order_index] = (*r[:12], r.order_version)  # all but priority
        elif t is PositionRecord:
            positions[r.account_index, r.market_index] = r
        elif t is AccountRecord:
            accounts[r.account_index] = (r.collateral, r.master_index)
        elif t is ApiKeyRecord:
            keys[r.account_index, r.api_key_index] = r
        elif t is MarketRecord:
            markets[r.market_index] = r
        elif t is ExchangeRecord:
            exchange = (r.fee_pool, r.insurance_fund)
        elif t is L1AddressRecord:
            l1[r.account_index] = r.l1_address
        elif t is ConditionalOrderRecord:
            conds[r.order_index] = r
        elif t is FundingRecord:
            continue  # funding clocks: see the module docstring
        else:
            raise TypeError(f"not a snapshot record: {t.__name__}")
    # sha256 over the lines joined by "\n", fed a chunk of lines at a time
    h = hashlib.sha256()
    sep = b""
    buf: list[str] = []
    for line in _lines(exchange, markets, accounts, positions, keys, orders, l1, conds):
        buf.append(line)
        if len(buf) == chunk:
            h.update(sep + "\n".join(buf).encode())
            sep = b"\n"
            buf.clear()
            yield
    if buf:
        h.update(sep + "\n".join(buf).encode())
    return h.digest()


def _lines(
    exchange: tuple[int, int],
    markets: dict[int, MarketRecord],
    accounts: dict[int, tuple[int, int]],
    positions: dict[tuple[int, int], PositionRecord],
    keys: dict[tuple[int, int], ApiKeyRecord],
    orders: dict[int, tuple[Any, ...]],
    l1: dict[int, bytes],
    conds: dict[int, ConditionalOrderRecord],
) -> Iterator[str]:
    """One line per record, in the digest's canonical order."""
    yield f"exchange|{exchange[0]}|{exchange[1]}"
    for mi in sorted(markets):
        yield f"market|{tuple(markets[mi])}"
    for a in sorted(accounts):
        collateral, master = accounts[a]
        yield f"account|{a}|{collateral}|{master}"
    for a in sorted(l1):
        yield f"l1|{a}|{l1[a].hex()}"
    for k in sorted(positions):
        p = positions[k]
        m = markets.get(p.market_index)
        default_imf = m.default_initial_margin_fraction if m is not None else -1
        if (
            p.size == 0
            and p.entry_quote == 0
            and p.realized_pnl == 0
            and p.funding_paid == 0
            and p.margin_mode == 0
            and p.initial_margin_fraction == default_imf
        ):
            continue
        yield f"position|{tuple(p)}"
    for k in sorted(keys):
        yield f"key|{tuple(keys[k])}"
    for o in sorted(orders):
        yield f"order|{orders[o]}"
    for c in sorted(conds):
        yield f"cond|{tuple(conds[c])}"
