"""Transactions: the commands the engine executes, one NamedTuple (= one layout) each.

User transactions carry ``sig``: Lighter's 80-byte Schnorr signature (ECgFp5, Poseidon2) of
the tx's Lighter message hash (see ``_signing`` and ``raydex.codecs.signing``); public keys are 40
bytes. After ``sig`` come the ``L2TxAttributes`` a type executes, one field each (``Attr``
extras, defaulting to "not set", so the common tx without attributes is built as before):
CreateOrder and ModifyOrder the self-trade modes (6, 7), ModifyOrder the order version (8),
CancelAllOrders the market (5). SkipNonce (4) travels in ``nonce`` (``SKIP_NONCE_FLAG``).
The engine never looks at ``sig``: signatures are checked before execution, by the replica's
dry-run (and by the sequencer where it verifies too), and re-checked afterwards by the
committer's audit.

Operator commands carry no signature; only the operator's control path may submit them.

Units: prices are integer ticks (uint32, >= 1), sizes integer lots (< 2**48), USDC amounts integer
micro-USDC, times integer milliseconds since the epoch.
"""

from __future__ import annotations

from typing import Annotated, NamedTuple

from ._enums import (
    ALL_MARKETS,
    MAX_48,
    MAX_API_KEY_INDEX,
    MAX_MARKET_INDEX,
    MAX_MASTER_ACCOUNT_INDEX,
    AccountIndex,
    ApiKeyIndex,
    AttributeType,
    ClientOrderIndex,
    MarketIndex,
    Nonce,
    SelfTradeBehavior,
    SelfTradeEquality,
    TxType,
)
from ._market import (
    Decimals,
    FeePpm,
    FractionBps,
    MarketStatusFlag,
    MarketSymbol,
    MarkPrice,
    MinBaseAmount,
    MinQuoteAmount,
)
from ._wire import (
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Attr,
    Bytes20,
    Bytes32,
    Bytes40,
    Bytes65,
    Bytes80,
    Json,
    Range,
    wire,
)

TX = "tx"

Account = Annotated[AccountIndex, U64, Range(0, MAX_48)]
ApiKey = Annotated[ApiKeyIndex, U8, Range(0, MAX_API_KEY_INDEX)]
Market = Annotated[MarketIndex, U8, Range(0, MAX_MARKET_INDEX)]
Price = Annotated[int, U32, Range(1, 2**32 - 1)]
Size = Annotated[int, U64, Range(1, MAX_48)]
Flag = Annotated[int, U8, Range(0, 1)]
Millis = Annotated[int, I64, Range(0, 2**63 - 1)]
NonceF = Annotated[Nonce, I64, Range(0, 2**63 - 1)]
Usdc = Annotated[int, U64, Range(1, 2**63 - 1)]
Sig = Annotated[bytes, Bytes80]
PubKey = Annotated[bytes, Bytes40]
#: ``L2TxAttributes`` 6 and 7: what a taker meeting its own resting order does, and which
#: resting orders are its own (``SelfTradeBehavior``, ``SelfTradeEquality``; 0 = Lighter's default).
StBehavior = Annotated[
    int, U8, Range(0, int(max(SelfTradeBehavior))), Attr(int(AttributeType.SELF_TRADE_BEHAVIOR), 0)
]
StEquality = Annotated[
    int, U8, Range(0, int(max(SelfTradeEquality))), Attr(int(AttributeType.SELF_TRADE_EQUALITY), 0)
]


# ---- user transactions ------------------------------------------------------------------------


@wire(TX, TxType.CHANGE_PUB_KEY)
class ChangePubKey(NamedTuple):
    """Lighter's: set ``pub_key`` (base64 ``PubKey`` in JSON) at ``api_key_index``. ``sig`` is
    made by the NEW key (``pub_key``); ``l1_sig`` (``L1Sig``, ``0x`` + 65 bytes hex) is the
    account's L1 address's Ethereum personal-sign of ``signing.change_pub_key_message``. The
    nonce is the one of the key slot being set (a slot never used: its first nonce is 0)."""

    account_index: Account
    api_key_index: ApiKey
    pub_key: PubKey
    l1_sig: Annotated[bytes, Bytes65, Json("L1Sig")]
    expired_at: Millis
    nonce: NonceF
    sig: Sig


