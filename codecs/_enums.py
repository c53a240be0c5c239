"""Enumerations and identifier types shared by the engine, the codecs and the API.

Every numeric value here is on the wire: Lighter's values where Lighter has one, values in free
ranges otherwise (docs/lighter-compatibility.md lists them). Changing a value is a wire-format
change.

Hot code compares against plain ``int`` (an ``IntEnum`` member *is* an ``int``), so these enums cost
nothing on the hot path beyond a global lookup; bind them to locals in tight loops.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NewType

AccountIndex = NewType("AccountIndex", int)
ApiKeyIndex = NewType("ApiKeyIndex", int)
MarketIndex = NewType("MarketIndex", int)
OrderIndex = NewType("OrderIndex", int)
ClientOrderIndex = NewType("ClientOrderIndex", int)
Nonce = NewType("Nonce", int)

#: Exchange order indexes start here, so ``CancelOrder.index`` can name either kind: below it is a
#: client order index (1 .. 2**48-1), at or above it an exchange order index.
FIRST_ORDER_INDEX = 1 << 48
MAX_48 = (1 << 48) - 1
#: Lighter's account index ranges (lighter-go ``constants.go``; Lighter's docs: "master account
#: indices are in [0, 2^47 - 1], while subaccount indices are in [2^47, 2^48 - 2]")
MAX_MASTER_ACCOUNT_INDEX = (1 << 47) - 1
MIN_SUB_ACCOUNT_INDEX = 1 << 47
MAX_ACCOUNT_INDEX = (1 << 48) - 2
#: Sub-accounts one master may open (Lighter's limit depends on the account's tier, 4 to 64;
#: raydex has one tier and takes the highest)
MAX_SUB_ACCOUNTS = 64
#: Lighter's USDC asset index and its routes (lighter-go ``USDCAssetIndex``,
#: ``AssetRouteType_Perps`` / ``_Spot``)
USDC_ASSET_INDEX = 3
PERPS_ROUTE = 0
SPOT_ROUTE = 1
MAX_API_KEY_INDEX = 254
ALL_API_KEYS = 255
MAX_MARKET_INDEX = 254
USDC_DECIMALS = 6
#: Margin fractions and price bands are in basis points of 1/10_000.
BPS = 10_000
#: Fees are in parts per million of notional.
PPM = 1_000_000
#: Funding rates are in units of 1e-8 per funding interval.
FUNDING_RATE_SCALE = 100_000_000
#: A user tx's ``nonce`` with this bit set carries Lighter's ``L2TxAttributes`` SkipNonce (type 4,
#: value 1): the nonce proper is ``nonce & ~SKIP_NONCE_FLAG`` and must be strictly greater than
#: the key's last nonce and below ``MAX_SKIP_NONCE`` (instead of exactly last + 1). Packing the
#: attribute into the nonce keeps every tx layout (WAL, batches, snapshots) unchanged; the JSON
#: edge (``tx_from_json`` / ``tx_to_json``) and the signed message (``lighter_info``) translate it.
SKIP_NONCE_FLAG = 1 << 62
#: SkipNonce nonces are below this (lighter-go ``MaxNonce``-style bound: ccxt sends ms times).
MAX_SKIP_NONCE = (1 << 47) - 1


class TxType(IntEnum):
    """Transaction type codes; 1..29 are Lighter's, 100+ are raydex operator commands."""

    DEPOSIT = 1
    CREATE_MARKET = 3
    UPDATE_MARKET = 4
    CHANGE_PUB_KEY = 8
    CREATE_SUB_ACCOUNT = 9
    TRANSFER = 12
    WITHDRAW = 13
    CREATE_ORDER = 14
    CANCEL_ORDER = 15
    CANCEL_ALL_ORDERS = 16
    MODIFY_ORDER = 17
    UPDATE_LEVERAGE = 20
    DELEVERAGE = 23
    EXIT_POSITION = 24
    LIQUIDATE_POSITION = 26
    CREATE_GROUPED_ORDERS = 28
    UPDATE_MARGIN = 29
    # raydex operator commands (Lighter does these on L1 or in its oracle pipeline).
    SET_MARK_PRICE = 101
    APPLY_FUNDING = 102
    REGISTER_API_KEY = 103
    FUNDING_TICK = 104
    L1_DEPOSIT = 105
    TIME_TICK = 106


