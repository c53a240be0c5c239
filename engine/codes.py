"""The engine's result codes and order/status values as plain ``int`` constants.

One source: every value here is *derived by name* from ``raydex.codecs`` (``ResultCode``,
``OrderStatus``, ``OrderType``, ``TimeInForce``, ``SelfTradeBehavior``, ``SelfTradeEquality``,
``ALL_MARKETS``), never written as a literal. The engine's hot path
returns and compares these plain ints because an ``IntEnum`` member costs an attribute lookup per
use and a plain module constant does not (``Final``: a mypyc build binds each once); an
``IntEnum`` member compares equal to its int, so callers may compare a returned code with
``ResultCode.X`` directly. ``tests/unit/test_engine_codes.py`` ties every constant here to the
enum member of the same name.
"""

from __future__ import annotations

from typing import Final

from raydex.codecs import (
    ALL_MARKETS as _ALL_MARKETS,
)
from raydex.codecs import (
    GroupingType,
    OrderStatus,
    OrderType,
    ResultCode,
    SelfTradeBehavior,
    SelfTradeEquality,
    TimeInForce,
    TriggerStatus,
)

__all__ = [
    "ACCOUNT_NOT_FOUND",
    "CANCELED_CHILD",
    "CANCELED_MARGIN_NOT_ALLOWED",
    "CANCELED_OCO",
    "DUPLICATE_CLIENT_ORDER_INDEX",
    "GROUP_MARKET_MISMATCH",
    "INVALID_GROUPING_TYPE",
    "INVALID_GROUP_BASE_AMOUNT",
    "INVALID_GROUP_SIDE",
    "INVALID_GROUP_SIZE",
    "INVALID_REDUCE_ONLY",
    "INVALID_TRIGGER_PRICE",
    "IN_PROGRESS",
    "OCO",
    "OTO",
    "OTOCO",
    "PENDING",
    "STOP_LOSS",
    "STOP_LOSS_LIMIT",
    "TAKE_PROFIT",
    "TAKE_PROFIT_LIMIT",
    "TRIGGER_MARK_PRICE",
    "TRIGGER_NA",
    "TRIGGER_PARENT_ORDER",
    "TRIGGER_READY",
    "TRIGGER_TWAP",
    "TWAP",
    "TWAP_SUB",
    "ACTIVE_LIMIT",
    "ALL_MARKETS",
    "API_KEY_NOT_FOUND",
    "BELOW_MIN_AMOUNT",
    "CANCELED",
    "CANCELED_EXPIRED",
    "CANCELED_LIQUIDATION",
    "CANCELED_NOT_ENOUGH_LIQUIDITY",
    "CANCELED_POST_ONLY",
    "CANCELED_REDUCE_ONLY",
    "CANCELED_SELF_TRADE",
    "CANCELED_TOO_MUCH_SLIPPAGE",
    "CLIENT_ORDER_INDEX_EXISTS",
    "FAT_FINGER_PRICE",
    "FEATURE_NOT_SUPPORTED",
    "FILLED",
    "GTT",
    "INSUFFICIENT_BALANCE",
    "INVALID_AMOUNT",
    "INVALID_API_KEY_INDEX",
    "INVALID_L1_SIGNATURE",
    "INVALID_CLIENT_ORDER_INDEX",
    "INVALID_EXPIRY",
    "INVALID_LEVERAGE",
    "INVALID_MARKET_PARAMS",
    "INVALID_NONCE",
    "INVALID_ORDER_TYPE",
    "INVALID_PARAM",
    "INVALID_PRICE",
    "INVALID_PUBLIC_KEY",
    "INVALID_SIZE",
    "INVALID_TIME_IN_FORCE",
    "IOC",
    "LIMIT",
    "MARGIN_MODE_LOCKED",
    "MARKET",
    "MARKET_EXISTS",
    "MARKET_NOT_ACTIVE",
    "MARKET_NOT_FOUND",
    "NOT_ACTIVE_LIMIT_ORDER",
    "NOT_ENOUGH_MARGIN",
    "NO_ISOLATED_POSITION",
    "OK",
    "POST_ONLY",
    "POST_ONLY_WOULD_CROSS",
    "REDUCE_ONLY_INCREASES_POSITION",
    "SELF_TRANSFER",
    "STALE_ORDER_VERSION",
    "ST_CANCEL_BOTH",
    "ST_EXPIRE_MAKER",
    "ST_EXPIRE_TAKER",
    "ST_MASTER_ACCOUNT",
    "ST_REDUCE",
    "TOO_MANY_ORDERS",
    "TOO_MANY_SUB_ACCOUNTS",
    "TX_EXPIRED",
    "UNSUPPORTED_TX_TYPE",
]