@wire(TX, TxType.CREATE_SUB_ACCOUNT)
class CreateSubAccount(NamedTuple):
    """Lighter's (lighter-go ``create_sub_account.go``): the master ``account_index`` (at most
    ``MAX_MASTER_ACCOUNT_INDEX``) opens a sub-account, signed by one of its API keys."""

    account_index: Annotated[AccountIndex, U64, Range(0, MAX_MASTER_ACCOUNT_INDEX)]
    api_key_index: ApiKey
    expired_at: Millis
    nonce: NonceF
    sig: Sig


#: Lighter's asset indexes (``MinAssetIndex`` 1 .. ``MaxAssetIndex`` 62; USDC is 3) and route
#: types (perps 0, spot 1): carried as sent, executed for USDC on the perps route only.
AssetIndex = Annotated[int, U8, Range(1, 62)]
Route = Annotated[int, U8, Range(0, 1)]
#: Lighter's ``MaxTransferAmount`` (2^60 - 1 micro-USDC)
Amount = Annotated[int, U64, Range(1, 2**60 - 1), Json("Amount")]


@wire(TX, TxType.TRANSFER)
class Transfer(NamedTuple):
    """Lighter's (lighter-go ``transfer.go``): ``usdc_amount`` of ``asset_index`` from this
    account's ``from_route_type`` to ``to_account_index``'s ``to_route_type``, paying
    ``usdc_fee``. ``memo`` is 32 bytes (a JSON list of byte values, as Lighter writes it);
    ``l1_sig`` the sender's L1 address's Ethereum personal-sign of Lighter's transfer text
    (``signing.transfer_message``), all zeros (JSON ``""``) when absent: a transfer between
    accounts of one master needs none, any other one does. Neither is in the signed hash."""

    account_index: Annotated[AccountIndex, U64, Range(0, MAX_48), Json("FromAccountIndex")]
    api_key_index: ApiKey
    to_account_index: Account
    asset_index: AssetIndex
    from_route_type: Route
    to_route_type: Route
    usdc_amount: Amount
    usdc_fee: Annotated[int, U64, Range(0, 2**60 - 1), Json("USDCFee")]
    memo: Annotated[bytes, Bytes32]
    l1_sig: Annotated[bytes, Bytes65, Json("L1Sig")]
    expired_at: Millis
    nonce: NonceF
    sig: Sig


@wire(TX, TxType.WITHDRAW)
class Withdraw(NamedTuple):
    """Lighter's (lighter-go ``withdraw.go``): ``usdc_amount`` of ``asset_index`` out of the
    ``route_type`` route to the account's L1 address."""

    account_index: Annotated[AccountIndex, U64, Range(0, MAX_48), Json("FromAccountIndex")]
    api_key_index: ApiKey
    asset_index: AssetIndex
    route_type: Route
    usdc_amount: Amount
    expired_at: Millis
    nonce: NonceF
    sig: Sig


@wire(TX, TxType.CREATE_ORDER)
class CreateOrder(NamedTuple):
    """Lighter's L2CreateOrder (lighter-go ``create_order.go``). ``base_amount`` 0 is Lighter's
    nil size: only a reduce-only stop-loss / take-profit takes it (the position's size when it
    fires); the engine refuses it elsewhere. ``trigger_price`` is the mark a stop-loss /
    take-profit waits for (0: none)."""

    account_index: Account
    api_key_index: ApiKey
    market_index: Market
    client_order_index: Annotated[ClientOrderIndex, U64, Range(0, MAX_48)]
    base_amount: Annotated[int, U64, Range(0, MAX_48)]
    price: Price
    is_ask: Flag
    order_type: Annotated[int, U8, Range(0, 6), Json("Type")]
    time_in_force: Annotated[int, U8, Range(0, 2)]
    reduce_only: Flag
    trigger_price: Annotated[int, U32]
    order_expiry: Annotated[int, I64, Range(-1, 2**63 - 1)]
    expired_at: Millis
    nonce: NonceF
    sig: Sig
    self_trade_behavior: StBehavior = 0
    self_trade_equality: StEquality = 0


@wire(TX, TxType.CANCEL_ORDER)
class CancelOrder(NamedTuple):
    """``index`` below FIRST_ORDER_INDEX is a client order index, else an exchange order index."""

    account_index: Account
    api_key_index: ApiKey
    market_index: Market
    # Lighter's field name; shadows tuple.index on purpose (read it as ``tx.index``)
    index: Annotated[int, U64, Range(1, 2**63 - 1)]  # type: ignore[assignment]
    expired_at: Millis
    nonce: NonceF
    sig: Sig


