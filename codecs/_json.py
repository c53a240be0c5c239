"""Lighter JSON at the API edge: ``tx_info`` objects <-> transactions, ticks <-> decimal strings.

``tx_from_json(tx_type, tx_info)`` builds a transaction from Lighter's PascalCase ``tx_info`` (a
JSON string, bytes, or an already-parsed dict). The key of every field is its ``json_name`` in the
``@wire`` declaration. Rules, all enforced with CodecError naming the type and the key:

- the tx type must be registered (else CodecError with ``code=INVALID_TX_TYPE``, or
  ``FEATURE_NOT_SUPPORTED`` naming the feature for a Lighter type raydex does not execute,
  ``UNSERVED_TX_TYPES``; every other rejection carries ``INVALID_TX_INFO``);
- exactly the declared keys: none missing, none extra;
- integers are JSON integers (``bool``, floats and numeric strings are rejected), except that
  0/1 flag fields (``Range(0, 1)``) also take ``true``/``false``;
- every integer is inside its ``Range`` extra and its C type;
- ``Sig`` (and ChangePubKey's ``PubKey``, as Lighter writes it) is base64 of exactly its length;
  other bytes fields (``PubKey`` of RegisterApiKey, ``L1Sig``, ``L1Address``) are hex of their
  exact length, ``0x`` prefix optional (``L1Sig`` and ``L1Address`` go out with it); text
  fields are ASCII strings that fit their width;
- ``L2TxAttributes`` (Lighter's, on user txs) may be present: ``null``, ``{}`` or only "not set"
  values (``signing.ATTRIBUTE_NIL``) sign exactly like no attributes. The set ones are checked as
  lighter-go's ``L2TxAttributes.Validate`` checks them (a known type, an integer in its type's
  range, at most 4 set, integrator fees only with the integrator account, no self-trade mode
  beside integrator fees, no Reduce (6 = 3) with MasterAccountIndex (7 = 1)), each with
  ``INVALID_TX_INFO``; then integrator fees (1-3), which raydex does not execute, with
  ``FEATURE_NOT_SUPPORTED`` (21840), and an attribute the tx type does not take (one its layout
  has no field for: cancel-all market 5 on CancelAllOrders, self-trade modes 6-7 on CreateOrder
  and ModifyOrder, order version 8 on ModifyOrder) with ``INVALID_TX_INFO``. SkipNonce (4) sets
  ``SKIP_NONCE_FLAG`` in the tx's ``nonce`` (see ``_enums``), the others their fields
  (``_wire.Attr``); ``tx_to_json`` writes the set ones back as ``"L2TxAttributes": {"6": 2,
  ...}``. A ``Nonce`` at or above ``SKIP_NONCE_FLAG`` is refused (``INVALID_TX_INFO``);
- CreateGroupedOrders (28) carries Lighter's ``Orders``: a list of 1 to 3 objects with exactly
  the ten ``OrderInfo`` keys (``_tx.ORDER_INFO_KEYS``), each checked like a field of its slot
  (errors name ``Orders[i].Key``); ``tx_to_json`` writes the list back (the layout's
  ``OrderCount`` and unused slots are not Lighter's keys);
- Transfer and Withdraw are Lighter's forms, every field carried (asset, routes, fee, memo,
  L1 signature; what raydex executes of them is the engine's and the dry-run's decision):
  Transfer's ``Memo`` is a list of 32 byte values (Go's ``[32]byte``), its ``L1Sig`` ``""`` for
  none (all zeros inside) or ``0x`` + 65 bytes hex;

``tx_to_json(tx)`` is the inverse (ints, base64 ``Sig``, lower-case hex without ``0x``), so
``tx_from_json(t, tx_to_json(x)) == x`` for every valid ``x``.

Decimal strings (no float, no Decimal): ``ticks_to_str(332746, 2) == "3327.46"`` and back with
``str_to_ticks``; the same functions serve sizes (lots, size decimals) and micro-USDC (6 decimals).

Cost: one msgspec parse, then a check per field (most of ``tx_from_json``'s time).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import msgspec

from . import signing
from ._enums import (
    MAX_48,
    PPM,
    SKIP_NONCE_FLAG,
    UNSERVED_TX_TYPES,
    USDC_DECIMALS,
    AttributeType,
    ResultCode,
    SelfTradeBehavior,
    SelfTradeEquality,
)
from ._errors import CodecError
from ._hot import HOT_BY_TAG, HotCodec, codec_of, field_format, int_bounds
from ._tx import (
    GROUPED_FIRST_SLOT,
    GROUPED_SLOT_FIELDS,
    MAX_GROUPED_ORDERS,
    ORDER_INFO_KEYS,
    TX,
    CreateGroupedOrders,
    Transaction,
)

_decode_json = msgspec.json.Decoder().decode
_encode_json = msgspec.json.Encoder().encode

# Per field: (json key, kind, a, b) where kind is "int" (a, b = inclusive bounds, flag-ness in the
# table below), "sig" (a = byte length), "hex" (a = byte length) or "text" (a = max width).
_Field = tuple[str, str, int, int, bool]


#: bytes fields Lighter writes in base64 (besides every ``Sig``): ChangePubKey's ``PubKey``.
_BASE64 = {("ChangePubKey", "pub_key")}
#: bytes fields Lighter writes as ``0x`` + hex (raydex's other hex fields go out without it).
_HEX_0X = {"l1_sig", "l1_address"}
#: bytes fields that may be ``""`` (all zeros inside, and out again as ``""``): Transfer's L1Sig.
_MAY_BE_EMPTY = {("Transfer", "l1_sig")}
#: bytes fields Lighter writes as a JSON list of byte values: Transfer's memo.
_BYTE_LIST = {"memo"}


def _fields_of(codec: HotCodec[Any]) -> tuple[_Field, ...]:
    """Every field of the layout, the attribute fields (``_wire.Attr``) included."""
    out: list[_Field] = []
    for f in codec.spec.fields:
        fmt = field_format(f.construct)
        bounds = int_bounds(fmt)
        if bounds is not None:
            r = f.range
            lo, hi = (max(r.lo, bounds[0]), min(r.hi, bounds[1])) if r else bounds
            out.append((f.json_name, "int", lo, hi, (lo, hi) == (0, 1)))
        elif f.py_type is str:
            out.append((f.json_name, "text", int(fmt[:-1]), 0, False))
        elif f.name == "sig" or (codec.cls.__name__, f.name) in _BASE64:
            out.append((f.json_name, "sig", int(fmt[:-1]), 0, False))
        elif f.name in _BYTE_LIST:
            out.append((f.json_name, "bytelist", int(fmt[:-1]), 0, False))
        else:
            kind = "hex0x" if f.name in _HEX_0X else "hex"
            if (codec.cls.__name__, f.name) in _MAY_BE_EMPTY:
                kind = "hex0x?"
            out.append((f.json_name, kind, int(fmt[:-1]), 0, False))
    return tuple(out)


#: A layout's attribute fields, in layout order: ``(attribute type, nil value, lo, hi)``.
_AttrField = tuple[int, int, int, int]


def _attr_fields(codec: HotCodec[Any]) -> tuple[_AttrField, ...]:
    """The layout's ``L2TxAttributes`` fields; they are its last fields (after ``sig``)."""
    fields = codec.spec.fields
    out: list[_AttrField] = []
    for (_k, _kind, lo, hi, _flag), f in zip(_fields_of(codec), fields, strict=True):
        a = f.attribute
        if a is not None:
            out.append((int(a.type), a.nil, lo, hi))
    if out and any(f.attribute is None for f in fields[len(fields) - len(out) :]):
        raise TypeError(f"{codec.cls.__name__}: attribute fields must come last")
    return tuple(out)


