"""A deterministic, realistic engine workload: the command stream behind ``raydex bench engine``.

What it generates (all from one seeded ``random.Random``; same seed and sizes -> the same commands):

- **Setup** (:meth:`Workload.setup`): ``CreateMarket`` x8 with realistic decimals (BTC pd=1 sd=5,
  ETH pd=2 sd=4, SOL pd=3 sd=3, DOGE pd=6 sd=0, ...), ``RegisterApiKey`` + ``Deposit`` for every
  account (10,000 by default), ``UpdateLeverage`` to the maximum for the levered accounts.
- **Stream** (:meth:`Workload.chunks`): ``commands`` commands in chunks of ``chunk_size``:
  market makers (a few hundred accounts, each on one market) keep three bid and three ask slots
  quoted around a moving mid with GoodTillTime (some PostOnly) limit orders, and re-quote by cancel
  or modify, mostly the stalest slot; takers cross with IOC limit and market orders (log-normal
  sizes, $15..$50k) and rest a few passive GTT orders they later cancel (singly or with
  ``CancelAllOrders``); transfers between accounts, deposits, occasional withdraws and leverage
  changes; ``SetMarkPrice`` following each market's random-walk mid, with a scheduled shock every
  ``shock_every`` commands; a few highly levered accounts (re)open near-maximum-leverage positions,
  so shocks and drift liquidate some of them; ``ApplyFunding`` on every market every
  ``funding_every`` commands;
- conditional orders, a ``conditional_share`` of the stream (drawn before the category, and not
  at all at share 0: the stream is then exactly the one before they existed): takers place
  stop-loss / take-profit orders (market and limit, sized or position-tied) 0.2-3% from the mid,
  grouped orders (OTOCO and OTO with a market or limit entry, OCO), small TWAPs, and cancel
  waiting ones by client order index; the oracle's moves and shocks fire some of them.

Invariants the generator keeps so transactions are valid (the engine decides the rest):

- nonces are tracked per (account, API key) and used exactly in order (first one ``first_nonce``),
- client order indexes are globally unique (so unique per account) and never reused; cancels and
  modifies name orders by client order index (< ``FIRST_ORDER_INDEX``),
- ``expired_at`` and GTT ``order_expiry`` are far in the future; ``now_ms`` advances by 1 ms every
  ``commands_per_ms`` commands (20,000 commands/s of simulated time by default),
- signatures are zero bytes: the engine never verifies them (every account's API key ``k`` is the
  key of ``bench_key_seed(k)``, so a stream can be signed for a sequencer and its audit).

The generator does not simulate matching, so a cancel or modify may name an order the engine has
already filled (the engine answers ``NOT_ACTIVE_LIMIT_ORDER``, as it would for a real market maker),
and margin checks may reject some orders. That mix is part of the workload.

Bare-book stream: every chunk also carries the order adds/cancels only (:data:`BareOp` tuples),
the floor that ``raydex bench engine`` runs through its bare book: a limit or market order is an
``add`` (market orders at their worst price), an IOC/market order is followed by a ``cancel`` of
its remainder, a modify is ``cancel`` + ``add``, a cancel-all is one ``cancel`` per order the
generator believes is resting. Order ids there are the client order indexes.

Mix at ``conditional_share`` 0 (200,000 commands, seed 1): CreateOrder 50%, CancelOrder 38%,
ModifyOrder 7.6%, Transfer 1.9%, Deposit 0.6%, SetMarkPrice 0.5% (~12 per market per simulated
second), CancelAllOrders 0.4%, Withdraw 0.3%, UpdateLeverage 0.2%, ApplyFunding; the default
share (2%) takes its commands proportionally from all of these.

Cost: tens of µs of CPU per generated command; memory is one chunk at a time (a few hundred bytes
per command), so a 1,000,000-command run never holds more than ``chunk_size`` commands.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from bisect import bisect
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

from raydex.codecs import (
    PERPS_ROUTE,
    USDC_ASSET_INDEX,
    ApplyFunding,
    CancelAllOrders,
    CancelOrder,
    CreateGroupedOrders,
    CreateMarket,
    CreateOrder,
    Deposit,
    ModifyOrder,
    OrderInfo,
    OrderType,
    RegisterApiKey,
    SetMarkPrice,
    TimeInForce,
    Transaction,
    Transfer,
    UpdateLeverage,
    Withdraw,
    grouped_slots,
    public_key_of,
)
from raydex.codecs import AccountIndex as _Acct
from raydex.codecs import ApiKeyIndex as _Key
from raydex.codecs import MarketIndex as _Mkt
from raydex.codecs import Nonce as _Nonce

__all__ = [
    "ADD",
    "CANCEL",
    "MARKETS",
    "START_MS",
    "BareOp",
    "Chunk",
    "MarketSpec",
    "Workload",
    "WorkloadConfig",
    "bench_key_seed",
]

#: 2026-01-01T00:00:00Z: the simulated clock starts here.
START_MS = 1_767_225_600_000
_DAY_MS = 86_400_000
USDC = 1_000_000
#: ``tuple.__new__`` builds a NamedTuple from a tuple in C, skipping its Python ``__new__`` (and
#: the NewType wrappers): the generator's hot lines use it.
_new = tuple.__new__
SIG = bytes(80)
#: A transfer's memo, and its L1 signature where none is needed (the workload's accounts are
#: the operator's, without an L1 address: their API keys authorise their transfers)
_MEMO = bytes(32)
_NO_L1_SIG = bytes(65)
#: Bare-book op kinds.
ADD = 0
CANCEL = 1


class BareOp(NamedTuple):
    """One bare-book operation: ``kind`` ADD (0) or CANCEL (1); for CANCEL only ``order_id``."""

    market: int
    kind: int
    order_id: int
    is_ask: int
    price: int
    size: int


class Chunk(NamedTuple):
    """A slice of the workload: ``commands[i]`` executes at ``now_ms[i]``; ``bare_ops`` are the
    order adds/cancels of those same commands, in the same order."""

    commands: list[Transaction]
    now_ms: list[int]
    bare_ops: list[BareOp]


@dataclass(frozen=True, slots=True)
class MarketSpec:
    """A market's static description; ``mid_usd`` is the starting mid, ``weight`` its share of
    taker flow, ``vol_bps`` the mid's standard deviation per oracle update (basis points)."""

    symbol: str
    price_decimals: int
    size_decimals: int
    mid_usd: float
    weight: float
    vol_bps: float
    default_imf: int
    min_imf: int
    maintenance: int
    closeout: int

    @property
    def mid_ticks(self) -> int:
        return round(self.mid_usd * 10.0**self.price_decimals)

    @property
    def lot_usd(self) -> float:
        """USD value of one lot at the starting mid."""
        return self.mid_usd / 10.0**self.size_decimals