@wire(TX, TxType.CANCEL_ALL_ORDERS)
class CancelAllOrders(NamedTuple):
    """``time_in_force`` 0 cancels now (1 scheduled, 2 abort are Lighter's, not supported yet);
    ``cancel_market_index`` (``L2TxAttributes`` 5) limits it to one market (``ALL_MARKETS``:
    every market; another market only with ``time_in_force`` 0, as lighter-go's Validate)."""

    account_index: Account
    api_key_index: ApiKey
    time_in_force: Annotated[int, U8, Range(0, 2)]
    time: Annotated[int, I64, Range(0, 2**63 - 1)]
    expired_at: Millis
    nonce: NonceF
    sig: Sig
    cancel_market_index: Annotated[
        int,
        U8,
        Range(0, ALL_MARKETS),
        Attr(int(AttributeType.CANCEL_ALL_MARKET_INDEX), ALL_MARKETS),
    ] = ALL_MARKETS


@wire(TX, TxType.MODIFY_ORDER)
class ModifyOrder(NamedTuple):
    """``order_version`` (``L2TxAttributes`` 8, 0 = none, at most 2**48 - 1 as the SDK's signer
    bounds it): the modify applies only if it is above the order's current version, which it then
    becomes (the SDK's versioned modify)."""

    account_index: Account
    api_key_index: ApiKey
    market_index: Market
    index: Annotated[int, U64, Range(1, 2**63 - 1)]  # type: ignore[assignment]
    base_amount: Size
    price: Price
    trigger_price: Annotated[int, U32]
    expired_at: Millis
    nonce: NonceF
    sig: Sig
    self_trade_behavior: StBehavior = 0
    self_trade_equality: StEquality = 0
    order_version: Annotated[
        int, U64, Range(0, MAX_48), Attr(int(AttributeType.ORDER_VERSION), 0)
    ] = 0


@wire(TX, TxType.UPDATE_LEVERAGE)
class UpdateLeverage(NamedTuple):
    account_index: Account
    api_key_index: ApiKey
    market_index: Market
    initial_margin_fraction: Annotated[int, U16, Range(1, 10_000)]
    margin_mode: Annotated[int, U8, Range(0, 1)]
    expired_at: Millis
    nonce: NonceF
    sig: Sig


#: Most orders in one CreateGroupedOrders (lighter-go ``MaxGroupedOrderCount``).
MAX_GROUPED_ORDERS = 3
#: The JSON keys of one of its orders (lighter-go ``OrderInfo``), in its layout's order.
ORDER_INFO_KEYS = (
    "MarketIndex",
    "ClientOrderIndex",
    "BaseAmount",
    "Price",
    "IsAsk",
    "Type",
    "TimeInForce",
    "ReduceOnly",
    "TriggerPrice",
    "OrderExpiry",
)
# One order of a group, slot by slot: its fields take 0 when the group has fewer orders.
_GMarket = Annotated[MarketIndex, U8, Range(0, MAX_MARKET_INDEX)]
_GCoi = Annotated[ClientOrderIndex, U64, Range(0, MAX_48)]
_GSize = Annotated[int, U64, Range(0, MAX_48)]
_GPrice = Annotated[int, U32]
_GType = Annotated[int, U8, Range(0, 6)]
_GTif = Annotated[int, U8, Range(0, 2)]
_GExpiry = Annotated[int, I64, Range(-1, 2**63 - 1)]


