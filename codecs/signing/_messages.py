"""What Lighter signs: the message hash ``hm`` of each tx type, auth tokens, L1 (Ethereum) texts.

The message of a tx is a list of GF(p) elements: ``[chain_id, tx_type, Nonce, ExpiredAt]``
followed by the type's fields in the order of lighter-go's ``types/txtypes/*.go`` (``TX_FIELDS``,
keys as in the tx's JSON, PascalCase). Field kinds:

- ``int``: the value as Go's ``GoldilocksField(x)`` takes it: a negative value is its 64-bit two's
  complement (``x & (2^64 - 1)``), which the field then reduces mod p;
- ``split``: an amount as two elements, ``x & 0xFFFFFFFF`` then ``x >> 32`` on the 64-bit two's
  complement (Go's ``uint64(x)``; Transfer and Withdraw amounts);
- ``split_signed``: the same with an arithmetic shift (Go's ``int64 >> 32``; UpdateMargin's
  ``USDCAmount``);
- ``pubkey``: 40 bytes (base64 in JSON) as five 64-bit little-endian limbs;
- ``orders``: CreateGroupedOrders' orders, each hashed to four elements (``hash_no_pad`` of its
  ten fields), chained with ``two_to_one`` (4 + 4 -> 4), the four elements appended.

``hm = H(message)``, H = Poseidon2 ``HashToQuinticExtension``. With ``L2TxAttributes`` that are
not all "not set" (each type has a nil value, ``ATTRIBUTE_NIL``: such entries are skipped), the
set ones are sorted by type, written as (type, value) pairs, zero-padded to 4 pairs, hashed, and
``hm = H(H(message) || H(attributes))``. Lighter's tx hash is ``hm`` as 80 hex characters.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from ._field import Fp5, to_bytes

#: A backend's ``hash_no_pad(elements, n_out)`` (pure or C; both give the same results).
HashNoPad = Callable[[Sequence[int], int], list[int]]

U64: Final = (1 << 64) - 1

# Attribute types (lighter-go tx_attributes.go; 8 = ModifyOrder's order version, newer SDK).
ATTR_INTEGRATOR_ACCOUNT_INDEX: Final = 1
ATTR_INTEGRATOR_TAKER_FEE: Final = 2
ATTR_INTEGRATOR_MAKER_FEE: Final = 3
ATTR_SKIP_NONCE: Final = 4
ATTR_CANCEL_ALL_MARKET_INDEX: Final = 5
ATTR_SELF_TRADE_BEHAVIOR: Final = 6
ATTR_SELF_TRADE_EQUALITY: Final = 7
ATTR_ORDER_VERSION: Final = 8
#: The "not set" value of each attribute type: an entry with it is left out of the hash.
ATTRIBUTE_NIL: Final[Mapping[int, int]] = {1: 0, 2: 0, 3: 0, 4: 0, 5: 255, 6: 0, 7: 0, 8: 0}
MAX_ATTRIBUTES: Final = 4

_ORDER: Final = (
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

#: tx type -> (field name, kind) after ``[chain_id, tx_type, Nonce, ExpiredAt]``.
TX_FIELDS: Final[Mapping[int, tuple[tuple[str, str], ...]]] = {
    8: (("AccountIndex", "int"), ("ApiKeyIndex", "int"), ("PubKey", "pubkey")),
    9: (("AccountIndex", "int"), ("ApiKeyIndex", "int")),
    10: (
        ("AccountIndex", "int"),
        ("ApiKeyIndex", "int"),
        ("OperatorFee", "int"),
        ("InitialTotalShares", "int"),
        ("MinOperatorShareRate", "int"),
    ),
    11: (
        ("AccountIndex", "int"),
        ("ApiKeyIndex", "int"),
        ("PublicPoolIndex", "int"),
        ("Status", "int"),
        ("OperatorFee", "int"),
        ("MinOperatorShareRate", "int"),
    ),
    12: (
        ("FromAccountIndex", "int"),
        ("ApiKeyIndex", "int"),
        ("ToAccountIndex", "int"),
        ("AssetIndex", "int"),
        ("FromRouteType", "int"),
        ("ToRouteType", "int"),
        ("Amount", "split"),
        ("USDCFee", "split"),
    ),
    13: (
        ("FromAccountIndex", "int"),
        ("ApiKeyIndex", "int"),
        ("AssetIndex", "int"),
        ("RouteType", "int"),
        ("Amount", "split"),
    ),
    14: (("AccountIndex", "int"), ("ApiKeyIndex", "int"), *((f, "int") for f in _ORDER)),
    15: (("AccountIndex", "int"), ("ApiKeyIndex", "int"), ("MarketIndex", "int"), ("Index", "int")),
    16: (
        ("AccountIndex", "int"),
        ("ApiKeyIndex", "int"),
        ("TimeInForce", "int"),
        ("Time", "int"),
    ),
    17: (
        ("AccountIndex", "int"),
        ("ApiKeyIndex", "int"),
        ("MarketIndex", "int"),
        ("Index", "int"),
        ("BaseAmount", "int"),
        ("Price", "int"),
        ("TriggerPrice", "int"),
    ),
    18: (
        ("AccountIndex", "int"),
        ("ApiKeyIndex", "int"),
        ("PublicPoolIndex", "int"),
        ("ShareAmount", "int"),
    ),
    19: (
        ("AccountIndex", "int"),
        ("ApiKeyIndex", "int"),
        ("PublicPoolIndex", "int"),
        ("ShareAmount", "int"),
    ),
    20: (
        ("AccountIndex", "int"),
        ("ApiKeyIndex", "int"),
        ("MarketIndex", "int"),
        ("InitialMarginFraction", "int"),
        ("MarginMode", "int"),
    ),
    28: (
        ("AccountIndex", "int"),
        ("ApiKeyIndex", "int"),
        ("GroupingType", "int"),
        ("Orders", "orders"),
    ),
    29: (
        ("AccountIndex", "int"),
        ("ApiKeyIndex", "int"),
        ("MarketIndex", "int"),
        ("USDCAmount", "split_signed"),
        ("Direction", "int"),
    ),
    35: (
        ("AccountIndex", "int"),
        ("ApiKeyIndex", "int"),
        ("StakingPoolIndex", "int"),
        ("ShareAmount", "int"),
    ),
    36: (
        ("AccountIndex", "int"),
        ("ApiKeyIndex", "int"),
        ("StakingPoolIndex", "int"),
        ("ShareAmount", "int"),
    ),
    41: (("AccountIndex", "int"), ("ApiKeyIndex", "int"), ("AccountTradingMode", "int")),
    42: (
        ("AccountIndex", "int"),
        ("ApiKeyIndex", "int"),
        ("AssetIndex", "int"),
        ("AssetMarginMode", "int"),
    ),
    45: (
        ("AccountIndex", "int"),
        ("ApiKeyIndex", "int"),
        ("IntegratorAccountIndex", "int"),
        ("MaxPerpsTakerFee", "int"),
        ("MaxPerpsMakerFee", "int"),
        ("MaxSpotTakerFee", "int"),
        ("MaxSpotMakerFee", "int"),
        ("ApprovalExpiry", "int"),
    ),
}


def _int(info: Mapping[str, Any], name: str) -> int:
    v = info[name]
    if type(v) is not int:  # bool is refused: Lighter's JSON has numbers here
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{name}: needs an integer, got {v!r}")
        v = int(v)  # an IntEnum (OrderType.LIMIT, ...) is its number
    return v


def _pubkey_limbs(v: Any) -> list[int]:
    raw = base64.b64decode(v, validate=True) if isinstance(v, str) else bytes(v)
    if len(raw) != 40:
        raise ValueError(f"PubKey: needs 40 bytes, got {len(raw)}")
    return [int.from_bytes(raw[i : i + 8], "little") for i in range(0, 40, 8)]


def _quintic(h: HashNoPad, elements: Iterable[int]) -> Fp5:
    a, b, c, d, e = h(list(elements), 5)
    return (a, b, c, d, e)


def _orders_digest(h: HashNoPad, orders: Any) -> list[int]:
    if not isinstance(orders, Sequence) or not orders:
        raise ValueError("Orders: needs a non-empty list")
    acc: list[int] = []
    for i, order in enumerate(orders):
        one = h([_int(order, f) & U64 for f in _ORDER], 4)
        acc = one if i == 0 else h([*acc, *one], 4)
    return acc


def message_elements(
    h: HashNoPad, tx_type: int, info: Mapping[str, Any], chain_id: int
) -> list[int]:
    """The GF(p) elements Lighter hashes for this tx (before attributes). Raises ``KeyError``
    for a missing field or an unknown tx type, ``ValueError`` for a malformed one."""
    out = [chain_id, tx_type, _int(info, "Nonce") & U64, _int(info, "ExpiredAt") & U64]
    for name, kind in TX_FIELDS[tx_type]:
        if kind == "int":
            out.append(_int(info, name) & U64)
        elif kind == "split":
            v = _int(info, name) & U64
            out += [v & 0xFFFFFFFF, v >> 32]
        elif kind == "split_signed":
            v = _int(info, name)
            out += [v & 0xFFFFFFFF, (v >> 32) & U64]
        elif kind == "pubkey":
            out += _pubkey_limbs(info[name])
        else:  # orders
            out += _orders_digest(h, info[name])
    return out


def normalized_attributes(attrs: Mapping[Any, Any] | None) -> list[tuple[int, int]]:
    """The set attributes as sorted (type, value) pairs (nil values left out). Raises
    ``ValueError`` for an unknown type, a non-integer value or more than 4 set attributes."""
    if not attrs:
        return []
    pairs = []
    for key, value in attrs.items():
        t = int(key)
        if t not in ATTRIBUTE_NIL or type(value) is not int:
            raise ValueError(f"L2TxAttributes: bad entry {key!r}: {value!r}")
        if value != ATTRIBUTE_NIL[t]:
            pairs.append((t, value))
    if len(pairs) > MAX_ATTRIBUTES:
        raise ValueError(f"L2TxAttributes: at most {MAX_ATTRIBUTES} set attributes")
    return sorted(pairs)


def message_hash(h: HashNoPad, tx_type: int, info: Mapping[str, Any], chain_id: int) -> bytes:
    """``hm`` (40 bytes) of a tx given as its Lighter JSON object (PascalCase keys; ``Sig``,
    ``L1Sig`` and unknown keys are ignored here)."""
    hm = _quintic(h, message_elements(h, tx_type, info, chain_id))
    return to_bytes(aggregate_attributes(h, hm, info.get("L2TxAttributes")))


def aggregate_attributes(h: HashNoPad, hm: Fp5, attrs: Mapping[Any, Any] | None) -> Fp5:
    pairs = normalized_attributes(attrs)
    if not pairs:
        return hm
    flat = [x & U64 for pair in pairs for x in pair]
    flat += [0] * (2 * MAX_ATTRIBUTES - len(flat))
    return _quintic(h, (*hm, *_quintic(h, flat)))


def tx_hash(hm: bytes) -> str:
    """Lighter's tx hash: ``hm`` in lowercase hex, 80 characters."""
    return hm.hex()