MARKETS: tuple[MarketSpec, ...] = (
    MarketSpec("BTC", 1, 5, 97_000.0, 0.30, 2.0, 500, 200, 120, 80),
    MarketSpec("ETH", 2, 4, 3_400.0, 0.20, 2.5, 500, 200, 120, 80),
    MarketSpec("SOL", 3, 3, 190.0, 0.12, 3.5, 1_000, 500, 300, 200),
    MarketSpec("DOGE", 6, 0, 0.38, 0.08, 4.0, 1_000, 500, 300, 200),
    MarketSpec("XRP", 5, 1, 2.30, 0.08, 3.5, 1_000, 500, 300, 200),
    MarketSpec("LINK", 4, 2, 22.0, 0.07, 3.5, 1_000, 500, 300, 200),
    MarketSpec("AVAX", 4, 2, 38.0, 0.07, 4.0, 1_000, 500, 300, 200),
    MarketSpec("HYPE", 4, 2, 30.0, 0.08, 4.5, 1_000, 500, 300, 200),
)


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """Sizes and rates of a workload. Defaults are the benchmark's."""

    seed: int = 1
    commands: int = 1_000_000
    accounts: int = 10_000
    market_makers: int = 240
    levered: int = 48
    chunk_size: int = 65_536
    #: The nonce the engine expects first for a freshly registered API key.
    first_nonce: int = 0
    commands_per_ms: int = 20
    shock_every: int = 25_000
    shock_bps: float = 150.0
    funding_every: int = 50_000
    #: Stream index where every levered account opens its first position (books are full by then).
    levered_open_at: int = 4_000
    maker_fee_ppm: int = 20
    taker_fee_ppm: int = 200
    liquidation_fee_ppm: int = 10_000
    max_price_deviation_bps: int = 500
    min_quote_usd: int = 10
    #: Share of the stream that is conditional-order traffic (stop-loss / take-profit, grouped
    #: orders, TWAPs, their cancels); 0 reproduces the stream from before they existed.
    conditional_share: float = 0.02
    #: Where the simulated clock starts (ms since the epoch); expiries are 28-30 days after it. A
    #: stream fed to a running sequencer, which stamps its own wall clock, starts it now.
    start_ms: int = START_MS