#: Transactions a user signs and a replica accepts over the public API.
USER_TX_TYPES = frozenset(
    {
        TxType.CHANGE_PUB_KEY,
        TxType.CREATE_SUB_ACCOUNT,
        TxType.TRANSFER,
        TxType.WITHDRAW,
        TxType.CREATE_ORDER,
        TxType.CANCEL_ORDER,
        TxType.CANCEL_ALL_ORDERS,
        TxType.MODIFY_ORDER,
        TxType.UPDATE_LEVERAGE,
        TxType.CREATE_GROUPED_ORDERS,
        TxType.UPDATE_MARGIN,
    }
)
#: Lighter's user tx types raydex does not execute -> the feature each belongs to (lighter-go
#: ``types/txtypes/constants.go``; binary options from the SDK signer's own ``GetTxType``): such a
#: tx is answered with ``FEATURE_NOT_SUPPORTED`` and a message naming the feature, never as an
#: unknown type.
UNSERVED_TX_TYPES: dict[int, str] = {
    10: "public pools (CreatePublicPool)",
    11: "public pools (UpdatePublicPool)",
    18: "public pools (MintShares)",
    19: "public pools (BurnShares)",
    33: "staking (CreateStakingPool)",
    35: "staking (StakeAssets)",
    36: "staking (UnstakeAssets)",
    40: "public pools (ForceBurnShares)",
    41: "the unified account and multi-asset collateral (UpdateAccountConfig)",
    42: "multi-asset collateral (UpdateAccountAssetConfig)",
    43: "strategy transfers (StrategyTransfer)",
    44: "market configuration by users (UpdateMarketConfig)",
    45: "integrator fees (ApproveIntegrator)",
    49: "binary options (BinaryOptionsOperatorCreateMarket)",
    50: "binary options (BinaryOptionsOperatorSettleMarket)",
    52: "binary options (BinaryOptionsOperatorUpdateMarket)",
}
#: Commands only the operator may submit (deposits, markets, oracle, funding, first API key).
OPERATOR_TX_TYPES = frozenset(
    {
        TxType.DEPOSIT,
        TxType.CREATE_MARKET,
        TxType.UPDATE_MARKET,
        TxType.SET_MARK_PRICE,
        TxType.APPLY_FUNDING,
        TxType.REGISTER_API_KEY,
        TxType.FUNDING_TICK,
        TxType.L1_DEPOSIT,
        TxType.TIME_TICK,
    }
)