#: tx type -> (codec, its JSON fields (every field but the attribute ones, in layout order),
#: their keys, its attribute fields, their nil values, the attribute types it takes).
_TX_FIELDS: dict[
    int,
    tuple[
        HotCodec[Any],
        tuple[_Field, ...],
        frozenset[str],
        tuple[_AttrField, ...],
        tuple[int, ...],
        frozenset[int],
    ],
] = {
    tag: (
        c,
        fs[: len(fs) - len(afs)],
        frozenset(f[0] for f in fs[: len(fs) - len(afs)]),
        afs,
        tuple(a[1] for a in afs),
        frozenset(a[0] for a in afs),
    )
    for tag, c in HOT_BY_TAG[TX].items()
    for fs, afs in ((_fields_of(c), _attr_fields(c)),)
}


def _parse_object(tx_info: str | bytes | bytearray | dict[str, Any]) -> dict[str, Any]:
    if isinstance(tx_info, dict):
        return tx_info
    if not isinstance(tx_info, str | bytes | bytearray):
        raise CodecError(f"tx_info must be a JSON object or string, not {type(tx_info).__name__}")
    try:
        obj = _decode_json(tx_info)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise CodecError(f"tx_info is not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise CodecError(f"tx_info must be a JSON object, not {type(obj).__name__}")
    return obj


def _value(name: str, key: str, kind: str, a: int, b: int, flag: bool, v: Any) -> Any:
    if kind == "int":
        if type(v) is not int:
            if flag and type(v) is bool:
                return int(v)
            raise CodecError(f"needs an integer, got {type(v).__name__}", type_name=name, field=key)
        if not a <= v <= b:
            raise CodecError(f"{v} out of range [{a}, {b}]", type_name=name, field=key)
        return v
    if kind == "bytelist":
        if (
            type(v) is not list
            or len(v) != a
            or any(type(b) is not int or not 0 <= b < 256 for b in v)
        ):
            raise CodecError(f"needs a list of {a} byte values", type_name=name, field=key)
        return bytes(v)
    if not isinstance(v, str):
        raise CodecError(f"needs a string, got {type(v).__name__}", type_name=name, field=key)
    if kind == "hex0x?" and v == "":
        return bytes(a)
    if kind == "text":
        if not v.isascii() or len(v) > a or "\0" in v:
            raise CodecError(f"needs ASCII of at most {a} chars", type_name=name, field=key)
        return v
    try:
        raw = (
            base64.b64decode(v, validate=True)
            if kind == "sig"
            else bytes.fromhex(v[2:] if v[:2] in ("0x", "0X") else v)
        )
    except (binascii.Error, ValueError):
        what = "base64" if kind == "sig" else "hex"
        raise CodecError(f"not valid {what}", type_name=name, field=key) from None
    if len(raw) != a:
        raise CodecError(f"needs {a} bytes, got {len(raw)}", type_name=name, field=key)
    return raw


_ATTRS = "L2TxAttributes"
_SIG = "Sig"


#: lighter-go's names of the attribute types (``AttributeType<Name>``; 8 the SDK's).
_ATTR_NAMES: dict[int, str] = {
    AttributeType.INTEGRATOR_ACCOUNT_INDEX: "IntegratorAccountIndex",
    AttributeType.INTEGRATOR_TAKER_FEE: "IntegratorTakerFee",
    AttributeType.INTEGRATOR_MAKER_FEE: "IntegratorMakerFee",
    AttributeType.SKIP_NONCE: "SkipTxNonce",
    AttributeType.CANCEL_ALL_MARKET_INDEX: "CancelAllMarketIndex",
    AttributeType.SELF_TRADE_BEHAVIOR: "SelfTradeBehaviorMode",
    AttributeType.SELF_TRADE_EQUALITY: "SelfTradeEqualityMode",
    AttributeType.ORDER_VERSION: "OrderVersion",
}
#: Each attribute type's range (lighter-go ``AttributeTypeToConfig``): integrator account index
#: and fees and SkipNonce here, the others from the layout fields that carry them.
_ATTR_RANGES: dict[int, tuple[int, int]] = {
    AttributeType.INTEGRATOR_ACCOUNT_INDEX: (0, MAX_48 - 1),
    AttributeType.INTEGRATOR_TAKER_FEE: (0, PPM),
    AttributeType.INTEGRATOR_MAKER_FEE: (0, PPM),
    AttributeType.SKIP_NONCE: (1, 1),
}
for _entry in _TX_FIELDS.values():
    for _t, _nil, _lo, _hi in _entry[3]:
        _ATTR_RANGES.setdefault(_t, (_lo, _hi))
_INTEGRATOR = frozenset(
    {
        AttributeType.INTEGRATOR_ACCOUNT_INDEX,
        AttributeType.INTEGRATOR_TAKER_FEE,
        AttributeType.INTEGRATOR_MAKER_FEE,
    }
)
_FEES = (AttributeType.INTEGRATOR_TAKER_FEE, AttributeType.INTEGRATOR_MAKER_FEE)
_SELF_TRADE = (AttributeType.SELF_TRADE_BEHAVIOR, AttributeType.SELF_TRADE_EQUALITY)


def _attributes(name: str, attrs: Any, takes: frozenset[int]) -> dict[int, int]:
    """The set ``L2TxAttributes`` of ``attrs`` (type -> value), checked as the module docstring
    says; raises CodecError naming the attribute."""
    if attrs is None:
        return {}
    if not isinstance(attrs, dict):
        raise CodecError("needs null or an object", type_name=name, field=_ATTRS)
    try:
        got = dict(signing.normalized_attributes(attrs))
    except (ValueError, TypeError) as e:
        raise CodecError(str(e), type_name=name, field=_ATTRS) from None

    def refuse(why: str, code: ResultCode = ResultCode.INVALID_TX_INFO) -> CodecError:
        return CodecError(why, type_name=name, field=_ATTRS, code=code)

    for t, v in got.items():
        lo, hi = _ATTR_RANGES[t]
        if not lo <= v <= hi:
            raise refuse(f"attribute {t} ({_ATTR_NAMES[t]}) = {v} out of range [{lo}, {hi}]")
    fees = any(t in got for t in _FEES)
    if fees and AttributeType.INTEGRATOR_ACCOUNT_INDEX not in got:
        raise refuse("integrator fees (2, 3) need the integrator account index (1)")
    if fees and any(t in got for t in _SELF_TRADE):
        raise refuse("self-trade modes (6, 7) are not allowed with integrator fees (2, 3)")
    if (
        got.get(AttributeType.SELF_TRADE_BEHAVIOR) == SelfTradeBehavior.REDUCE
        and got.get(AttributeType.SELF_TRADE_EQUALITY) == SelfTradeEquality.MASTER_ACCOUNT_INDEX
    ):
        raise refuse(
            "SelfTradeBehaviorMode Reduce (6 = 3) is not allowed with "
            "SelfTradeEqualityMode MasterAccountIndex (7 = 1)"
        )
    if any(t in _INTEGRATOR for t in got):
        raise refuse(
            "integrator fees (L2TxAttributes 1-3) are not executed by raydex; "
            "send the tx without them",
            ResultCode.FEATURE_NOT_SUPPORTED,
        )
    for t in got:
        if t != AttributeType.SKIP_NONCE and t not in takes:
            raise refuse(f"attribute {t} ({_ATTR_NAMES[t]}) does not apply to {name}")
    return got


_GROUPED_TYPE = 28
_ORDERS = "Orders"


def _grouped_slot_keys() -> list[list[str]]:
    """The flat layout's JSON keys of each order slot (``MarketIndex0``, ...), slot by slot."""
    fields = _TX_FIELDS[_GROUPED_TYPE][1]
    w = GROUPED_SLOT_FIELDS
    return [
        [f[0] for f in fields[GROUPED_FIRST_SLOT + i * w : GROUPED_FIRST_SLOT + (i + 1) * w]]
        for i in range(MAX_GROUPED_ORDERS)
    ]


def _from_grouped_form(name: str, obj: dict[str, Any]) -> dict[str, Any]:
    """Lighter's CreateGroupedOrders (an ``Orders`` list) as the flat layout's keys, each
    order's values checked against its slot's field (errors name ``Orders[i].Key``)."""
    out = dict(obj)
    orders = out.pop(_ORDERS, None)
    if not isinstance(orders, list) or not 1 <= len(orders) <= MAX_GROUPED_ORDERS:
        raise CodecError(
            f"needs a list of 1 to {MAX_GROUPED_ORDERS} orders", type_name=name, field=_ORDERS
        )
    fields = _TX_FIELDS[_GROUPED_TYPE][1]
    by_key = {f[0]: f for f in fields}
    want = frozenset(ORDER_INFO_KEYS)
    for i, (order, keys) in enumerate(zip(orders + [None] * 3, _grouped_slot_keys(), strict=False)):
        if order is None:
            out.update(dict.fromkeys(keys, 0))
            continue
        where = f"{_ORDERS}[{i}]"
        if not isinstance(order, dict) or order.keys() != want:
            got = sorted(order) if isinstance(order, dict) else type(order).__name__
            raise CodecError(
                f"needs exactly the keys {list(ORDER_INFO_KEYS)}, got {got}",
                type_name=name,
                field=where,
            )
        for lighter_key, key in zip(ORDER_INFO_KEYS, keys, strict=True):
            _, kind, a, b, flag = by_key[key]
            out[key] = _value(name, f"{where}.{lighter_key}", kind, a, b, flag, order[lighter_key])
    out["OrderCount"] = len(orders)
    return out


def _to_grouped_form(out: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`_from_grouped_form` on ``tx_to_json``'s flat keys."""
    count = out.pop("OrderCount")
    orders = []
    for i, keys in enumerate(_grouped_slot_keys()):
        values = [out.pop(k) for k in keys]
        if i < count:
            orders.append(dict(zip(ORDER_INFO_KEYS, values, strict=True)))
    tail = {k: out.pop(k) for k in list(out) if k in ("ExpiredAt", "Nonce", "Sig", _ATTRS)}
    out[_ORDERS] = orders
    out.update(tail)
    return out


def tx_from_json(tx_type: int, tx_info: str | bytes | bytearray | dict[str, Any]) -> Transaction:
    """Build and validate a transaction from Lighter's ``tx_info``; raises CodecError only."""
    ok = isinstance(tx_type, int) and not isinstance(tx_type, bool)
    entry = _TX_FIELDS.get(int(tx_type)) if ok else None
    if entry is None:
        feature = UNSERVED_TX_TYPES.get(int(tx_type)) if ok else None
        if feature is not None:
            raise CodecError(
                f"tx type {tx_type} is {feature}, which raydex does not execute",
                code=ResultCode.FEATURE_NOT_SUPPORTED,
            )
        raise CodecError(f"unknown tx type {tx_type!r}", code=ResultCode.INVALID_TX_TYPE)
    codec, fields, keys, attr_fields, nils, takes = entry
    obj = _parse_object(tx_info)
    name = codec.cls.__name__
    attrs: dict[int, int] = {}
    if _ATTRS in obj and _SIG in keys:
        obj = dict(obj)
        attrs = _attributes(name, obj.pop(_ATTRS), takes)
    if codec.cls is CreateGroupedOrders:
        obj = _from_grouped_form(name, obj)
    if obj.keys() != keys:
        missing = sorted(keys - obj.keys())
        extra = sorted(str(k) for k in obj.keys() - keys)
        raise CodecError(f"missing keys {missing}, unexpected keys {extra}", type_name=name)
    vals: list[Any] = []
    append = vals.append
    for key, kind, a, b, flag in fields:
        v = obj[key]
        if type(v) is int and kind == "int" and a <= v <= b:  # the common case, inline
            append(v)
        else:
            append(_value(name, key, kind, a, b, flag, v))
    if _SIG in keys:  # a user tx: ``..., nonce, sig`` and then its attribute fields
        nonce: int = vals[-2]
        if nonce & SKIP_NONCE_FLAG:
            raise CodecError(f"{nonce} out of range", type_name=name, field="Nonce")
        if attrs:
            if attrs.get(AttributeType.SKIP_NONCE):
                vals[-2] = nonce | SKIP_NONCE_FLAG
            vals.extend(attrs.get(t, nil) for t, nil, _lo, _hi in attr_fields)
        else:
            vals.extend(nils)
    tx: Transaction = codec.cls._make(vals)
    return tx


def tx_to_json(tx: Transaction) -> dict[str, Any]:
    """Lighter's ``tx_info`` object for ``tx`` (PascalCase keys; base64 Sig; hex keys; the set
    ``L2TxAttributes``)."""
    _, fields, _, attr_fields, _, _ = _TX_FIELDS[codec_of(type(tx)).tag]
    out: dict[str, Any] = {}
    values: tuple[Any, ...] = tx
    for (key, kind, _a, _b, _flag), v in zip(fields, values, strict=False):
        if kind == "sig":
            out[key] = base64.b64encode(v).decode("ascii")
        elif kind == "hex":
            out[key] = bytes(v).hex()
        elif kind == "hex0x":
            out[key] = "0x" + bytes(v).hex()
        elif kind == "hex0x?":
            out[key] = "0x" + bytes(v).hex() if any(v) else ""
        elif kind == "bytelist":
            out[key] = list(bytes(v))
        else:
            out[key] = int(v) if kind == "int" else v
    attrs: dict[int, int] = {}
    nonce = out.get("Nonce")
    if nonce is not None and nonce & SKIP_NONCE_FLAG:
        out["Nonce"] = nonce ^ SKIP_NONCE_FLAG
        attrs[AttributeType.SKIP_NONCE] = 1
    for (t, nil, _lo, _hi), v in zip(attr_fields, values[len(fields) :], strict=True):
        if v != nil:
            attrs[t] = int(v)
    if attrs:
        out[_ATTRS] = {str(t): attrs[t] for t in sorted(attrs)}
    if type(tx) is CreateGroupedOrders:
        out = _to_grouped_form(out)
    return out


def tx_to_json_str(tx: Transaction) -> str:
    """``tx_to_json`` serialized (what a client puts in the ``tx_info`` form field)."""
    return _encode_json(tx_to_json(tx)).decode()


# ---- decimal strings --------------------------------------------------------------------------

_DECIMAL = re.compile(r"(-?)(\d+)(?:\.(\d*))?")


def ticks_to_str(ticks: int, decimals: int) -> str:
    """``ticks / 10**decimals`` as an exact decimal string (``332746``, 2 -> ``"3327.46"``).

    Always ``decimals`` fractional digits (zero too: ``"0.00"``); no exponent, no float.
    """
    if decimals == 0:
        return str(ticks)
    sign = "-" if ticks < 0 else ""
    whole, frac = divmod(abs(ticks), 10**decimals)
    return f"{sign}{whole}.{frac:0{decimals}d}"


def str_to_ticks(s: str, decimals: int) -> int:
    """Exact inverse of :func:`ticks_to_str`: ``"3327.46"`` with 2 decimals -> 332746.

    Accepts an optional ``-``, digits and an optional fraction; fewer fractional digits are padded,
    extra ones are accepted only if they are zeros (``"1.50"`` with 1 decimal), else CodecError
    (the value is not a whole number of ticks).
    """
    m = _DECIMAL.fullmatch(s) if isinstance(s, str) else None
    if m is None or not s.isascii():
        raise CodecError(f"not a decimal number: {s!r}")
    sign, whole, frac = m.group(1), m.group(2), m.group(3) or ""
    if len(frac) > decimals:
        if frac[decimals:].strip("0"):
            raise CodecError(f"{s!r} has more than {decimals} decimals")
        frac = frac[:decimals]
    scale: int = 10**decimals
    value = int(whole) * scale + (int(frac.ljust(decimals, "0")) if decimals else 0)
    return -value if sign else value


def lots_to_str(lots: int, size_decimals: int) -> str:
    """A size in lots as a decimal string (same rules as :func:`ticks_to_str`)."""
    return ticks_to_str(lots, size_decimals)


def str_to_lots(s: str, size_decimals: int) -> int:
    """A decimal size string as lots (same rules as :func:`str_to_ticks`)."""
    return str_to_ticks(s, size_decimals)


def usdc_to_str(micro_usdc: int) -> str:
    """Micro-USDC as a decimal USDC string: ``usdc_to_str(1_500_000) == "1.500000"``."""
    return ticks_to_str(micro_usdc, USDC_DECIMALS)


def str_to_usdc(s: str) -> int:
    """A decimal USDC string as micro-USDC."""
    return str_to_ticks(s, USDC_DECIMALS)