# Category weights of a stream command (market makers dominate, as on a real venue). Oracle
# updates: 0.5% of 20,000 commands/s of simulated time = ~12 per second per market.
_MM, _IOC, _REST, _TCANCEL, _CALL, _XFER, _WDRAW, _ORACLE, _RELEV, _LEV, _DEP = range(11)
_WEIGHTS = (
    (_MM, 0.770),
    (_IOC, 0.110),
    (_REST, 0.040),
    (_TCANCEL, 0.040),
    (_CALL, 0.004),
    (_XFER, 0.020),
    (_WDRAW, 0.003),
    (_ORACLE, 0.005),
    (_RELEV, 0.002),
    (_LEV, 0.002),
    (_DEP, 0.004),
)
_TOTAL = sum(w for _, w in _WEIGHTS)
_CUM = [c / _TOTAL for c in itertools.accumulate(w for _, w in _WEIGHTS)]
_KINDS = [k for k, _ in _WEIGHTS]

_SLOTS_PER_SIDE = 3
_MM_HALF_SPREAD = 0.0003  # 3 bp from mid to the first level
_MM_LEVEL_STEP = 0.0003


def bench_key_seed(k: int) -> bytes:
    """The signing seed of API key index ``k``, the same for every account of the workload (a
    stream fed to a sequencer is signed with it: ``raydex bench sequencer``)."""
    return hashlib.sha256(b"raydex-bench/%d" % k).digest() + bytes(8)


def _bench_pub(k: int) -> bytes:
    """One valid public key per key index, shared by every account: the engine checks that a
    key is a curve point (~0.2 ms each, memoised per distinct key); the engine benchmark signs
    nothing (``bench_key_seed`` signs for a sequencer)."""
    pub = _BENCH_PUBS.get(k)
    if pub is None:
        pub = _BENCH_PUBS[k] = public_key_of(bench_key_seed(k))
    return pub


_BENCH_PUBS: dict[int, bytes] = {}
_MM_KEYS = (2, 3)
_TAKER_KEY = 2
_MAX_TAKER_RESTING = 4_000