class ResultCode(IntEnum):
    """One result code for every command outcome; Lighter's codes where they exist.

    Rejections are values of this enum, never exceptions. 2xxxx are Lighter's transaction codes,
    21800-21899 are raydex's own transaction codes, 20xxx request validation, 23xxx rate limits,
    30xxx WebSocket.
    """

    OK = 200
    # request validation (20xxx)
    INVALID_PARAM = 20001
    INVALID_TX_TYPE = 20002
    INVALID_TX_INFO = 20003
    BODY_TOO_LARGE = 20004
    NOT_FOUND = 20005
    # auth tokens for private reads (the replica's auth); bad keys/signatures reuse 21108/21120
    AUTH_REQUIRED = 20010
    AUTH_MALFORMED = 20011
    AUTH_EXPIRED = 20012
    AUTH_DEADLINE_TOO_FAR = 20013
    AUTH_ACCOUNT_MISMATCH = 20014
    # Lighter transaction codes (21xxx)
    INVALID_NONCE = 21104
    BATCH_NONCES_NOT_CONSECUTIVE = 21105
    API_KEY_NOT_FOUND = 21108
    INVALID_SIGNATURE = 21120
    INVALID_PUBLIC_KEY = 21136
    TOO_MANY_PENDING_TXS = 21506
    BELOW_MAINTENANCE_MARGIN = 21507
    BELOW_INITIAL_MARGIN = 21508
    BATCH_TOO_LARGE = 21514
    NOT_ACTIVE_LIMIT_ORDER = 21600
    INVALID_EXPIRY = 21711
    CLIENT_ORDER_INDEX_EXISTS = 21728
    REDUCE_ONLY_INCREASES_POSITION = 21732
    FAT_FINGER_PRICE = 21733
    NOT_ENOUGH_MARGIN = 21739
    # raydex transaction codes (21800-21899)
    ACCOUNT_NOT_FOUND = 21800
    MARKET_NOT_FOUND = 21801
    MARKET_EXISTS = 21802
    MARKET_NOT_ACTIVE = 21803
    INVALID_PRICE = 21804
    INVALID_SIZE = 21805
    BELOW_MIN_AMOUNT = 21806
    POST_ONLY_WOULD_CROSS = 21807
    INVALID_ORDER_TYPE = 21808
    INVALID_TIME_IN_FORCE = 21809
    TX_EXPIRED = 21810
    INSUFFICIENT_BALANCE = 21811
    INVALID_LEVERAGE = 21812
    INVALID_AMOUNT = 21813
    INVALID_CLIENT_ORDER_INDEX = 21814
    INVALID_MARKET_PARAMS = 21815
    NO_LIQUIDITY = 21816
    SELF_TRANSFER = 21817
    INVALID_API_KEY_INDEX = 21818
    OPERATOR_ONLY = 21819
    UNSUPPORTED_TX_TYPE = 21820
    TOO_MANY_ORDERS = 21821
    #: the sequencer did not answer (stream broken or unreachable); the tx may still execute:
    #: look it up with tx?by=hash
    SEQUENCER_UNAVAILABLE = 21822
    #: ChangePubKey: ``L1Sig`` is malformed or was not made by the account's L1 address
    INVALID_L1_SIGNATURE = 21831
    #: a Lighter feature raydex does not execute, named in the message: a tx type of
    #: ``UNSERVED_TX_TYPES``, a Transfer or Withdraw of another asset or route (spot markets and
    #: assets, multi-asset collateral), fast withdrawals, integrator fees (the ``L2TxAttributes``
    #: 1-3; every other attribute is executed)
    FEATURE_NOT_SUPPORTED = 21840
    #: UpdateLeverage: a position's margin mode changes only while it is flat with no resting
    #: orders in its market
    MARGIN_MODE_LOCKED = 21841
    #: UpdateMargin: the account has no open isolated position in that market
    NO_ISOLATED_POSITION = 21842
    #: CreateSubAccount: the master holds ``MAX_SUB_ACCOUNTS`` already
    TOO_MANY_SUB_ACCOUNTS = 21843
    #: ModifyOrder with ``L2TxAttributes`` OrderVersion (8): not above the order's current version
    STALE_ORDER_VERSION = 21850
    # conditional and grouped orders (21860-21869): lighter-go's ``Validate`` errors that have
    # no code of their own above (types/txtypes/create_order.go, create_grouped_orders.go)
    #: ``TriggerPrice`` missing on a stop-loss / take-profit, or set on a TWAP
    #: (``ErrOrderTriggerPriceInvalid``)
    INVALID_TRIGGER_PRICE = 21860
    #: ``GroupingType`` is not 1 (OTO), 2 (OCO) or 3 (OTOCO) (``ErrGroupingTypeInvalid``)
    INVALID_GROUPING_TYPE = 21861
    #: a group of the wrong size for its grouping type (``ErrOrderGroupSizeInvalid``)
    INVALID_GROUP_SIZE = 21862
    #: the orders of a group name different markets (``ErrMarketIndexMismatch``)
    GROUP_MARKET_MISMATCH = 21863
    #: OCO sizes differ, or an OTO/OTOCO child has a size (``ErrBaseAmountsNotEqual``,
    #: ``ErrBaseAmountNotNil``)
    INVALID_GROUP_BASE_AMOUNT = 21864
    #: OCO orders on different sides, or an OTO/OTOCO child on its entry's side
    #: (``ErrIsAskInvalid``)
    INVALID_GROUP_SIDE = 21865
    #: two orders of one group carry the same client order index
    #: (``ErrClientOrderIndexDuplicate``)
    DUPLICATE_CLIENT_ORDER_INDEX = 21866
    #: an OCO order that is not reduce-only (``ErrOrderReduceOnlyInvalid``)
    INVALID_REDUCE_ONLY = 21867
    # rate limits (23xxx)
    RATE_LIMITED = 23000
    # WebSocket (30xxx)
    WS_INVALID_MESSAGE = 30000
    WS_INVALID_CHANNEL = 30001
    WS_NOT_SUBSCRIBED = 30002
    WS_ALREADY_SUBSCRIBED = 30003
    WS_TOO_MANY_SUBSCRIPTIONS = 30004
    WS_TOO_MANY_CONNECTIONS = 30005
    WS_SLOW_CONSUMER = 30006