@wire(TX, TxType.CREATE_GROUPED_ORDERS)
class CreateGroupedOrders(NamedTuple):
    """Lighter's L2CreateGroupedOrders (lighter-go ``create_grouped_orders.go``): 1 to 3 orders
    linked by ``grouping_type`` (:class:`GroupingType`: OTO 1, OCO 2, OTOCO 3). The layout is
    fixed: ``order_count`` orders in slots ``*_0`` .. ``*_2`` (each Lighter's ``OrderInfo``),
    the unused slots all 0. In JSON they are Lighter's ``Orders`` list (``codecs._json``), and
    :func:`grouped_orders` reads them as a list of :class:`OrderInfo`."""

    account_index: Account
    api_key_index: ApiKey
    grouping_type: Annotated[int, U8]
    order_count: Annotated[int, U8, Range(1, MAX_GROUPED_ORDERS)]
    market_index_0: _GMarket
    client_order_index_0: _GCoi
    base_amount_0: _GSize
    price_0: _GPrice
    is_ask_0: Flag
    order_type_0: _GType
    time_in_force_0: _GTif
    reduce_only_0: Flag
    trigger_price_0: _GPrice
    order_expiry_0: _GExpiry
    market_index_1: _GMarket
    client_order_index_1: _GCoi
    base_amount_1: _GSize
    price_1: _GPrice
    is_ask_1: Flag
    order_type_1: _GType
    time_in_force_1: _GTif
    reduce_only_1: Flag
    trigger_price_1: _GPrice
    order_expiry_1: _GExpiry
    market_index_2: _GMarket
    client_order_index_2: _GCoi
    base_amount_2: _GSize
    price_2: _GPrice
    is_ask_2: Flag
    order_type_2: _GType
    time_in_force_2: _GTif
    reduce_only_2: Flag
    trigger_price_2: _GPrice
    order_expiry_2: _GExpiry
    expired_at: Millis
    nonce: NonceF
    sig: Sig


@wire(TX, TxType.UPDATE_MARGIN)
class UpdateMargin(NamedTuple):
    """Lighter's (lighter-go ``update_margin.go``): move ``usdc_amount`` micro-USDC into
    (``direction`` 1, ``AddToIsolatedMargin``) or out of (0, ``RemoveFromIsolatedMargin``) the
    collateral of the account's isolated position in ``market_index``."""

    account_index: Account
    api_key_index: ApiKey
    market_index: Market
    usdc_amount: Annotated[int, U64, Range(1, 2**60 - 1), Json("USDCAmount")]
    direction: Flag
    expired_at: Millis
    nonce: NonceF
    sig: Sig


class OrderInfo(NamedTuple):
    """One order of a :class:`CreateGroupedOrders` (Lighter's ``OrderInfo``; not a layout of
    its own: a view of one slot)."""

    market_index: int
    client_order_index: int
    base_amount: int
    price: int
    is_ask: int
    order_type: int
    time_in_force: int
    reduce_only: int
    trigger_price: int
    order_expiry: int


#: Where the order slots start in :class:`CreateGroupedOrders`, and each slot's width.
GROUPED_FIRST_SLOT = 4
GROUPED_SLOT_FIELDS = len(ORDER_INFO_KEYS)


def grouped_orders(tx: CreateGroupedOrders) -> list[OrderInfo]:
    """The ``order_count`` orders of ``tx``, in order (the unused slots left out)."""
    n = max(0, min(int(tx.order_count), MAX_GROUPED_ORDERS))
    w = GROUPED_SLOT_FIELDS
    at = GROUPED_FIRST_SLOT
    return [OrderInfo._make(tx[at + i * w : at + (i + 1) * w]) for i in range(n)]


def grouped_canonical(tx: CreateGroupedOrders) -> bool:
    """The slots past ``order_count`` are all 0 (the layout's form; any other is malformed:
    Lighter's ``Orders`` list, what is signed, has no such slots)."""
    n = max(0, min(int(tx.order_count), MAX_GROUPED_ORDERS))
    start = GROUPED_FIRST_SLOT + n * GROUPED_SLOT_FIELDS
    end = GROUPED_FIRST_SLOT + MAX_GROUPED_ORDERS * GROUPED_SLOT_FIELDS
    return not any(tx[start:end])


def grouped_slots(orders: list[OrderInfo] | list[tuple[int, ...]]) -> tuple[int, ...]:
    """The slot fields of :class:`CreateGroupedOrders` holding ``orders`` (at most
    ``MAX_GROUPED_ORDERS``), the unused slots 0: what goes between ``order_count`` and
    ``expired_at``."""
    if len(orders) > MAX_GROUPED_ORDERS:
        raise ValueError(f"at most {MAX_GROUPED_ORDERS} grouped orders")
    flat: list[int] = []
    for o in orders:
        flat.extend(o)
    flat.extend([0] * (GROUPED_SLOT_FIELDS * (MAX_GROUPED_ORDERS - len(orders))))
    return tuple(flat)


# ---- operator commands (unsigned; operator control path only) ----------------------------------


@wire(TX, TxType.DEPOSIT)
class Deposit(NamedTuple):
    """Credit ``usdc_amount`` to ``account_index``, creating the account if it does not exist."""

    account_index: Account
    usdc_amount: Annotated[int, U64, Range(1, 2**63 - 1), Json("USDCAmount")]


