"""The floors ``raydex bench engine`` (``engine.py`` here) measures the engine against.

- ``BareBook``: price-time matching and nothing else (no accounts, margin, fees or events), the
  floor the engine is compared with: the same order stream, the same data structures (per side a
  dict price -> FIFO level, a lazily-cleaned price heap and a cached best price; orders in doubly
  linked lists for O(1) cancel), minus every exchange concern.

  - ``add(order_id, is_ask, price, size) -> filled``: match against the opposite side at the
    makers' prices while the order crosses, then rest the remainder (GoodTillTime). ``order_id``
    must be new.
  - ``cancel(order_id) -> bool``: remove a resting order; False if it is not resting.
  - ``levels(is_ask, depth)``: ``[(price, size), ...]`` best first.

- ``NullBook``: the calls of the benchmark's two timed loops, doing nothing, to time the loops
  themselves.

Compiled by mypyc as the engine is (``setup.py``, ``make engine``), so the ratios compare like
with like: a compiled engine with a compiled floor, or both pure (``make pure``).
"""

from __future__ import annotations

import heapq
from heapq import heappop, heappush


class _Order:
    __slots__ = ("id", "is_ask", "level", "next", "prev", "price", "remaining")

    def __init__(self, order_id: int, is_ask: int, price: int, size: int) -> None:
        self.id = order_id
        self.is_ask = is_ask
        self.price = price
        self.remaining = size
        self.prev: _Order | None = None
        self.next: _Order | None = None
        self.level: _Level | None = None


class _Level:
    __slots__ = ("head", "price", "size", "tail")

    def __init__(self, price: int) -> None:
        self.price = price
        self.size = 0
        self.head: _Order | None = None
        self.tail: _Order | None = None


class _Side:
    __slots__ = ("best", "heap", "in_heap", "is_ask", "levels")

    def __init__(self, is_ask: int) -> None:
        self.is_ask = is_ask
        self.levels: dict[int, _Level] = {}
        self.heap: list[int] = []
        self.in_heap: set[int] = set()
        self.best = 0

    def drop(self, lvl: _Level) -> None:
        price = lvl.price
        del self.levels[price]
        if price == self.best:
            heap = self.heap
            levels = self.levels
            sign = 1 if self.is_ask else -1
            while heap:
                p = heap[0] * sign
                if p in levels:
                    self.best = p
                    return
                heappop(heap)
                self.in_heap.discard(p)
            self.best = 0


class BareBook:
    """A single-market price-time order book (see the module docstring)."""

    __slots__ = ("_asks", "_bids", "_orders")

    def __init__(self) -> None:
        self._bids = _Side(0)
        self._asks = _Side(1)
        self._orders: dict[int, _Order] = {}

    def add(self, order_id: int, is_ask: int, price: int, size: int) -> int:
        opp = self._bids if is_ask else self._asks
        remaining = size
        best = opp.best
        if best and (best >= price if is_ask else best <= price):
            orders = self._orders
            levels = opp.levels
            while remaining:
                best = opp.best
                if not best or (best < price if is_ask else best > price):
                    break
                lvl = levels[best]
                o = lvl.head
                while o is not None:
                    q = remaining if remaining < o.remaining else o.remaining
                    remaining -= q
                    o.remaining -= q
                    lvl.size -= q
                    nxt = o.next
                    if o.remaining == 0:
                        del orders[o.id]
                        lvl.head = nxt
                        if nxt is None:
                            lvl.tail = None
                        else:
                            nxt.prev = None
                    if not remaining:
                        break
                    o = nxt
                if lvl.head is None:
                    opp.drop(lvl)
        if remaining:
            self._rest(order_id, is_ask, price, remaining)
        return size - remaining

    def _rest(self, order_id: int, is_ask: int, price: int, size: int) -> None:
        side = self._asks if is_ask else self._bids
        lvl = side.levels.get(price)
        if lvl is None:
            lvl = side.levels[price] = _Level(price)
            if price not in side.in_heap:
                side.in_heap.add(price)
                heappush(side.heap, price if is_ask else -price)
            best = side.best
            if best == 0 or (price < best if is_ask else price > best):
                side.best = price
        o = _Order(order_id, is_ask, price, size)
        tail = lvl.tail
        o.prev = tail
        if tail is None:
            lvl.head = o
        else:
            tail.next = o
        lvl.tail = o
        o.level = lvl
        lvl.size += size
        self._orders[order_id] = o

    def cancel(self, order_id: int) -> bool:
        o = self._orders.pop(order_id, None)
        if o is None:
            return False
        lvl = o.level
        assert lvl is not None
        p = o.prev
        n = o.next
        if p is None:
            lvl.head = n
        else:
            p.next = n
        if n is None:
            lvl.tail = p
        else:
            n.prev = p
        lvl.size -= o.remaining
        if lvl.head is None:
            (self._asks if o.is_ask else self._bids).drop(lvl)
        return True

    def levels(self, is_ask: int, depth: int) -> list[tuple[int, int]]:
        side = self._asks if is_ask else self._bids
        pick = heapq.nsmallest if is_ask else heapq.nlargest
        return [(p, side.levels[p].size) for p in pick(depth, side.levels)]


class NullBook:
    """The calls the benchmark's two timed loops make (``BareBook.add`` / ``cancel``,
    ``Engine.execute_into`` / ``take_deltas``), doing nothing, compiled like them: ``raydex
    bench engine`` runs the same loops around these to time the loops themselves (the
    interpreted harness), through the same kind of call."""

    __slots__ = ()

    def add(self, order_id: int, is_ask: int, price: int, size: int) -> int:
        return 0

    def cancel(self, order_id: int) -> bool:
        return False

    def execute_into(self, cmd: object, now_ms: int) -> int:
        return 0

    def take_deltas(self) -> tuple[int, bytes]:
        return 0, b""
