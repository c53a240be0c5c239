"""The open-loop load generator of ``raydex loadtest`` (and ``make demo``): plan, sign, send, watch.

::

    plan_load()  (before the timed window)          run_lanes()  (the timed window)
      traders: makers, takers, levered accounts       lane 0 ─ WS  jsonapi/sendtx ──► group A port
      a moving mid per market                         lane 1 ─ WS ──────────────────► group B port
      every tx signed, its body pre-encoded,          lane 2 ─ REST sendTx/Batch ───► group A port
      given a planned send time (tps spacing)         ...
                                                      watch_books(): order_book freshness per group

**Open loop.** Item ``i`` is planned at ``t0 + i / tps``; its latency is *reply - planned time*,
never *reply - actual send*, so when the generator or the server falls behind the delay counts
(no coordinated omission). The lateness of the send itself is recorded separately (``send_lag``).

**Ordering.** An account's txs carry consecutive nonces, so each account is bound to one lane and
a lane keeps its accounts' txs in order: a WS lane sends on one connection (the replica handles a
connection's messages in order), a REST lane sends an account's next request only after that
account's previous one was answered, on the same keep-alive connection, hence to the same replica
(other accounts' requests are pipelined on the lane's ``rest_connections`` connections meanwhile;
the server answers a connection's requests in order). A WS lane keeps
at most the replica's ``ws_max_inflight_txs`` txs unanswered (beyond, the replica would refuse).

**Impolite clients** (``--impolite``, lanes of kind ``impolite``): every tx goes out over REST at
its planned time whatever is in flight, on an idle keep-alive connection of the lane or, when
every one is busy, on a new one (as a flood would; a connection serves one request at a time, so
pipelining would only queue the excess in the server's socket buffers, out of the overload
door's sight). ``IMPOLITE_CONNECTIONS`` are opened per lane before the window (opening one per
request in it turned the run into a connection storm that swamped the replica's loop), at most
``IMPOLITE_MAX_CONNECTIONS`` (a process's file descriptors); a request that found the lane at its
cap waited for a connection, and is counted (``connection_waits``: 0 for a run that was truly
unbounded). The plan is then
signed with Lighter's SkipNonce attribute (a nonce need only exceed the key's last, as ccxt sends
them): a refused tx leaves a gap, not a stale account, so nothing re-syncs or re-signs. Each
refusal (a tx answered without an outcome from the sequencer) is counted by code with whether its
answer carried ``Retry-After``.

**After a rejection** (``NonceKeeper``): a rejection that did not consume its nonce makes the
account's later planned nonces wrong; like lighter-sdk's nonce manager, the generator then asks
the server (``nextNonce``) once the account's txs in flight are answered, and re-signs the
account's later txs with the server's nonce. Errors are counted by cause: intended by the
workload, root, or follow-on (an INVALID_NONCE pipelined behind an earlier rejection).

**Workload** (``plan_load``): market makers quote around a moving mid (a ~3 bp/s random walk, a
4% drop halfway) and re-quote (cancel + create as one batch, or modify); takers cross with IOC
market orders, rest passive GTT orders and cancel them later, transfer USDC, place stop-loss /
take-profit orders 1.5-5% from the mid (the drop fires some of the stops) and OTOCO groups (a
market entry with a position-tied take-profit and stop-loss) and cancel some of them; levered
accounts open near-maximum-leverage longs, so the drop and the sequencer's oracle (which walks the
mark toward the book mid) liquidate some of them. Rejections the workload causes on purpose
(cancel or modify of an order already filled or fired, IOC without liquidity) are counted apart
from real errors by ``INTENDED_CODES``.

**Cost.** Planning signs and encodes every tx, before the window. In the window, per tx: a timer
check, one write of bytes built from the pre-encoded body (``rawclient``), one reply parse
(msgspec) and one histogram record; coroutines: one per lane and one per in-flight REST request;
WebSocket answers and order_book updates are taken in the read callback, with no task switch.
After a rejection: one GET per episode and a signature per re-signed tx.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import random
import time
import urllib.parse
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import msgspec

from raydex.actors.local import FAR_MS, Trader
from raydex.codecs import (
    SKIP_NONCE_FLAG,
    CancelOrder,
    CreateGroupedOrders,
    CreateOrder,
    ModifyOrder,
    OrderInfo,
    ResultCode,
    Transfer,
    TxType,
    UpdateLeverage,
    grouped_slots,
    sign_tx,
    tx_to_json_str,
    tx_type_of,
)
from raydex.engine.rules import notional_multiplier

from ..hist import Histogram
from .rawclient import HttpConnection, WsConnection

__all__ = [
    "CLIENT_ERROR",
    "INTENDED_CODES",
    "NO_REPLY",
    "Item",
    "LaneSpec",
    "LoadPlan",
    "MarketInfo",
    "NonceKeeper",
    "OpenLoopClock",
    "Pacer",
    "Recorder",
    "BookWatch",
    "Endpoint",
    "assign_endpoints",
    "encode_item",
    "lane_specs",
    "min_lots",
    "plan_load",
    "planned_offsets_ns",
    "reply_facts",
    "run_lanes",
    "watch_books",
]

_decode = msgspec.json.Decoder().decode
_HOST = "127.0.0.1"
_API = "/api/v1/"
#: a REST answer not back after this long is a client error (aiohttp's total timeout before)
_TIMEOUT_S = 60.0
_OK = 200
_INVALID_NONCE = int(ResultCode.INVALID_NONCE)
_UNAVAILABLE = int(ResultCode.SEQUENCER_UNAVAILABLE)

#: Codes the workload provokes by design (a market maker cancelling what was just filled, an IOC
#: order meeting an empty side); they are reported but are not errors of the system under test.
INTENDED_CODES: frozenset[int] = frozenset(
    int(c)
    for name in (
        "NOT_ACTIVE_LIMIT_ORDER",
        "ORDER_NOT_FOUND",
        "NOT_ENOUGH_LIQUIDITY",
        "NO_LIQUIDITY",
        "NOT_ENOUGH_MARGIN",
        "POSITION_NOT_ALLOWED",
    )
    if (c := getattr(ResultCode, name, None)) is not None
)


#: Client-side outcomes recorded as codes: no reply before the lane gave up waiting; the request
#: failed in the client (connection reset, timeout, unparsable body).
NO_REPLY = -1
CLIENT_ERROR = -2
_CLIENT_CODES = {NO_REPLY: "NO_REPLY", CLIENT_ERROR: "CLIENT_ERROR"}


def code_name(code: int) -> str:
    if code in _CLIENT_CODES:
        return _CLIENT_CODES[code]
    try:
        return str(ResultCode(code).name)
    except ValueError:
        return str(code)


# ---- the open-loop schedule --------------------------------------------------------------------


def planned_offsets_ns(n: int, tps: float, jitter: random.Random | None = None) -> list[int]:
    """Planned send times (ns after the start) of ``n`` items at ``tps``: evenly spaced, or
    Poisson arrivals (exponential gaps, same mean rate) when ``jitter`` is given."""
    if tps <= 0:
        raise ValueError(f"tps must be > 0, got {tps}")
    gap = 1e9 / tps
    if jitter is None:
        return [round(i * gap) for i in range(n)]
    out: list[int] = []
    t = 0.0
    for _ in range(n):
        out.append(round(t))
        t += jitter.expovariate(1.0) * gap
    return out


class OpenLoopClock:
    """Planned send times for a stream of requests at ``tps`` *transactions* per second: a request
    of ``k`` txs is planned now and moves the clock ``k / tps`` seconds on (a batch takes the
    room of its txs), so the planned rate in txs is exactly ``tps`` whatever the batching."""

    def __init__(self, tps: float) -> None:
        if tps <= 0:
            raise ValueError(f"tps must be > 0, got {tps}")
        self.gap_ns = 1e9 / tps
        self.txs = 0

    @property
    def now_ns(self) -> int:
        return round(self.txs * self.gap_ns)

    def take(self, k: int) -> int:
        """The planned time of the next request (``k`` txs); advances the clock."""
        at = self.now_ns
        self.txs += k
        return at


class Recorder:
    """Outcomes of one group of lanes: latency from the planned time, per tx type and per second
    of the answer, the send lag, codes and their causes. Thread-unsafe by design (one event
    loop).

    Per second: ``per_second[s]`` holds the latencies of the txs *answered* in second ``s`` of
    the window (so its total is the answered rate then, whatever second they were planned in),
    ``ok_per_second[s]`` those answered 200.

    Causes: a non-200 code is ``workload_intended`` (``INTENDED_CODES``), ``follow_on`` (an
    ``INVALID_NONCE`` of a tx sent before an earlier rejection of its account was known: its
    nonce was invalidated by that rejection, which is counted itself) or ``root`` (the rest).
    ``committed`` counts txs the sequencer took into a block (accepted or rejected by the
    engine), the ledger's denominator."""

    def __init__(self, name: str = "all") -> None:
        self.name = name
        self.latency = Histogram()
        #: latency of the txs the sequencer took (admitted past the door and the dry-run)
        self.admitted = Histogram()
        self.send_lag = Histogram()
        self.by_type: dict[str, Histogram] = {}
        self.per_second: list[Histogram] = []
        self.ok_per_second: list[int] = []
        self.codes: Counter[int] = Counter()
        self.follow_on: Counter[int] = Counter()
        self.by_path: Counter[str] = Counter()
        self.sent = 0
        self.done = 0
        self.committed = 0
        #: nonce re-syncs from the server (nextNonce) and txs re-signed after them
        self.resyncs = 0
        self.resigned = 0
        #: INVALID_NONCE from the engine (the replica's dry-run had passed the tx: its pending
        #: nonces had run ahead of what the sequencer received)
        self.nonce_at_engine = 0
        #: txs answered without an outcome from the sequencer, by code, and of them those whose
        #: answer carried ``Retry-After`` (impolite lanes: their answers' headers are read)
        self.refusals: Counter[int] = Counter()
        self.refusals_retry_after: Counter[int] = Counter()
        #: connections impolite lanes opened (their pools, and one more each time every open
        #: one was busy), and requests that had to wait for one (every lane at its cap)
        self.connections = 0
        self.connection_waits = 0

    def merge(self, other: Recorder) -> None:
        """Add ``other``'s outcomes to these (two lanes' recorders summed into one)."""
        for mine, theirs in ((self.latency, other.latency), (self.admitted, other.admitted),
                             (self.send_lag, other.send_lag)):  # fmt: skip
            mine.merge(theirs)
        for name, h in other.by_type.items():
            self.by_type.setdefault(name, Histogram()).merge(h)
        while len(self.per_second) < len(other.per_second):
            self.per_second.append(Histogram())
            self.ok_per_second.append(0)
        for i, h in enumerate(other.per_second):
            self.per_second[i].merge(h)
            self.ok_per_second[i] += other.ok_per_second[i]
        for counter in ("codes", "follow_on", "by_path"):
            getattr(self, counter).update(getattr(other, counter))
        for n in ("sent", "done", "committed", "resyncs", "resigned", "nonce_at_engine"):
            setattr(self, n, getattr(self, n) + getattr(other, n))

    def sent_at(self, planned_ns: int, actual_ns: int, n: int) -> None:
        self.send_lag.record(max(0, actual_ns - planned_ns))
        self.sent += n

    def finished(
        self,
        planned_ns: int,
        done_ns: int,
        t0_ns: int,
        types: Sequence[str],
        codes: Sequence[int],
        committed: int = 0,
        follow_on: bool = False,
    ) -> None:
        """Record one answered item (``len(types)`` txs); latency counts from ``planned_ns``, the
        per-second rows bin by ``done_ns`` (the second it was answered in)."""
        lat = max(0, done_ns - planned_ns)
        sec = max(0, (done_ns - t0_ns) // 1_000_000_000)
        while len(self.per_second) <= sec:
            self.per_second.append(Histogram())
            self.ok_per_second.append(0)
        per = self.per_second[sec]
        for name, code in zip(types, codes, strict=True):
            self.latency.record(lat)
            per.record(lat)
            h = self.by_type.get(name)
            if h is None:
                h = self.by_type[name] = Histogram()
            h.record(lat)
            self.codes[code] += 1
            if code == _OK:
                self.ok_per_second[sec] += 1
            elif code == _INVALID_NONCE:
                if follow_on:
                    self.follow_on[code] += 1
                if committed:
                    self.nonce_at_engine += 1
        self.done += len(types)
        self.committed += committed
        for _ in range(committed):
            self.admitted.record(lat)

    def refused(self, codes: Sequence[int], retry_after: bool) -> None:
        """Txs of one answer that did not reach the sequencer, refused with ``codes``."""
        for code in codes:
            self.refusals[code] += 1
            if retry_after:
                self.refusals_retry_after[code] += 1

    def errors(self, intended: bool | None = None) -> dict[str, int]:
        """Non-200 codes by name; ``intended`` True/False keeps only those (not) in
        INTENDED_CODES, None keeps all."""
        return {
            code_name(c): n
            for c, n in sorted(self.codes.items())
            if c != _OK and (intended is None or (c in INTENDED_CODES) == intended)
        }

    def errors_by_cause(self) -> dict[str, dict[str, int]]:
        """Non-200 codes by cause (see the class docstring), each by code name."""
        root = {
            code_name(c): n - self.follow_on.get(c, 0)
            for c, n in sorted(self.codes.items())
            if c != _OK and c not in INTENDED_CODES and n > self.follow_on.get(c, 0)
        }
        return {
            "workload_intended": self.errors(intended=True),
            "root": root,
            "follow_on": {code_name(c): n for c, n in sorted(self.follow_on.items())},
        }


# ---- the workload ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class MarketInfo:
    index: int
    mark: int  # ticks
    lot: int  # 25% over the smallest order meeting both minimums (room for the mid to fall)
    min_imf_bps: int
    mult: int  # micro-USDC per (tick x lot): engine.rules.notional_multiplier

    @classmethod
    def of(cls, m: Any) -> MarketInfo:
        """From a deploy spec's market: its ``CreateMarket`` (``cluster/control/spec.py``)."""
        return cls(
            int(m.market_index), int(m.mark_price), min_lots(m) * 5 // 4 + 1,
            int(m.min_initial_margin_fraction),
            notional_multiplier(m.price_decimals, m.size_decimals),
        )  # fmt: skip


def min_lots(m: Any) -> int:
    """The smallest order size (lots) meeting both of the market's minimums at its mark."""
    mult = notional_multiplier(m.price_decimals, m.size_decimals)
    by_quote = -(-m.min_quote_amount // (m.mark_price * mult))
    return int(max(m.min_base_amount, by_quote, 1))


@dataclasses.dataclass(frozen=True, slots=True)
class Item:
    """One planned request: its planned offset, lane, account (ordering key), tx types, and the
    pre-encoded payloads (form body for REST, JSON text for WS)."""

    at_ns: int
    lane: int
    account: int
    types: tuple[str, ...]
    rest_path: str
    rest_body: bytes
    ws_text: str
    sampled: bool = False
    #: the signed txs (their nonces are the planned ones; re-signed after a nonce re-sync)
    txs: tuple[Any, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class LaneSpec:
    index: int
    group: str
    port: int
    kind: str  # "ws", "rest" or "impolite" (REST, in flight unbounded)
    #: the replica endpoint the lane talks to: an IP, and the host label it is reported under
    host: str = _HOST
    label: str = "local"


#: a group's replica endpoint: (host label, IP the driver reaches it at, port)
Endpoint = tuple[str, str, int]


def assign_endpoints(
    lanes: Sequence[LaneSpec], endpoints: Mapping[str, Sequence[Endpoint]]
) -> list[LaneSpec]:
    """Each lane moved to one of its group's endpoints: within a group, consecutive pairs of lanes
    (a WS and a REST one, see ``lane_specs``) go to the endpoints round-robin, so every endpoint
    gets both kinds when there are lanes enough. A group without endpoints keeps its lanes."""
    out = []
    seen: Counter[str] = Counter()
    for ln in lanes:
        mine = endpoints.get(ln.group) or ()
        k = seen[ln.group]
        seen[ln.group] += 1
        if mine:
            label, host, port = mine[(k // 2) % len(mine)]
            ln = dataclasses.replace(ln, host=host, port=port, label=label)
        out.append(ln)
    return out


def lane_specs(
    clients: int, groups: Sequence[tuple[str, int]], impolite: bool = False
) -> list[LaneSpec]:
    """``clients`` lanes spread over the groups (name, port) round-robin; within a group, lanes
    alternate WS and REST (the first lane of every group is WS); ``impolite``: every lane is an
    unbounded REST lane (kind ``impolite``, see the module docstring)."""
    if clients < 2 * len(groups):
        raise ValueError(f"--clients must be >= {2 * len(groups)} (a WS and a REST lane per group)")
    out = []
    for i in range(clients):
        name, port = groups[i % len(groups)]
        kind = "ws" if (i // len(groups)) % 2 == 0 else "rest"
        out.append(LaneSpec(i, name, port, "impolite" if impolite else kind))
    return out


@dataclasses.dataclass
class LoadPlan:
    items: list[Item]
    traders: list[Trader]
    setup_ops: list[Any]
    mix: Counter[str]
    sign_s: float
    busiest_markets: list[int]


#: collateral of a levered account (micro-USDC): small, so its position fits the book's depth
LEVERED_USDC = 200 * 10**6

_MIX = (("requote", 0.45), ("modify", 0.12), ("ioc", 0.16), ("rest", 0.08), ("tcancel", 0.08),
        ("transfer", 0.05), ("levered", 0.04), ("idle_cancel", 0.02), ("trigger", 0.03),
        ("grouped", 0.015), ("ccancel", 0.01))  # fmt: skip


def plan_load(
    markets: Sequence[MarketInfo],
    accounts: int,
    tps: float,
    seconds: float,
    lanes: Sequence[LaneSpec],
    seed: int = 1,
    sample_every: int = 0,
    first_account: int = 1,
    progress: Callable[[str], None] | None = None,
    skip_nonce: bool = False,
) -> LoadPlan:
    """Sign the whole timed window's traffic now (see the module docstring); ``skip_nonce``:
    every user tx carries Lighter's SkipNonce attribute (impolite clients)."""
    rng = random.Random(seed)
    if accounts < 4:
        raise ValueError("--accounts must be >= 4")
    t_sign = time.perf_counter()
    n_makers = max(len(markets), accounts // 4)
    n_lev = max(1, accounts // 20)
    people = [Trader(first_account + i) for i in range(accounts)]
    makers, levered, takers = (
        people[:n_makers], people[n_makers : n_makers + n_lev], people[n_makers + n_lev :]
    )  # fmt: skip
    if not takers:
        raise ValueError("--accounts too small: no takers left")
    setup: list[Any] = []
    for t in makers + takers:
        setup += t.setup(10**13)  # $10M: margin never binds for them
    for t in levered:
        setup += t.setup(LEVERED_USDC)
    by_market = {m.index: m for m in markets}
    mids = {m.index: float(m.mark) for m in markets}
    maker_market = {t.account: markets[i % len(markets)].index for i, t in enumerate(makers)}
    live: dict[int, list[int]] = {t.account: [] for t in makers}
    resting: list[tuple[Trader, int, int]] = []
    #: conditional orders placed (trader, market, client order index), cancelled now and then
    conds: list[tuple[Trader, int, int]] = []
    coi = [0]
    items: list[Item] = []
    mix: Counter[str] = Counter()
    per_market: Counter[int] = Counter()
    clock = OpenLoopClock(tps)
    end_ns = int(seconds * 1e9)
    n = max(1, int(tps * seconds))  # txs; the loop stops at the end of the window
    shock_at = end_ns // 2
    shocked = False
    lane_of = {t.account: lanes[t.account % len(lanes)].index for t in people}
    kinds = [k for k, _ in _MIX]
    weights = [w for _, w in _MIX]
    # levered account -> 0: raise its leverage next, 1: open its position next (a request of its
    # own, so the replica's dry-run sees the new leverage), absent: done
    lev_stage = {t.account: 0 for t in levered}

    flag = SKIP_NONCE_FLAG if skip_nonce else 0

    def sign(t: Trader, tx: Any) -> Any:
        tx = tx._replace(nonce=t.nonce | flag)
        t.nonce += 1
        return sign_tx(tx, t.seed)

    def next_coi() -> int:
        coi[0] += 1
        return coi[0]

    def step(m: MarketInfo) -> int:
        return max(1, m.mark // 10_000)

    sigma = 0.0003 / math.sqrt(max(tps, 1.0))
    i = 0
    while clock.now_ns < end_ns:
        at = clock.now_ns
        for mi in mids:  # the mid walks ~3 bp/s; a 4% drop halfway through
            mids[mi] *= 1.0 + rng.gauss(0.0, sigma)
            if not shocked and at >= shock_at:
                mids[mi] *= 0.96
        shocked = shocked or at >= shock_at
        kind = rng.choices(kinds, weights)[0]
        txs: list[Any]
        if kind in ("requote", "modify", "idle_cancel"):
            t = makers[rng.randrange(len(makers))]
            m = by_market[maker_market[t.account]]
            mine = live[t.account]
            is_ask = rng.randrange(2)
            off = rng.randint(2, 20) * step(m) * (1 if is_ask else -1)
            price = max(1, round(mids[m.index]) + off)
            size = m.lot * rng.randint(5, 40)  # deep enough for the levered longs
            if kind == "modify" and mine:
                txs = [sign(t, ModifyOrder(t.account, 0, m.index, mine[0], size, price, 0,
                                           FAR_MS, 0, bytes(80)))]  # fmt: skip
            elif kind == "idle_cancel" and mine:
                txs = [sign(t, CancelOrder(t.account, 0, m.index, mine.pop(0), FAR_MS, 0,
                                           bytes(80)))]  # fmt: skip
            else:
                kind = "requote"
                txs = []
                if len(mine) >= 4:
                    txs.append(sign(t, CancelOrder(t.account, 0, m.index, mine.pop(0), FAR_MS, 0,
                                                   bytes(80))))  # fmt: skip
                c = next_coi()
                txs.append(sign(t, CreateOrder(t.account, 0, m.index, c, size, price, is_ask, 0,
                                               1, 0, 0, -1, FAR_MS, 0, bytes(80))))  # fmt: skip
                mine.append(c)
        elif kind == "levered" and lev_stage:
            t = next(x for x in levered if x.account in lev_stage)
            m = markets[t.account % len(markets)]
            imf = max(m.min_imf_bps, 1)
            if lev_stage[t.account] == 0:
                lev_stage[t.account] = 1
                txs = [sign(t, UpdateLeverage(t.account, 0, m.index, imf, 0, FAR_MS, 0,
                                              bytes(80)))]  # fmt: skip
            else:
                del lev_stage[t.account]
                # A market buy at 80% of the maximum leverage: a fall of the mark by 1.3% (50x
                # markets) to 3.3% (20x) liquidates it, so the 4% drop does.
                notional = LEVERED_USDC * 10_000 // imf * 8 // 10
                size = max(m.lot, notional // (m.mark * m.mult))
                worst = round(mids[m.index] * 1.01)
                txs = [sign(t, CreateOrder(t.account, 0, m.index, 0, size, worst, 0, 1, 0, 0, 0,
                                           -1, FAR_MS, 0, bytes(80)))]  # fmt: skip
        elif kind == "rest":
            t = takers[rng.randrange(len(takers))]
            m = markets[rng.randrange(len(markets))]
            is_ask = rng.randrange(2)
            away = 1.0 + (0.03 if is_ask else -0.03)
            c = next_coi()
            txs = [sign(t, CreateOrder(t.account, 0, m.index, c, m.lot, round(mids[m.index] * away),
                                       is_ask, 0, 1, 0, 0, -1, FAR_MS, 0, bytes(80)))]  # fmt: skip
            resting.append((t, m.index, c))
        elif kind == "tcancel" and resting:
            t, mi, c = resting.pop(rng.randrange(len(resting)))
            txs = [sign(t, CancelOrder(t.account, 0, mi, c, FAR_MS, 0, bytes(80)))]
        elif kind == "trigger":
            # a stop-loss (market, below / above the mid as it sells / buys) or a take-profit
            # (limit, the other way), sized: it waits, and the drop fires some of the stops
            t = takers[rng.randrange(len(takers))]
            m = markets[rng.randrange(len(markets))]
            is_ask = rng.randrange(2)
            away = rng.uniform(0.015, 0.05)
            c = next_coi()
            if rng.randrange(2):
                trig = round(mids[m.index] * (1 - away if is_ask else 1 + away))
                otype, tif, price = 2, 0, round(trig * (0.99 if is_ask else 1.01))
            else:
                trig = round(mids[m.index] * (1 + away if is_ask else 1 - away))
                otype, tif, price = 5, 1, trig
            txs = [sign(t, CreateOrder(t.account, 0, m.index, c, m.lot, price, is_ask, otype, tif,
                                       0, trig, FAR_MS, FAR_MS, 0, bytes(80)))]  # fmt: skip
            conds.append((t, m.index, c))
        elif kind == "grouped":
            # OTOCO: a market entry, then a position-tied take-profit and stop-loss
            t = takers[rng.randrange(len(takers))]
            m = markets[min(len(markets) - 1, int(rng.paretovariate(1.5)) - 1)]
            side = rng.randrange(2)
            mid = mids[m.index]
            c = next_coi()
            worst = round(mid * (0.99 if side else 1.01))
            exit_ask = 1 - side
            tp = round(mid * (0.97 if side else 1.03))
            sl = round(mid * (1.03 if side else 0.97))
            orders = [
                OrderInfo(m.index, c, m.lot, worst, side, 1, 0, 0, 0, 0),
                OrderInfo(m.index, 0, 0, tp, exit_ask, 5, 1, 1, tp, FAR_MS),
                OrderInfo(m.index, 0, 0, round(sl * (0.99 if exit_ask else 1.01)), exit_ask, 2,
                          0, 1, sl, FAR_MS),
            ]  # fmt: skip
            txs = [sign(t, CreateGroupedOrders(t.account, 0, 3, 3, *grouped_slots(orders),
                                               FAR_MS, 0, bytes(80)))]  # fmt: skip
            conds.append((t, m.index, c))
        elif kind == "ccancel" and conds:
            t, mi, c = conds.pop(rng.randrange(len(conds)))
            txs = [sign(t, CancelOrder(t.account, 0, mi, c, FAR_MS, 0, bytes(80)))]
        elif kind == "transfer":
            t, u = rng.sample(takers, 2) if len(takers) > 1 else (takers[0], makers[0])
            txs = [
                sign(
                    t,
                    Transfer(
                        t.account,
                        0,
                        u.account,
                        3,
                        0,
                        0,
                        1_000_000,
                        0,
                        bytes(32),
                        bytes(65),
                        FAR_MS,
                        0,
                        bytes(80),
                    ),
                )
            ]
        else:
            kind = "ioc"
            t = takers[rng.randrange(len(takers))]
            m = markets[min(len(markets) - 1, int(rng.paretovariate(1.5)) - 1)]
            is_ask = rng.randrange(2)
            worst = round(mids[m.index] * (0.99 if is_ask else 1.01))
            txs = [sign(t, CreateOrder(t.account, 0, m.index, 0, m.lot * rng.randint(1, 3), worst,
                                       is_ask, 1, 0, 0, 0, -1, FAR_MS, 0, bytes(80)))]  # fmt: skip
        mix[kind] += 1
        for tx in txs:
            if hasattr(tx, "market_index"):
                per_market[int(tx.market_index)] += 1
        items.append(encode_item(clock.take(len(txs)), lane_of[t.account], t.account, txs,
                             sampled=sample_every > 0 and i % sample_every == 0))  # fmt: skip
        i += 1
        if progress is not None and i % 20_000 == 0:
            progress(f"signed {i:,} requests (~{clock.txs:,}/{n:,} txs)")
    busiest = [mi for mi, _ in per_market.most_common(2)] or [markets[0].index]
    return LoadPlan(items, people, setup, mix, time.perf_counter() - t_sign, busiest)


_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")
#: ``str.translate`` table doing ``urllib.parse.quote_plus`` for ASCII text, in C (~20x faster).
_QUOTE = {c: ("+" if c == 32 else f"%{c:02X}") for c in range(128) if c not in _SAFE}


def form_encode(fields: dict[str, str | int]) -> bytes:
    """``application/x-www-form-urlencoded`` body, equal to ``urllib.parse.urlencode``."""
    parts = []
    for k, v in fields.items():
        text = str(v)
        val = text.translate(_QUOTE) if text.isascii() else urllib.parse.quote_plus(text)
        parts.append(f"{k}={val}")
    return "&".join(parts).encode()


def encode_item(at: int, lane: int, account: int, txs: list[Any], sampled: bool = False) -> Item:
    """One planned request of ``txs`` (signed; one tx: sendTx, more: sendTxBatch), pre-encoded
    for REST and WS."""
    types = [int(tx_type_of(type(tx))) for tx in txs]
    infos = [tx_to_json_str(tx) for tx in txs]
    names = tuple(TxType(t).name for t in types)
    if len(txs) == 1:
        body = form_encode({"tx_type": types[0], "tx_info": infos[0]})
        ws = {"type": "jsonapi/sendtx", "data": {"tx_type": types[0], "tx_info": infos[0]}}
        path = "sendTx"
    else:
        form = {"tx_types": json.dumps(types), "tx_infos": json.dumps(infos)}
        body = form_encode(dict(form))
        ws = {"type": "jsonapi/sendtxbatch", "data": form}
        path = "sendTxBatch"
    # The WS id is filled per send (``%d`` slot) so the text stays pre-encoded.
    text = json.dumps({**ws, "id": 0}).replace('"id": 0', '"id": %d')
    return Item(at, lane, account, names, path, body, text, sampled, tuple(txs))


# ---- sending -----------------------------------------------------------------------------------

SpanHook = Callable[[Item, int, int, int], dict[str, str]]


def _open_http(lane: LaneSpec) -> Awaitable[HttpConnection]:
    """A keep-alive connection to the lane's replica whose answers time out after ``_TIMEOUT_S``."""
    return HttpConnection.open(lane.host, lane.port, answer_timeout_s=_TIMEOUT_S)


def _when_done(task: asyncio.Future[Any]) -> asyncio.Future[None]:
    """Resolves (never fails) once ``task`` is done: ``asyncio.wait([task])`` without the set,
    the coroutine check and the callback bookkeeping it does per call, once per REST tx here."""
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake(_: object) -> None:
        if not waiter.done():  # the waiting caller may have been cancelled
            waiter.set_result(None)

    task.add_done_callback(wake)
    return waiter


class Pacer:
    """Wakes the lanes at their planned send times on a shared clock tick: one loop timer and
    one future per tick for every lane waiting on it, where a sleep per planned send cost each
    send its own future, timer and loop wake-up (5,000 a second at 5,000 tx/s; ~13% of the
    generator's samples in a profile). A send is never early and at most one tick late
    (``tick_ns``, 1 ms: each send's lateness counts in its latency from the planned time, as
    any loop lateness does); a lane woken on a tick sends everything due by then."""

    def __init__(self, tick_ns: int = 1_000_000) -> None:
        self.tick_ns = tick_ns
        # each wait has its own future (a lane cancelled while it waits cancels only its own)
        self._ticks: dict[int, list[asyncio.Future[None]]] = {}
        #: waits (a lane was ahead of its plan) and loop timers set, for tests and the curious
        self.waits = 0
        self.timers = 0

    def until(self, t_ns: int) -> Awaitable[None] | None:
        """None if ``t_ns`` (``time.monotonic_ns``) has come; else the tick's future to await."""
        if t_ns <= time.monotonic_ns():
            return None
        self.waits += 1
        tick = -(-t_ns // self.tick_ns)  # the first tick at or after t_ns
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        waiting = self._ticks.get(tick)
        if waiting is None:
            waiting = self._ticks[tick] = []
            # loop.time() is time.monotonic(); call_at never fires early
            loop.call_at(tick * self.tick_ns / 1e9, self._fire, tick)
            self.timers += 1
        waiting.append(fut)
        return fut

    def _fire(self, tick: int) -> None:
        for fut in self._ticks.pop(tick):
            if not fut.done():
                fut.set_result(None)


def reply_facts(reply: Any, n: int) -> tuple[list[int], int, bool]:
    """From a sendTx/sendTxBatch answer (REST body or WS reply) of ``n`` txs: the per-tx codes,
    how many txs were sequenced (the sequencer returned an outcome: ``tx_hash`` present and not
    21822), and whether the account's nonce is now unknown to the client (any answer whose code
    is not 200: a rejection that did not consume the nonce; executed txs that failed in their
    block are answered 200, their codes in ``codes``)."""
    if not isinstance(reply, dict):
        return [CLIENT_ERROR] * n, 0, True
    code = reply.get("code", 0)
    code = int(code) if isinstance(code, int) else CLIENT_ERROR
    per = reply.get("codes")  # what each tx did: code 200 answers executed txs, failed or not
    if isinstance(per, list) and len(per) == n:
        codes = [int(c) for c in per]
    else:
        codes = [int(per) if isinstance(per, int) and code == _OK else code] * n
    if code == _OK:
        return codes, n, False
    # a code other than 200 names a tx that changed nothing (NONCE_KEPT_CODES): its nonce is free
    sequenced = "tx_hash" in reply and code != _UNAVAILABLE
    return codes, n if sequenced else 0, True


class NonceKeeper:
    """What a real client does after a rejection, per account (one API key, 0).

    The plan signed every tx with consecutive nonces; a rejection that does not consume its
    nonce (dry-run rejections, 21822, INVALID_NONCE) leaves the account's later txs off by the
    txs that failed. Like lighter-sdk's nonce manager after an "invalid nonce" (its
    ``hard_refresh_nonce``), the account is then marked *stale*: its next tx waits until its
    txs in flight are answered, asks the server (``GET /api/v1/nextNonce``), and from then on
    every tx of the account is re-signed with the server's nonce (``shift`` = server nonce -
    planned nonce) until a later re-sync finds the plan in step again.

    ``epoch`` counts the account's stale marks; a tx remembers the epoch it was sent in, so an
    INVALID_NONCE of a tx sent before the rejection was known is a *follow-on* (pipelined behind
    the rejection on a WebSocket), not a cause of its own.

    Cost: one GET per rejection episode; ~100 µs of signing per re-signed tx (only after a
    rejection left the account's plan out of step).
    """

    def __init__(self, seeds: Mapping[int, bytes]) -> None:
        self.seeds = seeds
        self.shift: dict[int, int] = {}
        self.stale: set[int] = set()
        self.epoch: Counter[int] = Counter()
        self.inflight: Counter[int] = Counter()
        self._drained: dict[int, asyncio.Event] = {}

    def sent(self, item: Item) -> int:
        """``item`` goes out now; returns its epoch."""
        self.inflight[item.account] += 1
        return self.epoch[item.account]

    def answered(self, item: Item, epoch: int, stale: bool) -> bool:
        """``item`` (sent in ``epoch``) was answered; True if its rejection is a follow-on."""
        a = item.account
        follow_on = epoch < self.epoch[a]
        if stale and not follow_on:
            self.stale.add(a)
            self.epoch[a] += 1
        self.inflight[a] -= 1
        if self.inflight[a] <= 0:
            del self.inflight[a]
            ev = self._drained.pop(a, None)
            if ev is not None:
                ev.set()
        return follow_on

    async def drained(self, account: int) -> None:
        """Until none of ``account``'s txs is in flight."""
        if self.inflight.get(account, 0) > 0:
            ev = self._drained.setdefault(account, asyncio.Event())
            await ev.wait()

    async def resync(self, http: HttpConnection, item: Item, rec: Recorder) -> None:
        """Ask the server for ``item``'s account's next nonce; set the shift from it."""
        a = item.account
        key = int(getattr(item.txs[0], "api_key_index", 0)) if item.txs else 0
        try:
            _, raw = await http.get(f"{_API}nextNonce?account_index={a}&api_key_index={key}")
            nonce = int(_decode(raw)["nonce"])
        except (ConnectionError, msgspec.DecodeError, TimeoutError, KeyError, TypeError):
            return  # still stale: the next tx of the account tries again
        rec.resyncs += 1
        self.stale.discard(a)
        if item.txs:
            self.shift[a] = nonce - int(item.txs[0].nonce)

    def prepare(self, item: Item, rec: Recorder) -> Item:
        """``item`` as it must be sent: re-signed with shifted nonces if the account's shift is
        not zero."""
        shift = self.shift.get(item.account, 0)
        if not shift or not item.txs:
            return item
        seed = self.seeds[item.account]
        txs = [sign_tx(tx._replace(nonce=tx.nonce + shift), seed) for tx in item.txs]
        rec.resigned += len(txs)
        return encode_item(item.at_ns, item.lane, item.account, txs, item.sampled)


async def _rest_lane(
    lane: LaneSpec,
    items: list[Item],
    t0: int,
    rec: Recorder,
    trace: SpanHook | None,
    stop: asyncio.Event,
    connections: int,
    nonces: NonceKeeper | None,
    pacer: Pacer,
) -> None:
    prev: dict[int, asyncio.Task[None]] = {}
    # Keep-alive connections, an account always on the same one: its requests reach the same
    # replica, whose nonce cache has applied the account's previous tx (replicas behind a
    # shared port apply blocks at their own pace; another one may still be behind). Other
    # accounts' requests are pipelined on it meanwhile (the server answers them in order).
    # Accounts take the connections round-robin in plan order: ``account % connections`` put
    # every account of a lane on one connection (the lanes already split accounts by
    # ``account % lanes``, 8 and 8), so the server answered the whole lane one at a time.
    conns = [await _open_http(lane) for _ in range(connections)]
    conn_of: dict[int, int] = {}  # filled as each account's first request is dispatched
    reopening: dict[int, asyncio.Future[HttpConnection]] = {}

    async def conn(i: int) -> HttpConnection:
        """Connection ``i``, opened again if the server closed it."""
        c = conns[i]
        if c.lost is None:
            return c
        fut = reopening.get(i)
        if fut is None:
            fut = reopening[i] = asyncio.ensure_future(_open_http(lane))
            fut.add_done_callback(lambda _f: reopening.pop(i, None))
        c = conns[i] = await asyncio.shield(fut)
        return c

    async def one(item: Item, before: asyncio.Task[None] | None) -> None:
        if before is not None and not before.done():
            await _when_done(before)
        planned = t0 + item.at_ns
        n = len(item.types)
        http: HttpConnection | None = None
        with contextlib.suppress(ConnectionError, OSError, TimeoutError):
            http = await conn(conn_of[item.account])
        epoch = 0
        if nonces is not None:
            if http is not None and item.account in nonces.stale:
                await nonces.resync(http, item, rec)  # its previous tx was answered: none in flight
            item = nonces.prepare(item, rec)
            epoch = nonces.sent(item)
        sent = time.monotonic_ns()
        rec.sent_at(planned, sent, n)
        headers = trace(item, planned, sent, 0) if trace is not None and item.sampled else None
        try:
            if http is None:
                raise ConnectionError("no connection to the replica")
            _, raw = await http.post(_API + item.rest_path, item.rest_body, headers=headers)
            codes, committed, stale = reply_facts(_decode(raw), n)
        except (ConnectionError, msgspec.DecodeError, TimeoutError):
            codes, committed, stale = [CLIENT_ERROR] * n, 0, True
        done = time.monotonic_ns()
        follow = nonces.answered(item, epoch, stale) if nonces is not None else False
        if trace is not None and item.sampled:
            trace(item, planned, sent, done)
        rec.by_path["rest_batch" if n > 1 else "rest"] += 1
        rec.finished(planned, done, t0, item.types, codes, committed, follow)

    try:
        for item in items:
            if stop.is_set():
                break
            due = pacer.until(t0 + item.at_ns)
            if due is not None:
                await due
            if item.account not in conn_of:
                conn_of[item.account] = len(conn_of) % connections
            prev[item.account] = asyncio.get_running_loop().create_task(
                one(item, prev.get(item.account))
            )
        if prev:
            await asyncio.wait(list(prev.values()))
    finally:
        for c in conns:
            c.close()


async def _ws_lane(
    lane: LaneSpec,
    items: list[Item],
    t0: int,
    rec: Recorder,
    stop: asyncio.Event,
    nonces: NonceKeeper | None,
    max_inflight: int,
    reply_timeout_s: float,
    pacer: Pacer,
) -> None:
    """One WebSocket: an account's txs are pipelined in plan order, at most ``max_inflight``
    unanswered on the connection (the server's ``ws_max_inflight_txs``: a polite client waits
    rather than being refused). Answers are taken in the connection's read callback. After a
    rejection that left the account stale, its later txs wait in a backlog while a fixer task
    lets its in-flight txs be answered, re-syncs the nonce over REST (same port) and sends the
    backlog re-signed; other accounts' txs keep flowing."""
    waiting: dict[int, tuple[Item, int]] = {}
    answered = asyncio.Event()  # set when the last unanswered tx is answered
    backlog: dict[int, deque[Item]] = {}
    fixers: set[asyncio.Task[None]] = set()
    ids = [0]
    slots = asyncio.Semaphore(max_inflight)
    greeted: list[bool] = []
    rest: list[HttpConnection] = []  # for nonce re-syncs, opened on the first one

    def on_message(data: bytes) -> None:
        if not greeted:  # {"type": "connected"}
            greeted.append(True)
            return
        done = time.monotonic_ns()
        try:
            reply = _decode(data)
        except msgspec.DecodeError:
            return
        got = waiting.pop(reply.get("id", -1), None) if isinstance(reply, dict) else None
        if got is None:
            return
        slots.release()
        item, epoch = got
        codes, committed, stale = reply_facts(reply, len(item.types))
        follow = nonces.answered(item, epoch, stale) if nonces is not None else False
        rec.by_path["ws"] += 1
        rec.finished(t0 + item.at_ns, done, t0, item.types, codes, committed, follow)
        if not waiting:
            answered.set()

    ws = await WsConnection.open(lane.host, lane.port, "/stream", on_message)
    gone: asyncio.Future[Any] = ws.closed

    async def send(item: Item) -> None:
        if slots.locked():
            slot: asyncio.Future[Any] = asyncio.ensure_future(slots.acquire())
            await asyncio.wait([slot, gone], return_when=asyncio.FIRST_COMPLETED)
            if not slot.done():
                slot.cancel()
                return  # the connection is gone: the lane stops
        else:
            await slots.acquire()
        epoch = 0
        if nonces is not None:
            item = nonces.prepare(item, rec)
            epoch = nonces.sent(item)
        ids[0] += 1
        k = ids[0]
        waiting[k] = (item, epoch)
        answered.clear()
        rec.sent_at(t0 + item.at_ns, time.monotonic_ns(), len(item.types))
        ws.send_text((item.ws_text % k).encode())

    async def resync(item: Item) -> None:
        assert nonces is not None
        try:
            if not rest or rest[0].lost is not None:
                rest[:] = [await _open_http(lane)]
        except (OSError, TimeoutError):
            return
        await nonces.resync(rest[0], item, rec)

    async def fix(account: int) -> None:
        assert nonces is not None
        queue = backlog[account]
        while queue and not gone.done():
            if account in nonces.stale:
                drained: asyncio.Future[Any] = asyncio.ensure_future(nonces.drained(account))
                await asyncio.wait([drained, gone], return_when=asyncio.FIRST_COMPLETED)
                drained.cancel()
                if gone.done():
                    break
                await resync(queue[0])
                if account in nonces.stale:  # the server did not answer: try again shortly
                    await asyncio.sleep(0.05)
                    continue
            while queue and account not in nonces.stale and not gone.done():
                await send(queue.popleft())
        del backlog[account]  # no await since the last check: nothing was added in between

    try:
        for item in items:
            if stop.is_set() or gone.done():
                break
            due = pacer.until(t0 + item.at_ns)
            if due is not None:
                await due
            a = item.account
            if nonces is not None and (a in backlog or a in nonces.stale):
                queue = backlog.get(a)
                if queue is None:
                    queue = backlog[a] = deque()
                    fixer = asyncio.get_running_loop().create_task(fix(a))
                    fixers.add(fixer)
                    fixer.add_done_callback(fixers.discard)
                queue.append(item)
                continue
            await send(item)
        if fixers:
            await asyncio.wait(list(fixers))
        if waiting:
            last: asyncio.Future[Any] = asyncio.ensure_future(answered.wait())
            await asyncio.wait([last, gone], timeout=reply_timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            last.cancel()
        gave_up = time.monotonic_ns()
        for item, _ in waiting.values():
            rec.finished(t0 + item.at_ns, gave_up, t0, item.types, [NO_REPLY] * len(item.types))
        waiting.clear()
    finally:
        ws.close()
        for c in rest:
            c.close()


#: an impolite lane's keep-alive connections opened before the window, and the most it opens
#: (more on demand while every open one is busy); past the cap a request waits for one
#: (``Recorder.connection_waits``): the file descriptors of one process are the only bound
IMPOLITE_CONNECTIONS = 256
IMPOLITE_MAX_CONNECTIONS = 1024


async def _impolite_lane(
    lane: LaneSpec,
    items: list[Item],
    t0: int,
    rec: Recorder,
    stop: asyncio.Event,
    pacer: Pacer,
    connections: int = IMPOLITE_CONNECTIONS,
    max_connections: int = IMPOLITE_MAX_CONNECTIONS,
) -> None:
    """Every item sent over REST at its planned time whatever is in flight (module docstring):
    on an idle connection of the lane (``connections`` are opened before the first send), else
    on a new one, up to ``max_connections``. A tx without an answer is NO_REPLY (timed out) or
    CLIENT_ERROR (its connection failed)."""
    loop = asyncio.get_running_loop()
    opened = await asyncio.gather(
        *(_open_http(lane) for _ in range(connections)), return_exceptions=True
    )
    idle = [c for c in opened if isinstance(c, HttpConnection)]
    every = list(idle)
    rec.connections += len(every)
    # Requests take connections in the order they were planned (FIFO), so an account's txs are
    # written in nonce order even when an earlier one waits for a connection being opened.
    waiting: deque[asyncio.Future[HttpConnection]] = deque()
    opening = [0]
    inflight: set[asyncio.Task[None]] = set()

    def release(c: HttpConnection) -> None:
        """``c`` is free: to the first waiting request, else back to the idle ones."""
        while waiting:
            fut = waiting.popleft()
            if not fut.done():
                fut.set_result(c)
                return
        idle.append(c)

    async def grow() -> None:
        try:
            c = await _open_http(lane)
        except (OSError, TimeoutError) as exc:
            opening[0] -= 1
            if waiting:  # the request first in line learns it (CLIENT_ERROR)
                fut = waiting.popleft()
                if not fut.done():
                    fut.set_exception(ConnectionError(f"cannot open a connection: {exc!r}"))
            return
        opening[0] -= 1
        every.append(c)
        rec.connections += 1
        release(c)

    def connection() -> asyncio.Future[HttpConnection]:
        fut: asyncio.Future[HttpConnection] = loop.create_future()
        if not waiting:
            while idle:
                c = idle.pop()
                if c.lost is None:
                    fut.set_result(c)
                    return fut
        waiting.append(fut)
        if len(every) + opening[0] < max_connections:
            opening[0] += 1
            task = loop.create_task(grow())
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        else:
            rec.connection_waits += 1
        return fut

    async def one(item: Item) -> None:
        planned = t0 + item.at_ns
        n = len(item.types)
        http: HttpConnection | None = None
        rec.sent_at(planned, time.monotonic_ns(), n)
        try:
            http = await connection()
            answer = await http.post_answer(_API + item.rest_path, item.rest_body)
            codes, committed, _ = reply_facts(_decode(answer.body), n)
            retry_after = answer.retry_after is not None
        except TimeoutError:
            codes, committed, retry_after = [NO_REPLY] * n, 0, False
        except (ConnectionError, OSError, msgspec.DecodeError):
            codes, committed, retry_after = [CLIENT_ERROR] * n, 0, False
        rec.by_path["rest_batch" if n > 1 else "rest"] += 1
        rec.finished(planned, time.monotonic_ns(), t0, item.types, codes, committed)
        if not committed:
            rec.refused(codes, retry_after)
        if http is not None:
            if http.lost is None:
                release(http)
            else:  # gone: replaced for whoever waits (it no longer counts against the cap)
                every.remove(http)
                if waiting:
                    opening[0] += 1
                    await grow()

    try:
        for item in items:
            if stop.is_set():
                break
            due = pacer.until(t0 + item.at_ns)
            if due is not None:
                await due
            task = asyncio.get_running_loop().create_task(one(item))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        if inflight:
            await asyncio.wait(set(inflight))
    finally:
        for c in every:
            c.close()


async def run_lanes(
    lanes: Sequence[LaneSpec],
    items: Sequence[Item],
    recorders: dict[str, Recorder],
    t0: int,
    stop: asyncio.Event,
    trace: SpanHook | None = None,
    rest_connections: int = 8,
    seeds: Mapping[int, bytes] | None = None,
    ws_max_inflight: int = 256,
    reply_timeout_s: float = 30.0,
    pacer: Pacer | None = None,
    key: Callable[[LaneSpec], str] = lambda ln: ln.group,
    impolite_connections: int = IMPOLITE_CONNECTIONS,
) -> None:
    """Drive every lane from ``t0`` (``time.monotonic_ns``); returns when all are answered (or
    ``stop`` is set and the in-flight ones are). Recorders are keyed by lane group. A REST lane
    keeps ``rest_connections`` keep-alive connections (its maximum concurrency), a WS lane at most
    ``ws_max_inflight`` unanswered txs and, once all is sent, waits ``reply_timeout_s`` for the
    last answers (the rest are recorded NO_REPLY), an impolite lane opens
    ``impolite_connections`` before its first send. With ``seeds``
    (account -> signing seed) a rejection re-syncs the account's nonce from the server
    (:class:`NonceKeeper`); without, the planned nonces are sent as they are. The lanes share
    one :class:`Pacer` (``pacer``, else a 1 ms one): sends are never early, at most a tick
    late. ``key``: which recorder a lane records into (its group; the loadtest keys by group
    and host to report per host too, then merges them: ``Recorder.merge``)."""
    by_lane: dict[int, list[Item]] = {ln.index: [] for ln in lanes}
    for it in items:
        by_lane[it.lane].append(it)
    nonces = NonceKeeper(seeds) if seeds is not None else None
    pacer = pacer or Pacer()
    jobs = []
    for ln in lanes:
        rec = recorders[key(ln)]
        mine = by_lane[ln.index]
        if ln.kind == "ws":
            ws_args = (nonces, ws_max_inflight, reply_timeout_s, pacer)
            jobs.append(_ws_lane(ln, mine, t0, rec, stop, *ws_args))
        elif ln.kind == "impolite":
            pool = (impolite_connections, max(impolite_connections, IMPOLITE_MAX_CONNECTIONS))
            jobs.append(_impolite_lane(ln, mine, t0, rec, stop, pacer, *pool))
        else:
            rest_args = (rest_connections, nonces, pacer)
            jobs.append(_rest_lane(ln, mine, t0, rec, trace, stop, *rest_args))
    await asyncio.gather(*jobs)


# ---- order_book freshness ----------------------------------------------------------------------


class BookWatch:
    """What one order_book subscriber saw: freshness engine→client and replica→client (ns in the
    histograms), per second of the run, and the begin_nonce chain."""

    def __init__(self) -> None:
        self.engine = Histogram()
        self.replica = Histogram()
        self.engine_per_second: list[Histogram] = []
        self.updates = 0
        self.gaps = 0

    def on_message(self, msg: dict[str, Any], now_us: int, t0_wall_us: int,
                   last: dict[str, int]) -> None:  # fmt: skip
        kind = msg.get("type", "")
        if not kind.endswith("order_book"):
            return
        book = msg["order_book"]
        ch = msg.get("channel", "")
        if kind.startswith("update/"):
            self.updates += 1
            if last.get(ch) != book["begin_nonce"]:
                self.gaps += 1
            if "engine_ts_us" in msg:
                e = max(0, now_us - msg["engine_ts_us"]) * 1000
                self.engine.record(e)
                self.replica.record(max(0, now_us - msg["replica_ts_us"]) * 1000)
                sec = max(0, (now_us - t0_wall_us) // 1_000_000)
                while len(self.engine_per_second) <= sec:
                    self.engine_per_second.append(Histogram())
                self.engine_per_second[sec].record(e)
        last[ch] = book["nonce"]

    def summary(self) -> dict[str, Any]:
        return {
            "updates": self.updates,
            "nonce_gaps": self.gaps,
            "freshness_engine_to_client_us": self.engine.summary_us(),
            "freshness_replica_to_client_us": self.replica.summary_us(),
        }


async def watch_books(
    port: int,
    markets: Sequence[int],
    stop: asyncio.Event,
    watch: BookWatch,
    t0_wall_us: int,
    ready: asyncio.Event | None = None,
    host: str = _HOST,
) -> BookWatch:
    """Subscribe to ``markets``' order_book on ``host:port`` until ``stop``; fills ``watch``."""
    last: dict[str, int] = {}
    greeted: list[bool] = []

    def on_message(data: bytes) -> None:
        if not greeted:  # {"type": "connected"}
            greeted.append(True)
            return
        watch.on_message(_decode(data), time.time_ns() // 1000, t0_wall_us, last)

    ws = await WsConnection.open(host, port, "/stream", on_message)
    try:
        for m in markets:
            ws.send_text(b'{"type": "subscribe", "channel": "order_book/%d"}' % m)
        if ready is not None:
            ready.set()
        stopped: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        gone: asyncio.Future[Any] = ws.closed
        await asyncio.wait([stopped, gone], return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
    finally:
        ws.close()
    return watch