@wire(TX, TxType.L1_DEPOSIT)
class L1Deposit(NamedTuple):
    """Credit ``usdc_amount`` to the account of ``l1_address`` (20 bytes), creating it (with the
    next free account index) if that address has none yet: Lighter's deposit from L1."""

    l1_address: Annotated[bytes, Bytes20, Json("L1Address")]
    usdc_amount: Annotated[int, U64, Range(1, 2**63 - 1), Json("USDCAmount")]


@wire(TX, TxType.REGISTER_API_KEY)
class RegisterApiKey(NamedTuple):
    """Operator (L1-style) registration of an account's API key; creates the account if needed."""

    account_index: Account
    api_key_index: ApiKey
    pub_key: PubKey


@wire(TX, TxType.CREATE_MARKET)
class CreateMarket(NamedTuple):
    """A new perpetual market. ``price_decimals + size_decimals <= 6`` (USDC decimals), so a trade's
    notional in micro-USDC is ``price * size * 10**(6 - price_decimals - size_decimals)``."""

    market_index: Market
    symbol: MarketSymbol
    price_decimals: Decimals
    size_decimals: Decimals
    min_base_amount: MinBaseAmount
    min_quote_amount: MinQuoteAmount
    maker_fee: FeePpm
    taker_fee: FeePpm
    liquidation_fee: FeePpm
    default_initial_margin_fraction: FractionBps
    min_initial_margin_fraction: FractionBps
    maintenance_margin_fraction: FractionBps
    closeout_margin_fraction: FractionBps
    #: Fat-finger band: a limit price further than this from the mark price is rejected (21733).
    max_price_deviation: FractionBps
    mark_price: MarkPrice
    status: MarketStatusFlag


@wire(TX, TxType.UPDATE_MARKET)
class UpdateMarket(NamedTuple):
    """Replace a market's mutable parameters (decimals and symbol are fixed at creation)."""

    market_index: Market
    min_base_amount: MinBaseAmount
    min_quote_amount: MinQuoteAmount
    maker_fee: FeePpm
    taker_fee: FeePpm
    liquidation_fee: FeePpm
    default_initial_margin_fraction: FractionBps
    min_initial_margin_fraction: FractionBps
    maintenance_margin_fraction: FractionBps
    closeout_margin_fraction: FractionBps
    max_price_deviation: FractionBps
    status: MarketStatusFlag


@wire(TX, TxType.SET_MARK_PRICE)
class SetMarkPrice(NamedTuple):
    """Oracle update; the engine then liquidates accounts that fell under maintenance margin."""

    market_index: Market
    mark_price: Price


@wire(TX, TxType.APPLY_FUNDING)
class ApplyFunding(NamedTuple):
    """Settle one funding interval: longs pay ``size * mark * rate / 1e8`` to shorts (rate < 0:
    shorts pay). Rounding is in the exchange's favour; the residue goes to the insurance fund."""

    market_index: Market
    funding_rate: Annotated[int, I32]


@wire(TX, TxType.FUNDING_TICK)
class FundingTick(NamedTuple):
    """Let the engine run one market's funding clock at the block's time: sample the premium
    (at most once a minute) and settle the hour that ended (at most once an hour), as Lighter does
    (engine ``_funding``). Issued by the sequencer's funding loop; idempotent within a minute."""

    market_index: Market


@wire(TX, TxType.TIME_TICK)
class TimeTick(NamedTuple):
    """Let the engine run what is due at the block's time with no other command to carry it:
    TWAP slices and the expiry of waiting conditional orders (engine ``_triggers``). Issued by
    the sequencer's oracle loop when the engine says something is due; a no-op otherwise."""


Transaction = (
    ChangePubKey
    | CreateSubAccount
    | Transfer
    | Withdraw
    | CreateOrder
    | CancelOrder
    | CancelAllOrders
    | ModifyOrder
    | UpdateLeverage
    | CreateGroupedOrders
    | UpdateMargin
    | Deposit
    | L1Deposit
    | RegisterApiKey
    | CreateMarket
    | UpdateMarket
    | SetMarkPrice
    | ApplyFunding
    | FundingTick
    | TimeTick
)
UserTransaction = (
    ChangePubKey
    | CreateSubAccount
    | Transfer
    | Withdraw
    | CreateOrder
    | CancelOrder
    | CancelAllOrders
    | ModifyOrder
    | UpdateLeverage
    | CreateGroupedOrders
    | UpdateMargin
)
