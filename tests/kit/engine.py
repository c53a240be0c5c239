"""A small desk for readable engine scenarios: accounts with key 0 and auto-incremented nonces,
one-line order helpers, and a table runner (one row = one step and what it must leave behind).

Market 0 "ETH" by default: price_decimals 2, size_decimals 2 (so notional = price * size * 100
micro-USDC: 1 lot at 10_000 ticks = $100.00 * 0.01 = $1.00 = 1_000_000), mark 10_000.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raydex.codecs import (
    ApplyFunding,
    CancelAllOrders,
    CancelOrder,
    ChangePubKey,
    CreateGroupedOrders,
    CreateMarket,
    CreateOrder,
    Deposit,
    ModifyOrder,
    OrderInfo,
    OrderType,
    RegisterApiKey,
    ResultCode,
    SetMarkPrice,
    TimeInForce,
    TimeTick,
    Transfer,
    UpdateLeverage,
    UpdateMargin,
    Withdraw,
    grouped_slots,
    public_key_of,
)
from raydex.engine import Engine

NOW = 1_700_000_000_000
SIG = b"\x00" * 80


def valid_key(i: int) -> bytes:
    """A valid 40-byte public key (of the private scalar i): the engine refuses invalid points."""
    return public_key_of(i.to_bytes(40, "little"))


KEY = valid_key(1)
GTT = TimeInForce.GOOD_TILL_TIME
IOC = TimeInForce.IMMEDIATE_OR_CANCEL
POST_ONLY = TimeInForce.POST_ONLY
LIMIT = OrderType.LIMIT
MARKET = OrderType.MARKET
SL = OrderType.STOP_LOSS
SL_LIMIT = OrderType.STOP_LOSS_LIMIT
TP = OrderType.TAKE_PROFIT
TP_LIMIT = OrderType.TAKE_PROFIT_LIMIT
TWAP = OrderType.TWAP
OK = ResultCode.OK
#: a conditional order's default expiry in the desk's scenarios: a day after ``NOW``
DAY_MS = 86_400_000


def market(index: int = 0, **kw: Any) -> CreateMarket:
    params: dict[str, Any] = {
        "market_index": index,
        "symbol": f"M{index}",
        "price_decimals": 2,
        "size_decimals": 2,
        "min_base_amount": 1,
        "min_quote_amount": 0,
        "maker_fee": 0,
        "taker_fee": 0,
        "liquidation_fee": 0,
        "default_initial_margin_fraction": 1_000,
        "min_initial_margin_fraction": 500,
        "maintenance_margin_fraction": 500,
        "closeout_margin_fraction": 200,
        "max_price_deviation": 5_000,
        "mark_price": 10_000,
        "status": 1,
    }
    params.update(kw)
    return CreateMarket(**params)


@dataclass
class Desk:
    """An engine plus helpers; ``validate_internal_state`` runs after every command."""

    accounts: tuple[int, ...] = (1, 2, 3)
    collateral: int = 1_000_000_000_000
    markets: tuple[CreateMarket, ...] = field(default_factory=lambda: (market(),))
    now: int = NOW
    eng: Engine = field(default_factory=Engine)
    nonces: dict[tuple[int, int], int] = field(default_factory=dict)
    events: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        for m in self.markets:
            assert self.run(m) == OK
        for a in self.accounts:
            assert self.run(RegisterApiKey(a, 0, KEY)) == OK
            if self.collateral:
                assert self.run(Deposit(a, self.collateral)) == OK

    def run(self, cmd: Any) -> int:
        self.events = []
        code = self.eng.execute(cmd, self.now, self.events)
        self.eng.validate_internal_state()
        return code

    def nonce(self, account: int, key: int = 0) -> int:
        n = self.nonces.get((account, key), 0)
        self.nonces[(account, key)] = n + 1
        return n

    # ---- user txs (each consumes the next nonce of key 0) ---------------------------------------

    def order(
        self,
        account: int,
        is_ask: int,
        size: int,
        price: int,
        *,
        tif: int = GTT,
        otype: int = LIMIT,
        ro: int = 0,
        coi: int = 0,
        m: int = 0,
        expiry: int = 0,
        stb: int = 0,
        ste: int = 0,
        trigger: int = 0,
    ) -> int:
        """A CreateOrder; ``stb``/``ste``: its self-trade behaviour and equality modes
        (``L2TxAttributes`` 6 and 7)."""
        return self.run(
            CreateOrder(
                account,
                0,
                m,
                coi,
                size,
                price,
                is_ask,
                otype,
                tif,
                ro,
                trigger,
                expiry,
                self.now + 60_000,
                self.nonce(account),
                SIG,
                stb,
                ste,
            )
        )

    def trigger(
        self,
        account: int,
        otype: int,
        is_ask: int,
        size: int,
        price: int,
        trigger: int,
        *,
        tif: int | None = None,
        ro: int = 1,
        coi: int = 0,
        m: int = 0,
        expiry: int | None = None,
    ) -> int:
        """A stop-loss / take-profit (CreateOrder types 2-5), reduce-only unless ``ro=0``;
        market types are IOC, limit types GoodTillTime unless ``tif`` says otherwise."""
        if tif is None:
            tif = IOC if otype in (SL, TP) else GTT
        return self.order(
            account, is_ask, size, price, tif=tif, otype=otype, ro=ro, coi=coi, m=m,
            expiry=self.now + DAY_MS if expiry is None else expiry, trigger=trigger,
        )  # fmt: skip

    def twap(
        self, account: int, is_ask: int, size: int, price: int, minutes: int, **kw: Any
    ) -> int:
        """A TWAP of ``size`` lots no worse than ``price``, ending ``minutes`` from now."""
        return self.order(
            account, is_ask, size, price, tif=GTT, otype=TWAP,
            expiry=self.now + minutes * 60_000, **kw,
        )  # fmt: skip

    def grouped(self, account: int, grouping: int, *orders: OrderInfo) -> int:
        """CreateGroupedOrders of ``orders`` (see :func:`info`)."""
        return self.run(
            CreateGroupedOrders(
                account, 0, grouping, len(orders), *grouped_slots(list(orders)),
                self.now + 60_000, self.nonce(account), SIG,
            )  # type: ignore[call-arg]
        )  # fmt: skip

    def tick(self, ms: int = 0) -> int:
        """Advance the desk's clock by ``ms`` and run a ``TimeTick`` then."""
        self.now += ms
        return self.run(TimeTick())

    def buy(self, account: int, size: int, price: int, **kw: Any) -> int:
        return self.order(account, 0, size, price, **kw)

    def sell(self, account: int, size: int, price: int, **kw: Any) -> int:
        return self.order(account, 1, size, price, **kw)

    def cancel(self, account: int, index: int, m: int = 0) -> int:
        return self.run(
            CancelOrder(account, 0, m, index, self.now + 60_000, self.nonce(account), SIG)
        )

    def cancel_all(self, account: int, tif: int = 0, market: int = 255) -> int:
        """CancelAllOrders; ``market``: only that market's orders (``L2TxAttributes`` 5)."""
        return self.run(
            CancelAllOrders(account, 0, tif, 0, self.now + 60_000, self.nonce(account), SIG, market)
        )

    def modify(
        self,
        account: int,
        index: int,
        size: int,
        price: int,
        m: int = 0,
        trigger: int = 0,
        *,
        version: int = 0,
        stb: int = 0,
        ste: int = 0,
    ) -> int:
        """ModifyOrder; ``trigger``: a waiting stop-loss / take-profit's new trigger price,
        ``version``: its order version (``L2TxAttributes`` 8), ``stb``/``ste`` its self-trade
        modes."""
        return self.run(
            ModifyOrder(
                account,
                0,
                m,
                index,
                size,
                price,
                trigger,
                self.now + 60_000,
                self.nonce(account),
                SIG,
                stb,
                ste,
                version,
            )
        )  # fmt: skip

    def transfer(self, account: int, to: int, amount: int) -> int:
        return self.run(
            Transfer(
                account,
                0,
                to,
                3,
                0,
                0,
                amount,
                0,
                bytes(32),
                bytes(65),
                self.now + 60_000,
                self.nonce(account),
                SIG,
            )
        )

    def withdraw(self, account: int, amount: int) -> int:
        return self.run(
            Withdraw(account, 0, 3, 0, amount, self.now + 60_000, self.nonce(account), SIG)
        )

    def leverage(self, account: int, imf: int, m: int = 0, mode: int = 0) -> int:
        return self.run(
            UpdateLeverage(account, 0, m, imf, mode, self.now + 60_000, self.nonce(account), SIG)
        )

    def isolate(self, account: int, m: int = 0, imf: int = 1_000) -> int:
        """UpdateLeverage to isolated margin in market ``m`` at ``imf``."""
        return self.leverage(account, imf, m, 1)

    def margin(self, account: int, amount: int, add: bool = True, m: int = 0) -> int:
        """UpdateMargin: ``amount`` into (``add``) or out of the isolated position in ``m``."""
        return self.run(
            UpdateMargin(
                account, 0, m, amount, int(add), self.now + 60_000, self.nonce(account), SIG
            )
        )

    def change_key(self, account: int, new_key: int, pub: bytes) -> int:
        """Lighter's ChangePubKey of slot ``new_key`` (the engine does not check signatures)."""
        return self.run(
            ChangePubKey(
                account,
                new_key,
                pub,
                bytes(65),
                self.now + 60_000,
                self.nonce(account, new_key),
                SIG,
            )
        )

    # ---- operator -------------------------------------------------------------------------------

    def mark(self, price: int, m: int = 0) -> int:
        return self.run(SetMarkPrice(m, price))

    def funding(self, rate: int, m: int = 0) -> int:
        return self.run(ApplyFunding(m, rate))

    def deposit(self, account: int, amount: int) -> int:
        return self.run(Deposit(account, amount))

    # ---- reads ----------------------------------------------------------------------------------

    def bids(self, m: int = 0) -> list[tuple[int, int]]:
        return self.eng.book_levels(m, 0, 100)

    def asks(self, m: int = 0) -> list[tuple[int, int]]:
        return self.eng.book_levels(m, 1, 100)

    def size(self, account: int, m: int = 0) -> int:
        p = self.eng.position(account, m)
        return 0 if p is None else p.size

    def allocated(self, account: int, m: int = 0) -> int:
        """The collateral of ``account``'s isolated position in ``m`` (0: none or cross)."""
        p = self.eng.position(account, m)
        return 0 if p is None else p.allocated_margin

    def cash(self, account: int) -> int:
        c = self.eng.account_collateral(account)
        assert c is not None
        return c

    def last_order_index(self) -> int:
        """Exchange index of the last order this desk's last command reported."""
        idx = [e.order_index for e in self.events if type(e).__name__ == "OrderUpdated"]
        return idx[-1]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if type(e).__name__ == kind]

    def conds(self, account: int) -> list[Any]:
        """``account``'s live conditional orders (``ConditionalOrderRecord``), by index."""
        return self.eng.conditional_orders(account)

    def statuses(self) -> dict[int, tuple[str, str]]:
        """The last command's conditional-order events: order index -> (status, trigger
        status) names."""
        from raydex.codecs import OrderStatus, TriggerStatus

        return {
            e.order_index: (OrderStatus(e.status).name, TriggerStatus(e.trigger_status).name)
            for e in self.of("ConditionalOrderUpdated")
        }

    def order_statuses(self) -> dict[int, str]:
        """The last command's ``OrderUpdated`` events: order index -> last status name."""
        from raydex.codecs import OrderStatus

        return {e.order_index: OrderStatus(e.status).name for e in self.of("OrderUpdated")}