_R = ResultCode
_S = OrderStatus

# ---- result codes (ResultCode) ----------------------------------------------------------------
OK: Final[int] = _R.OK.value
INVALID_PARAM: Final[int] = _R.INVALID_PARAM.value
INVALID_NONCE: Final[int] = _R.INVALID_NONCE.value
API_KEY_NOT_FOUND: Final[int] = _R.API_KEY_NOT_FOUND.value
INVALID_PUBLIC_KEY: Final[int] = _R.INVALID_PUBLIC_KEY.value
NOT_ACTIVE_LIMIT_ORDER: Final[int] = _R.NOT_ACTIVE_LIMIT_ORDER.value
INVALID_EXPIRY: Final[int] = _R.INVALID_EXPIRY.value
CLIENT_ORDER_INDEX_EXISTS: Final[int] = _R.CLIENT_ORDER_INDEX_EXISTS.value
REDUCE_ONLY_INCREASES_POSITION: Final[int] = _R.REDUCE_ONLY_INCREASES_POSITION.value
FAT_FINGER_PRICE: Final[int] = _R.FAT_FINGER_PRICE.value
NOT_ENOUGH_MARGIN: Final[int] = _R.NOT_ENOUGH_MARGIN.value
ACCOUNT_NOT_FOUND: Final[int] = _R.ACCOUNT_NOT_FOUND.value
MARKET_NOT_FOUND: Final[int] = _R.MARKET_NOT_FOUND.value
MARKET_EXISTS: Final[int] = _R.MARKET_EXISTS.value
MARKET_NOT_ACTIVE: Final[int] = _R.MARKET_NOT_ACTIVE.value
INVALID_PRICE: Final[int] = _R.INVALID_PRICE.value
INVALID_SIZE: Final[int] = _R.INVALID_SIZE.value
BELOW_MIN_AMOUNT: Final[int] = _R.BELOW_MIN_AMOUNT.value
POST_ONLY_WOULD_CROSS: Final[int] = _R.POST_ONLY_WOULD_CROSS.value
INVALID_ORDER_TYPE: Final[int] = _R.INVALID_ORDER_TYPE.value
INVALID_TIME_IN_FORCE: Final[int] = _R.INVALID_TIME_IN_FORCE.value
TX_EXPIRED: Final[int] = _R.TX_EXPIRED.value
INSUFFICIENT_BALANCE: Final[int] = _R.INSUFFICIENT_BALANCE.value
INVALID_LEVERAGE: Final[int] = _R.INVALID_LEVERAGE.value
INVALID_AMOUNT: Final[int] = _R.INVALID_AMOUNT.value
INVALID_CLIENT_ORDER_INDEX: Final[int] = _R.INVALID_CLIENT_ORDER_INDEX.value
INVALID_MARKET_PARAMS: Final[int] = _R.INVALID_MARKET_PARAMS.value
SELF_TRANSFER: Final[int] = _R.SELF_TRANSFER.value
INVALID_API_KEY_INDEX: Final[int] = _R.INVALID_API_KEY_INDEX.value
UNSUPPORTED_TX_TYPE: Final[int] = _R.UNSUPPORTED_TX_TYPE.value
TOO_MANY_ORDERS: Final[int] = _R.TOO_MANY_ORDERS.value
STALE_ORDER_VERSION: Final[int] = _R.STALE_ORDER_VERSION.value
INVALID_TRIGGER_PRICE: Final[int] = _R.INVALID_TRIGGER_PRICE.value
INVALID_GROUPING_TYPE: Final[int] = _R.INVALID_GROUPING_TYPE.value
INVALID_GROUP_SIZE: Final[int] = _R.INVALID_GROUP_SIZE.value
GROUP_MARKET_MISMATCH: Final[int] = _R.GROUP_MARKET_MISMATCH.value
INVALID_GROUP_BASE_AMOUNT: Final[int] = _R.INVALID_GROUP_BASE_AMOUNT.value
INVALID_GROUP_SIDE: Final[int] = _R.INVALID_GROUP_SIDE.value
DUPLICATE_CLIENT_ORDER_INDEX: Final[int] = _R.DUPLICATE_CLIENT_ORDER_INDEX.value
INVALID_REDUCE_ONLY: Final[int] = _R.INVALID_REDUCE_ONLY.value
FEATURE_NOT_SUPPORTED: Final[int] = _R.FEATURE_NOT_SUPPORTED.value
MARGIN_MODE_LOCKED: Final[int] = _R.MARGIN_MODE_LOCKED.value
NO_ISOLATED_POSITION: Final[int] = _R.NO_ISOLATED_POSITION.value
TOO_MANY_SUB_ACCOUNTS: Final[int] = _R.TOO_MANY_SUB_ACCOUNTS.value
INVALID_L1_SIGNATURE: Final[int] = _R.INVALID_L1_SIGNATURE.value