#: The codes of a user tx that changed nothing, so its nonce stays free: the engine's gates
#: (account, API key, nonce, deadline: ``engine/_engine.py``), a signature the sequencer refused,
#: and no answer from the sequencer. Every other code of a tx the sequencer executed consumed its
#: nonce (the tx is in a block, failed or not), which is why the replica answers those with code
#: 200 as Lighter does (lighter-sdk's nonce manager takes any other code for a nonce still free).
NONCE_KEPT_CODES = frozenset(
    {
        ResultCode.ACCOUNT_NOT_FOUND,
        ResultCode.API_KEY_NOT_FOUND,
        ResultCode.INVALID_NONCE,
        ResultCode.TX_EXPIRED,
        ResultCode.INVALID_SIGNATURE,
        ResultCode.SEQUENCER_UNAVAILABLE,
    }
)


class OrderType(IntEnum):
    LIMIT = 0
    MARKET = 1
    STOP_LOSS = 2
    STOP_LOSS_LIMIT = 3
    TAKE_PROFIT = 4
    TAKE_PROFIT_LIMIT = 5
    TWAP = 6
    #: Lighter's internal types (lighter-go constants.go): a TWAP's slice, a liquidation
    TWAP_SUB = 7
    LIQUIDATION = 8


class TimeInForce(IntEnum):
    IMMEDIATE_OR_CANCEL = 0
    GOOD_TILL_TIME = 1
    POST_ONLY = 2


class OrderStatus(IntEnum):
    IN_PROGRESS = 0
    PENDING = 1
    ACTIVE_LIMIT = 2
    FILLED = 3
    CANCELED = 4
    CANCELED_POST_ONLY = 5
    CANCELED_REDUCE_ONLY = 6
    CANCELED_POSITION_NOT_ALLOWED = 7
    CANCELED_MARGIN_NOT_ALLOWED = 8
    CANCELED_TOO_MUCH_SLIPPAGE = 9
    CANCELED_NOT_ENOUGH_LIQUIDITY = 10
    CANCELED_SELF_TRADE = 11
    CANCELED_EXPIRED = 12
    #: its OCO sibling (the other of a stop-loss / take-profit pair) fired or was cancelled
    CANCELED_OCO = 13
    #: a grouped child whose entry left the book (cancelled, expired) without any fill
    CANCELED_CHILD = 14
    CANCELED_LIQUIDATION = 15


class TriggerStatus(IntEnum):
    """Where a conditional order stands (Lighter's ``trigger_status``): ``NA`` for plain orders
    and grouped entries, ``PARENT_ORDER`` while a grouped child waits for its entry's first fill,
    ``MARK_PRICE`` while a stop-loss / take-profit waits for the mark, ``TWAP`` while a TWAP
    runs, ``READY`` once a trigger order fired."""

    NA = 0
    READY = 1
    MARK_PRICE = 2
    TWAP = 3
    PARENT_ORDER = 4


class GroupingType(IntEnum):
    """CreateGroupedOrders' ``GroupingType`` (lighter-go constants.go)."""

    ONE_TRIGGERS_THE_OTHER = 1
    ONE_CANCELS_THE_OTHER = 2
    ONE_TRIGGERS_A_ONE_CANCELS_THE_OTHER = 3


class SelfTradeBehavior(IntEnum):
    """What a taker meeting its own resting order does (``L2TxAttributes`` 6, lighter-go's
    ``SelfTradeBehavior*``): cancel the maker, cancel the taker, cancel both, or reduce both by
    the overlap (neither trades)."""

    EXPIRE_MAKER = 0
    EXPIRE_TAKER = 1
    CANCEL_BOTH = 2
    REDUCE = 3


class SelfTradeEquality(IntEnum):
    """Which resting orders count as the taker's own (``L2TxAttributes`` 7): its account's, or
    those of every account under the same master account."""

    ACCOUNT_INDEX = 0
    MASTER_ACCOUNT_INDEX = 1


class AttributeType(IntEnum):
    """Lighter's ``L2TxAttributes`` types (lighter-go ``tx_attributes.go``; 8, ModifyOrder's
    order version, is the newer SDK's)."""

    INTEGRATOR_ACCOUNT_INDEX = 1
    INTEGRATOR_TAKER_FEE = 2
    INTEGRATOR_MAKER_FEE = 3
    SKIP_NONCE = 4
    CANCEL_ALL_MARKET_INDEX = 5
    SELF_TRADE_BEHAVIOR = 6
    SELF_TRADE_EQUALITY = 7
    ORDER_VERSION = 8


#: ``CancelAllOrders``' market attribute when every market's orders go (lighter-go
#: ``NilMarketIndex``).
ALL_MARKETS = 255


class MarginMode(IntEnum):
    CROSS = 0
    ISOLATED = 1


class MarketStatus(IntEnum):
    INACTIVE = 0
    ACTIVE = 1