@dataclass(frozen=True)
class Step:
    """One table row: ``desk.<action>(*args, **kw)`` must return ``code`` and leave the book,
    positions and live conditional orders as given (None = not checked)."""

    action: str
    args: tuple[Any, ...]
    code: int = OK
    bids: list[tuple[int, int]] | None = None
    asks: list[tuple[int, int]] | None = None
    sizes: dict[int, int] | None = None
    kw: dict[str, Any] = field(default_factory=dict)
    #: account -> how many live conditional orders it has after the step
    waiting: dict[int, int] | None = None


def info(
    is_ask: int,
    size: int,
    price: int,
    otype: int = LIMIT,
    *,
    tif: int | None = None,
    ro: int = 0,
    trigger: int = 0,
    expiry: int = 0,
    coi: int = 0,
    m: int = 0,
) -> OrderInfo:
    """One order of a group (``OrderInfo``); ``tif`` defaults to IOC for market orders and
    market stop-loss / take-profit, GoodTillTime otherwise."""
    if tif is None:
        tif = IOC if otype in (MARKET, SL, TP) else GTT
    return OrderInfo(m, coi, size, price, is_ask, otype, tif, ro, trigger, expiry)


def play(desk: Desk, steps: list[Step]) -> None:
    for i, s in enumerate(steps):
        code = getattr(desk, s.action)(*s.args, **s.kw)
        where = f"step {i} {s.action}{s.args}"
        assert code == s.code, f"{where}: code {code} != {s.code}"
        if s.bids is not None:
            assert desk.bids() == s.bids, f"{where}: bids {desk.bids()}"
        if s.asks is not None:
            assert desk.asks() == s.asks, f"{where}: asks {desk.asks()}"
        if s.sizes is not None:
            got = {a: desk.size(a) for a in s.sizes}
            assert got == s.sizes, f"{where}: sizes {got}"
        if s.waiting is not None:
            got = {a: len(desk.conds(a)) for a in s.waiting}
            assert got == s.waiting, f"{where}: conditional orders {got}"