# ---- order statuses (OrderStatus) ---------------------------------------------------------------
IN_PROGRESS: Final[int] = _S.IN_PROGRESS.value
PENDING: Final[int] = _S.PENDING.value
ACTIVE_LIMIT: Final[int] = _S.ACTIVE_LIMIT.value
FILLED: Final[int] = _S.FILLED.value
CANCELED: Final[int] = _S.CANCELED.value
CANCELED_POST_ONLY: Final[int] = _S.CANCELED_POST_ONLY.value
CANCELED_REDUCE_ONLY: Final[int] = _S.CANCELED_REDUCE_ONLY.value
CANCELED_TOO_MUCH_SLIPPAGE: Final[int] = _S.CANCELED_TOO_MUCH_SLIPPAGE.value
CANCELED_NOT_ENOUGH_LIQUIDITY: Final[int] = _S.CANCELED_NOT_ENOUGH_LIQUIDITY.value
CANCELED_SELF_TRADE: Final[int] = _S.CANCELED_SELF_TRADE.value
CANCELED_EXPIRED: Final[int] = _S.CANCELED_EXPIRED.value
CANCELED_LIQUIDATION: Final[int] = _S.CANCELED_LIQUIDATION.value
CANCELED_MARGIN_NOT_ALLOWED: Final[int] = _S.CANCELED_MARGIN_NOT_ALLOWED.value
CANCELED_OCO: Final[int] = _S.CANCELED_OCO.value
CANCELED_CHILD: Final[int] = _S.CANCELED_CHILD.value

# ---- order types and times in force (OrderType, TimeInForce) -----------------------------------
LIMIT: Final[int] = OrderType.LIMIT.value
MARKET: Final[int] = OrderType.MARKET.value
STOP_LOSS: Final[int] = OrderType.STOP_LOSS.value
STOP_LOSS_LIMIT: Final[int] = OrderType.STOP_LOSS_LIMIT.value
TAKE_PROFIT: Final[int] = OrderType.TAKE_PROFIT.value
TAKE_PROFIT_LIMIT: Final[int] = OrderType.TAKE_PROFIT_LIMIT.value
TWAP: Final[int] = OrderType.TWAP.value
TWAP_SUB: Final[int] = OrderType.TWAP_SUB.value
IOC: Final[int] = TimeInForce.IMMEDIATE_OR_CANCEL.value
GTT: Final[int] = TimeInForce.GOOD_TILL_TIME.value
POST_ONLY: Final[int] = TimeInForce.POST_ONLY.value

# ---- self-trade modes (SelfTradeBehavior, SelfTradeEquality), cancel-all's every market ------
ST_EXPIRE_MAKER: Final[int] = SelfTradeBehavior.EXPIRE_MAKER.value
ST_EXPIRE_TAKER: Final[int] = SelfTradeBehavior.EXPIRE_TAKER.value
ST_CANCEL_BOTH: Final[int] = SelfTradeBehavior.CANCEL_BOTH.value
ST_REDUCE: Final[int] = SelfTradeBehavior.REDUCE.value
ST_MASTER_ACCOUNT: Final[int] = SelfTradeEquality.MASTER_ACCOUNT_INDEX.value
ALL_MARKETS: Final[int] = _ALL_MARKETS

# ---- conditional orders (TriggerStatus, GroupingType) -------------------------------------------
TRIGGER_NA: Final[int] = TriggerStatus.NA.value
TRIGGER_READY: Final[int] = TriggerStatus.READY.value
TRIGGER_MARK_PRICE: Final[int] = TriggerStatus.MARK_PRICE.value
TRIGGER_TWAP: Final[int] = TriggerStatus.TWAP.value
TRIGGER_PARENT_ORDER: Final[int] = TriggerStatus.PARENT_ORDER.value
OTO: Final[int] = GroupingType.ONE_TRIGGERS_THE_OTHER.value
OCO: Final[int] = GroupingType.ONE_CANCELS_THE_OTHER.value
OTOCO: Final[int] = GroupingType.ONE_TRIGGERS_A_ONE_CANCELS_THE_OTHER.value