class Workload:
    """Generates :meth:`setup` then :meth:`chunks`; holds only the generator's own bookkeeping
    (slots, resting taker orders, nonces, mids), never the commands it has handed out."""

    def __init__(self, config: WorkloadConfig | None = None) -> None:
        cfg = config or WorkloadConfig()
        if cfg.accounts < cfg.market_makers + cfg.levered + 10:
            raise ValueError("accounts must exceed market makers + levered accounts + 10")
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.mids = [float(m.mid_ticks) for m in MARKETS]
        self.ix = 0  # stream commands emitted so far
        self._coi = 0
        self._nonces: dict[int, int] = {}
        self._nonce0 = cfg.first_nonce - 1
        self._cpm = cfg.commands_per_ms
        first = 1
        self.mm_accounts = list(range(first, first + cfg.market_makers))
        first += cfg.market_makers
        self.levered_accounts = list(range(first, first + cfg.levered))
        first += cfg.levered
        self.taker_accounts = list(range(first, cfg.accounts + 1))
        self.mm_market = [i % len(MARKETS) for i in range(cfg.market_makers)]
        self.mm_cursor = [0] * cfg.market_makers
        # slot: None or (client order index, price, size); the first _SLOTS_PER_SIDE are bids.
        self.mm_slots: list[list[tuple[int, int, int] | None]] = [
            [None] * (2 * _SLOTS_PER_SIDE) for _ in range(cfg.market_makers)
        ]
        self.lev_market = [i % len(MARKETS) for i in range(cfg.levered)]
        self.lev_is_ask = [self.rng.random() < 0.5 for _ in range(cfg.levered)]
        # Passive taker orders the generator believes rest: coi -> (account, market), plus a
        # list for uniform random choice (swap-remove) and per-account sets for cancel-all.
        self._rest: dict[int, tuple[int, int]] = {}
        self._rest_list: list[int] = []
        self._rest_pos: dict[int, int] = {}
        self._rest_by_acct: dict[int, set[int]] = {}
        self._mw = [0.0]
        for m in MARKETS:
            self._mw.append(self._mw[-1] + m.weight)
        self._start_ms = cfg.start_ms
        self._expired_at = cfg.start_ms + 30 * _DAY_MS
        self._order_expiry = cfg.start_ms + 28 * _DAY_MS
        self._cmds: list[Transaction] = []
        self._times: list[int] = []
        self._ops: list[BareOp] = []
        self._pending: deque[Callable[[], None]] = deque()
        #: conditional orders placed: (account, market, client order index), oldest first
        self._conds: deque[tuple[int, int, int]] = deque()

    # ---- setup -----------------------------------------------------------------------------

    def setup(self) -> Chunk:
        """Markets, API keys, deposits and leverage: everything the stream relies on."""
        cfg = self.cfg
        cmds: list[Transaction] = []
        for i, m in enumerate(MARKETS):
            lot_usd = m.lot_usd
            cmds.append(
                CreateMarket(
                    market_index=_Mkt(i),
                    symbol=m.symbol,
                    price_decimals=m.price_decimals,
                    size_decimals=m.size_decimals,
                    min_base_amount=max(1, math.ceil(5.0 / lot_usd)),
                    min_quote_amount=cfg.min_quote_usd * USDC,
                    maker_fee=cfg.maker_fee_ppm,
                    taker_fee=cfg.taker_fee_ppm,
                    liquidation_fee=cfg.liquidation_fee_ppm,
                    default_initial_margin_fraction=m.default_imf,
                    min_initial_margin_fraction=m.min_imf,
                    maintenance_margin_fraction=m.maintenance,
                    closeout_margin_fraction=m.closeout,
                    max_price_deviation=cfg.max_price_deviation_bps,
                    mark_price=m.mid_ticks,
                    status=1,
                )
            )
        rng = self.rng
        for a in range(1, cfg.accounts + 1):
            keys = _MM_KEYS if a <= cfg.market_makers else (_TAKER_KEY,)
            for k in keys:
                cmds.append(RegisterApiKey(_Acct(a), _Key(k), _bench_pub(k)))
            if a <= cfg.market_makers:
                usd = rng.randint(2_000_000, 5_000_000)
            elif a < self.taker_accounts[0]:
                usd = 100  # levered: the stream tops them up by $1,000 before each open
            else:
                usd = int(math.exp(rng.gauss(math.log(20_000), 1.0)))
                usd = min(max(usd, 500), 2_000_000)
            cmds.append(Deposit(_Acct(a), usd * USDC))
        for i, a in enumerate(self.levered_accounts):
            lm = self.lev_market[i]
            cmds.append(
                UpdateLeverage(
                    _Acct(a),
                    _Key(_TAKER_KEY),
                    _Mkt(lm),
                    MARKETS[lm].min_imf,
                    0,
                    self._expired_at,
                    self._nonce(a, _TAKER_KEY),
                    SIG,
                )
            )
        return Chunk(cmds, [self._start_ms] * len(cmds), [])

    # ---- stream ----------------------------------------------------------------------------

    def chunks(self) -> Iterator[Chunk]:
        """The stream, ``cfg.commands`` commands in chunks of at most ``cfg.chunk_size``."""
        remaining = self.cfg.commands
        while remaining > 0:
            n = min(remaining, self.cfg.chunk_size)
            yield self._chunk(n)
            remaining -= n

    def _chunk(self, n: int) -> Chunk:
        self._cmds, self._times, self._ops = [], [], []
        cfg = self.cfg
        rng_random = self.rng.random
        cum, kinds, pending, cmds = _CUM, _KINDS, self._pending, self._cmds
        share = cfg.conditional_share
        # Every iteration emits at most one command, so a chunk holds exactly n.
        while len(cmds) < n:
            if pending:
                pending.popleft()()
                continue
            ix = self.ix
            if ix == cfg.levered_open_at:
                for i in range(len(self.levered_accounts)):
                    pending.append(partial(self._lever_deposit, i))
                    pending.append(partial(self._lever_order, i))
            elif cfg.shock_every and ix % cfg.shock_every == cfg.shock_every // 2:
                self._oracle(shock=True)
            elif cfg.funding_every and ix % cfg.funding_every == cfg.funding_every - 1:
                for m in range(len(MARKETS)):
                    pending.append(partial(self._funding, m))
            elif share and rng_random() < share:
                self._conditional()
            else:
                self._step(kinds[bisect(cum, rng_random())])
        return Chunk(cmds, self._times, self._ops)

    def _step(self, kind: int) -> None:
        if kind == _MM:
            self._mm()
        elif kind == _IOC:
            self._taker_cross()
        elif kind == _REST:
            if len(self._rest_list) < _MAX_TAKER_RESTING:
                self._taker_rest()
            else:
                self._taker_cancel()
        elif kind == _TCANCEL:
            if self._rest_list:
                self._taker_cancel()
            else:
                self._taker_rest()
        elif kind == _CALL:
            self._cancel_all()
        elif kind == _XFER:
            self._transfer()
        elif kind == _WDRAW:
            self._withdraw()
        elif kind == _ORACLE:
            self._oracle(shock=False)
        elif kind == _RELEV:
            i = self.rng.randrange(len(self.levered_accounts))
            self._lever_deposit(i)
            self._pending.append(partial(self._lever_order, i))
        elif kind == _LEV:
            self._leverage()
        else:
            a = self._taker()
            self._emit(Deposit(_Acct(a), self.rng.randint(1_000, 10_000) * USDC))

    # ---- helpers ---------------------------------------------------------------------------

    def _emit(self, cmd: Transaction) -> None:
        self._cmds.append(cmd)
        self._times.append(self._start_ms + self.ix // self._cpm)
        self.ix += 1

    def _nonce(self, account: int, key: int) -> _Nonce:
        k = account * 256 + key
        n = self._nonces.get(k, self._nonce0) + 1
        self._nonces[k] = n
        return n  # a NewType is an int at run time: skip the call

    def _next_coi(self) -> int:
        self._coi += 1
        return self._coi

    def _taker(self) -> int:
        t = self.taker_accounts
        return t[int(self.rng.random() * len(t))]

    def _market(self) -> int:
        return bisect(self._mw, self.rng.random() * self._mw[-1]) - 1

    def _lots(self, market: int, usd: float) -> int:
        spec = MARKETS[market]
        lot_usd = self.mids[market] / 10**spec.price_decimals / 10**spec.size_decimals
        return max(1, int(usd / lot_usd))

    def _order(
        self,
        account: int,
        key: int,
        market: int,
        coi: int,
        size: int,
        price: int,
        is_ask: int,
        order_type: int,
        tif: int,
    ) -> None:
        expiry = self._order_expiry if tif != TimeInForce.IMMEDIATE_OR_CANCEL else 0
        self._emit(
            _new(
                CreateOrder,
                (
                    account,
                    key,
                    market,
                    coi,
                    size,
                    price,
                    is_ask,
                    int(order_type),  # plain ints: the signing encoder refuses enums
                    int(tif),
                    0,
                    0,
                    expiry,
                    self._expired_at,
                    self._nonce(account, key),
                    SIG,
                    0,  # self-trade modes: Lighter's defaults (tuple.__new__ fills no defaults)
                    0,
                ),
            )
        )
        self._ops.append(_new(BareOp, (market, ADD, coi, is_ask, price, size)))
        if tif == TimeInForce.IMMEDIATE_OR_CANCEL:
            self._ops.append(_new(BareOp, (market, CANCEL, coi, 0, 0, 0)))

    def _cancel(self, account: int, key: int, market: int, coi: int) -> None:
        self._emit(
            _new(
                CancelOrder,
                (account, key, market, coi, self._expired_at, self._nonce(account, key), SIG),
            )
        )
        self._ops.append(_new(BareOp, (market, CANCEL, coi, 0, 0, 0)))

    # ---- market makers ---------------------------------------------------------------------

    def _mm_target(self, market: int, slot: int) -> int:
        level = slot % _SLOTS_PER_SIDE
        off = _MM_HALF_SPREAD + _MM_LEVEL_STEP * level + self.rng.random() * 0.0002
        sign = 1.0 if slot >= _SLOTS_PER_SIDE else -1.0
        return max(1, round(self.mids[market] * (1.0 + sign * off)))

    def _mm(self) -> None:
        rng = self.rng
        i = int(rng.random() * len(self.mm_accounts))
        account = self.mm_accounts[i]
        market = self.mm_market[i]
        slots = self.mm_slots[i]
        # Mostly the oldest quote (a cursor over the slots), sometimes a random one. A cancelled
        # slot stays under the cursor, so this maker's next step re-quotes it at the current mid.
        cursor = self.mm_cursor[i]
        j = int(rng.random() * len(slots)) if rng.random() < 0.3 else cursor
        key = _MM_KEYS[j & 1]
        slot = slots[j]
        is_ask = 1 if j >= _SLOTS_PER_SIDE else 0
        if slot is not None and rng.random() < 0.82:
            self._cancel(account, key, market, slot[0])
            slots[j] = None
            return
        if j == cursor:
            self.mm_cursor[i] = (cursor + 1) % len(slots)
        price = self._mm_target(market, j)
        size = self._lots(market, rng.uniform(1_000, 20_000))
        if slot is None:
            coi = self._next_coi()
            tif = TimeInForce.POST_ONLY if rng.random() < 0.15 else TimeInForce.GOOD_TILL_TIME
            self._order(account, key, market, coi, size, price, is_ask, OrderType.LIMIT, tif)
        else:
            coi = slot[0]
            self._emit(
                _new(
                    ModifyOrder,
                    (
                        account,
                        key,
                        market,
                        coi,
                        size,
                        price,
                        0,
                        self._expired_at,
                        self._nonce(account, key),
                        SIG,
                        0,  # self-trade modes and order version: none
                        0,
                        0,
                    ),
                )
            )
            self._ops.append(_new(BareOp, (market, CANCEL, coi, 0, 0, 0)))
            self._ops.append(_new(BareOp, (market, ADD, coi, is_ask, price, size)))
        slots[j] = (coi, price, size)

    # ---- takers ----------------------------------------------------------------------------

    def _taker_cross(self) -> None:
        rng = self.rng
        account = self._taker()
        market = self._market()
        usd = min(max(math.exp(rng.gauss(math.log(500.0), 1.2)), 15.0), 50_000.0)
        size = self._lots(market, usd)
        is_ask = 1 if rng.random() < 0.5 else 0
        sign = -1.0 if is_ask else 1.0
        if rng.random() < 0.55:
            slip = 0.0003 + rng.random() * 0.0025
            otype = OrderType.LIMIT
        else:
            slip = 0.01  # price protection: worst acceptable price for a market order
            otype = OrderType.MARKET
        price = max(1, round(self.mids[market] * (1.0 + sign * slip)))
        coi = self._next_coi()
        self._order(
            account,
            _TAKER_KEY,
            market,
            coi,
            size,
            price,
            is_ask,
            otype,
            TimeInForce.IMMEDIATE_OR_CANCEL,
        )

    def _taker_rest(self) -> None:
        rng = self.rng
        account = self._taker()
        market = self._market()
        size = self._lots(market, rng.uniform(50.0, 2_000.0))
        is_ask = 1 if rng.random() < 0.5 else 0
        sign = 1.0 if is_ask else -1.0
        price = max(1, round(self.mids[market] * (1.0 + sign * (0.001 + rng.random() * 0.009))))
        coi = self._next_coi()
        self._order(
            account,
            _TAKER_KEY,
            market,
            coi,
            size,
            price,
            is_ask,
            OrderType.LIMIT,
            TimeInForce.GOOD_TILL_TIME,
        )
        self._rest[coi] = (account, market)
        self._rest_pos[coi] = len(self._rest_list)
        self._rest_list.append(coi)
        self._rest_by_acct.setdefault(account, set()).add(coi)

    def _forget(self, coi: int) -> tuple[int, int]:
        account, market = self._rest.pop(coi)
        pos = self._rest_pos.pop(coi)
        last = self._rest_list.pop()
        if last != coi:
            self._rest_list[pos] = last
            self._rest_pos[last] = pos
        owned = self._rest_by_acct[account]
        owned.discard(coi)
        if not owned:
            del self._rest_by_acct[account]
        return account, market

    def _taker_cancel(self) -> None:
        coi = self._rest_list[int(self.rng.random() * len(self._rest_list))]
        account, market = self._forget(coi)
        self._cancel(account, _TAKER_KEY, market, coi)

    def _cancel_all(self) -> None:
        if not self._rest_list:
            return
        coi = self._rest_list[int(self.rng.random() * len(self._rest_list))]
        account = self._rest[coi][0]
        now = self._start_ms + self.ix // self.cfg.commands_per_ms
        self._emit(
            CancelAllOrders(
                _Acct(account),
                _Key(_TAKER_KEY),
                0,
                now,
                self._expired_at,
                self._nonce(account, _TAKER_KEY),
                SIG,
            )
        )
        for c in sorted(self._rest_by_acct[account]):
            _, market = self._forget(c)
            self._ops.append(BareOp(market, CANCEL, c, 0, 0, 0))

    # ---- conditional orders -------------------------------------------------------------------

    def _conditional(self) -> None:
        """One conditional-order command of a taker (see the module docstring)."""
        rng = self.rng
        r = rng.random()
        if r < 0.1 and self._conds:
            account, market, coi = self._conds.popleft()
            self._cancel(account, _TAKER_KEY, market, coi)
            return
        account = self._taker()
        market = self._market()
        mid = self.mids[market]
        is_ask = 1 if rng.random() < 0.5 else 0
        away = 0.002 + rng.random() * 0.028
        # a stop sells below the mid and buys above it; a take-profit the other way round
        stop = max(1, round(mid * (1.0 - away if is_ask else 1.0 + away)))
        profit = max(1, round(mid * (1.0 + away if is_ask else 1.0 - away)))
        worst = max(1, round(stop * (0.99 if is_ask else 1.01)))
        size = self._lots(market, rng.uniform(50.0, 2_000.0))
        coi = self._next_coi()
        self._conds.append((account, market, coi))
        if len(self._conds) > 4_000:
            self._conds.popleft()
        expiry = self._order_expiry
        if r < 0.45:  # a stop-loss (market) or take-profit (limit), sized or position-tied
            tied = rng.random() < 0.5
            if rng.random() < 0.5:
                otype, tif, price, trig = OrderType.STOP_LOSS, 0, worst, stop
            else:
                otype, tif, price, trig = OrderType.TAKE_PROFIT_LIMIT, 1, profit, profit
            self._emit(
                _new(
                    CreateOrder,
                    (
                        account, _TAKER_KEY, market, coi, 0 if tied else size, price, is_ask,
                        int(otype), tif, 1 if tied else 0, trig, expiry, self._expired_at,
                        self._nonce(account, _TAKER_KEY), SIG, 0, 0,
                    ),
                )
            )  # fmt: skip
            return
        if r < 0.5:  # a TWAP over five to six minutes
            end = START_MS + self.ix // self._cpm + 300_000 + int(rng.random() * 60_000)
            self._emit(
                _new(
                    CreateOrder,
                    (
                        account, _TAKER_KEY, market, coi, size, worst, 1 - is_ask,
                        int(OrderType.TWAP), 1, 0, 0, end, self._expired_at,
                        self._nonce(account, _TAKER_KEY), SIG, 0, 0,
                    ),
                )
            )  # fmt: skip
            return
        sl = OrderInfo(market, 0, 0, worst, is_ask, int(OrderType.STOP_LOSS), 0, 1, stop, expiry)
        tp = OrderInfo(market, 0, 0, profit, is_ask, int(OrderType.TAKE_PROFIT_LIMIT), 1, 1,
                       profit, expiry)  # fmt: skip
        if r < 0.6:  # OCO on the position the account may hold
            orders, grouping = [tp._replace(client_order_index=coi), sl], 2
        else:  # OTOCO / OTO: an entry on the other side, at the market or resting near the mid
            side = 1 - is_ask
            if rng.random() < 0.5:
                price = max(1, round(mid * (0.99 if side else 1.01)))
                entry = OrderInfo(market, coi, size, price, side, int(OrderType.MARKET), 0, 0, 0, 0)
                self._ops.append(_new(BareOp, (market, ADD, coi, side, price, size)))
                self._ops.append(_new(BareOp, (market, CANCEL, coi, 0, 0, 0)))
            else:
                price = max(1, round(mid * (1.001 if side else 0.999)))
                entry = OrderInfo(market, coi, size, price, side, 0, 1, 0, 0, expiry)
                self._ops.append(_new(BareOp, (market, ADD, coi, side, price, size)))
            orders, grouping = ([entry, tp, sl], 3) if r < 0.85 else ([entry, sl], 1)
        self._emit(
            CreateGroupedOrders(
                _Acct(account), _Key(_TAKER_KEY), grouping, len(orders),
                *grouped_slots(orders), self._expired_at, self._nonce(account, _TAKER_KEY), SIG,
            )  # type: ignore[call-arg]
        )  # fmt: skip

    def _lever_deposit(self, i: int) -> None:
        """A levered account tops up $1,000 before (re)opening a position."""
        self._emit(Deposit(_Acct(self.levered_accounts[i]), 1_000 * USDC))

    def _lever_order(self, i: int) -> None:
        """A market order for ~90% of the maximum leverage on $1,000, always the same side."""
        account = self.levered_accounts[i]
        market = self.lev_market[i]
        usd = 1_000.0 * 10_000 / MARKETS[market].min_imf * 0.9
        is_ask = 1 if self.lev_is_ask[i] else 0
        sign = -1.0 if is_ask else 1.0
        price = max(1, round(self.mids[market] * (1.0 + sign * 0.01)))
        self._order(
            account,
            _TAKER_KEY,
            market,
            self._next_coi(),
            self._lots(market, usd),
            price,
            is_ask,
            OrderType.MARKET,
            TimeInForce.IMMEDIATE_OR_CANCEL,
        )

    def _funding(self, market: int) -> None:
        self._emit(ApplyFunding(_Mkt(market), self.rng.randint(-5_000, 5_000)))

    def _leverage(self) -> None:
        account = self._taker()
        market = self._market()
        spec = MARKETS[market]
        imf = self.rng.randint(spec.min_imf, spec.default_imf)
        self._emit(
            UpdateLeverage(
                _Acct(account),
                _Key(_TAKER_KEY),
                _Mkt(market),
                imf,
                0,
                self._expired_at,
                self._nonce(account, _TAKER_KEY),
                SIG,
            )
        )

    # ---- money and oracle ------------------------------------------------------------------

    def _transfer(self) -> None:
        a = self._taker()
        b = self._taker()
        if a == b:
            b = self.taker_accounts[0] if a != self.taker_accounts[0] else self.taker_accounts[1]
        self._emit(
            Transfer(
                _Acct(a),
                _Key(_TAKER_KEY),
                _Acct(b),
                USDC_ASSET_INDEX,
                PERPS_ROUTE,
                PERPS_ROUTE,
                self.rng.randint(10, 1_000) * USDC,
                0,
                _MEMO,
                _NO_L1_SIG,
                self._expired_at,
                self._nonce(a, _TAKER_KEY),
                SIG,
            )
        )

    def _withdraw(self) -> None:
        a = self._taker()
        self._emit(
            Withdraw(
                _Acct(a),
                _Key(_TAKER_KEY),
                USDC_ASSET_INDEX,
                PERPS_ROUTE,
                self.rng.randint(10, 200) * USDC,
                self._expired_at,
                self._nonce(a, _TAKER_KEY),
                SIG,
            )
        )

    def _oracle(self, *, shock: bool) -> None:
        rng = self.rng
        if shock:
            market = (self.ix // max(1, self.cfg.shock_every)) % len(MARKETS)
            move = self.cfg.shock_bps * (1.0 + rng.random()) / 10_000
            move = move if rng.random() < 0.5 else -move
        else:
            market = int(rng.random() * len(MARKETS))
            move = rng.gauss(0.0, MARKETS[market].vol_bps / 10_000)
        self.mids[market] *= 1.0 + move
        self._emit(SetMarkPrice(_Mkt(market), max(1, round(self.mids[market]))))