# --- auth tokens -------------------------------------------------------------------------------


def auth_token_message(deadline: int, account_index: int, api_key_index: int) -> str:
    """``"{deadline}:{account}:{api_key_index}"``, deadline in Unix seconds."""
    return f"{deadline}:{account_index}:{api_key_index}"


def auth_token_hash(h: HashNoPad, message: str) -> bytes:
    """``hm`` of an auth token message: its UTF-8 bytes in 8-byte little-endian chunks (the last
    zero-padded), each one field element, hashed to GF(p^5)."""
    raw = message.encode()
    raw += b"\0" * (-len(raw) % 8)
    elems = [int.from_bytes(raw[i : i + 8], "little") for i in range(0, len(raw), 8)]
    return to_bytes(_quintic(h, elems))


# --- L1 (Ethereum personal_sign) texts ---------------------------------------------------------


def _hex16(v: int) -> str:
    return f"0x{v & U64:016x}"


def change_pub_key_message(
    pub_key: bytes, nonce: int, account_index: int, api_key_index: int
) -> str:
    """The text an account's L1 key signs to register ``pub_key`` (lighter-go
    ``TemplateChangePubKey``)."""
    return (
        f"Register Lighter Account\n\npubkey: 0x{pub_key.hex()}\nnonce: {_hex16(nonce)}\n"
        f"account index: {_hex16(account_index)}\napi key index: {_hex16(api_key_index)}\n"
        "Only sign this message for a trusted client!"
    )


def transfer_message(info: Mapping[str, Any], chain_id: int) -> str:
    """The text the L1 key signs for a Transfer to another master account (lighter-go
    ``TemplateTransfer``); ``Memo`` is the tx's 32-byte memo (a JSON list of byte values)."""
    memo = bytes(info["Memo"]).hex()
    return (
        f"Transfer\n\nnonce: {_hex16(_int(info, 'Nonce'))}\n"
        f"from: {_hex16(_int(info, 'FromAccountIndex'))} "
        f"(route {_hex16(_int(info, 'FromRouteType'))})\n"
        f"api key: {_hex16(_int(info, 'ApiKeyIndex'))}\n"
        f"to: {_hex16(_int(info, 'ToAccountIndex'))} (route {_hex16(_int(info, 'ToRouteType'))})\n"
        f"asset: {_hex16(_int(info, 'AssetIndex'))}\namount: {_hex16(_int(info, 'Amount'))}\n"
        f"fee: {_hex16(_int(info, 'USDCFee'))}\nchainId: {_hex16(chain_id)}\nmemo: {memo}\n"
        "Only sign this message for a trusted client!"
    )
