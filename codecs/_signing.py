"""Transaction signatures: Lighter's scheme (``raydex.codecs.signing``) on raydex's tx types.

The signed message of a tx is Lighter's message hash ``hm`` (Poseidon2 over the tx's fields in
lighter-go's order, chain id and tx type first, see ``signing.TX_FIELDS``), computed from the
raydex NamedTuple through its Lighter JSON names (:func:`lighter_info`); every user tx layout
carries all of Lighter's signed fields, so an SDK-signed tx verifies whatever their values:

- CreateGroupedOrders: its order slots are Lighter's ``Orders`` list (the ``order_count`` used
  ones), which ``signing`` hashes order by order (the ``orders`` kind);
- ChangePubKey is Lighter's: signed by the key it sets (:func:`signer_key`), authorised by
  ``L1Sig`` from the account's L1 address (:func:`l1_signer` recovers it; a rare tx);
- a Transfer to another master's account is authorised by its ``L1Sig`` too, over Lighter's
  transfer text (:func:`transfer_l1_signer`); one between accounts of one master needs none.

``L2TxAttributes``: SkipNonce travels as ``SKIP_NONCE_FLAG`` in the tx's ``nonce``, the other
attributes a type executes as its fields after ``sig`` (``Attr`` extras); :func:`lighter_info`
turns them back into Lighter's ``Nonce`` and ``L2TxAttributes`` (the set ones only), so the hash
is ``H(H(msg) || H(attrs))`` as Lighter's.

- :func:`verify_tx` and :meth:`Verifier.verify` never raise on bad input (malformed key, wrong
  length or forged signature, unsigned tx type): they return False.
- :class:`Verifier` keeps decoded public keys in a bounded :class:`signing.KeyCache`.

Cost: tens of µs per verify with the C backend and a cached key (a key's first verify also decodes
it); ~1000x that without the extension (``signing.ACCELERATED`` says which runs).
"""

from __future__ import annotations

import hashlib
from typing import Any, Final, TypeVar, cast

from . import signing
from ._enums import SKIP_NONCE_FLAG
from ._errors import CodecError
from ._hot import codec_of
from ._tx import (
    ORDER_INFO_KEYS,
    ChangePubKey,
    CreateGroupedOrders,
    Transfer,
    UserTransaction,
    grouped_canonical,
    grouped_orders,
)
from ._txcodec import encode_tx, is_signed_type, tx_type_of

DEFAULT_CHAIN_ID: Final = 304
SEED_SIZE: Final = signing.PRIVATE_KEY_SIZE
PUBLIC_KEY_SIZE: Final = signing.PUBLIC_KEY_SIZE
SIGNATURE_SIZE: Final = signing.SIGNATURE_SIZE
TX_HASH_SIZE: Final = 40
U = TypeVar("U", bound=UserTransaction)


#: A tx type's signing plan: its tx type, the Lighter keys of its fields before ``sig`` (the
#: values of those fields, in order), and its attribute fields as ``(position, attribute type,
#: nil value)``.
_Plan = tuple[int, tuple[str, ...], tuple[tuple[int, int, int], ...]]


def _plan(cls: type) -> _Plan:
    fields = codec_of(cls).spec.fields
    sig = next(i for i, f in enumerate(fields) if f.name == "sig")
    keys = tuple(f.json_name for f in fields[:sig])
    attrs = tuple(
        (i, a.type, a.nil) for i, f in enumerate(fields) if (a := f.attribute) is not None
    )
    return tx_type_of(cls), keys, attrs


_PLANS: dict[type, _Plan] = {}
_NONCE_MASK: Final = SKIP_NONCE_FLAG - 1


def lighter_info(tx: Any) -> tuple[int, dict[str, Any]]:
    """``(tx_type, Lighter tx_info without Sig)`` of a raydex user transaction."""
    cls = type(tx)
    plan = _PLANS.get(cls)
    if plan is None:
        if not is_signed_type(cls):
            raise CodecError("not a signed (user) transaction", type_name=cls.__name__)
        plan = _PLANS[cls] = _plan(cls)
    tx_type, keys, attr_fields = plan
    info = _grouped_info(tx) if cls is CreateGroupedOrders else dict(zip(keys, tx, strict=False))
    attrs: dict[int, int] = {}
    for i, t, nil in attr_fields:
        v = tx[i]
        if v != nil:
            attrs[t] = v
    nonce = info["Nonce"]
    if nonce & SKIP_NONCE_FLAG:  # Lighter signs the nonce proper and the attribute
        info["Nonce"] = nonce ^ SKIP_NONCE_FLAG
        attrs[signing.ATTR_SKIP_NONCE] = 1
    if attrs:
        info["L2TxAttributes"] = attrs
    return tx_type, info


def _grouped_info(tx: CreateGroupedOrders) -> dict[str, Any]:
    if not grouped_canonical(tx):  # slots past its order count: no Lighter message signs them
        raise CodecError("CreateGroupedOrders: the slots past order_count must be 0")
    return {
        "AccountIndex": tx.account_index,
        "ApiKeyIndex": tx.api_key_index,
        "GroupingType": tx.grouping_type,
        "Orders": [dict(zip(ORDER_INFO_KEYS, o, strict=True)) for o in grouped_orders(tx)],
        "ExpiredAt": tx.expired_at,
        "Nonce": tx.nonce,
    }


#: A tx type's direct hash plan (:func:`_direct_plan`): its tx type, the tuple positions of
#: ``Nonce`` and ``ExpiredAt``, its signed fields in Lighter's order as ``(position, kind)``
#: (kind 0: an integer, 1: split in two 32-bit halves, 2: the same, signed), and the positions and
#: nil values of its attribute fields. None: a type with a public key or an orders list.
_DirectPlan = tuple[int, int, int, tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]
_DIRECT: dict[type, _DirectPlan | None] = {}
_KINDS: Final = {"int": 0, "split": 1, "split_signed": 2}
_U64: Final = (1 << 64) - 1


def _direct_plan(cls: type) -> _DirectPlan | None:
    tx_type, keys, attrs = _plan(cls)
    fields = signing.TX_FIELDS[tx_type]
    if any(kind not in _KINDS for _, kind in fields):
        return None
    pos = {k: i for i, k in enumerate(keys)}
    named = tuple((pos[name], _KINDS[kind]) for name, kind in fields)
    return tx_type, pos["Nonce"], pos["ExpiredAt"], named, tuple((i, nil) for i, _, nil in attrs)


def _direct_elements(tx: Any, plan: _DirectPlan, chain_id: int) -> list[int] | None:
    """The elements :func:`signing.message_elements` gives for ``tx``, read from the tuple
    without its Lighter JSON; None where that path must decide (a value that is not a plain
    int, SkipNonce or another attribute set)."""
    tx_type, nonce_at, expired_at, named, attrs = plan
    for i, nil in attrs:
        if tx[i] != nil:
            return None
    nonce, expired = tx[nonce_at], tx[expired_at]
    if type(nonce) is not int or type(expired) is not int or nonce & SKIP_NONCE_FLAG:
        return None
    out = [chain_id, tx_type, nonce & _U64, expired & _U64]
    for i, kind in named:
        v = tx[i]
        if type(v) is not int:  # an IntEnum, a bool: the reference path converts or refuses
            return None
        if kind == 0:
            out.append(v & _U64)
        elif kind == 1:
            v &= _U64
            out += (v & 0xFFFFFFFF, v >> 32)
        else:
            out += (v & 0xFFFFFFFF, (v >> 32) & _U64)
    return out


def message_hash_of(tx: Any, chain_id: int = DEFAULT_CHAIN_ID) -> bytes:
    """Lighter's 40-byte message hash ``hm`` of a user transaction (its tx hash in hex).

    Most txs (integer fields only, no attribute set) are hashed straight from the tuple; the
    others through their Lighter JSON (:func:`lighter_info`, the reference: both give the same
    hash, ``tests/unit/test_signing_direct.py``). The direct path saves the JSON dict and the
    per-field name lookups: ~3 µs of a ~6 µs hash, paid by the replica, the sequencer and the
    committer's audit for every tx."""
    cls = type(tx)
    try:
        plan = _DIRECT[cls]
    except KeyError:
        plan = _DIRECT[cls] = _direct_plan(cls) if is_signed_type(cls) else None
    if plan is not None and (elements := _direct_elements(tx, plan, chain_id)) is not None:
        return signing.hash_elements(elements)
    tx_type, info = lighter_info(tx)
    return signing.message_hash(tx_type, info, chain_id)


def tx_hash_of(tx: Any, chain_id: int = DEFAULT_CHAIN_ID) -> bytes:
    """The 40-byte tx hash: Lighter's (``hm``, hex in every API answer) for a user tx; operator
    commands have no Lighter hash and take BLAKE2b-320 of their wire form (``encode_tx``)."""
    if is_signed_type(type(tx)):
        return message_hash_of(tx, chain_id)
    return hashlib.blake2b(encode_tx(tx), digest_size=TX_HASH_SIZE).digest()


def signer_key(tx: Any, registered: bytes | None) -> bytes | None:
    """The public key ``tx``'s ``sig`` must verify under: the key it sets for a ChangePubKey
    (Lighter's rule: the new key signs), else ``registered`` (the key at its api key index)."""
    return bytes(tx.pub_key) if type(tx) is ChangePubKey else registered


def l1_signer(tx: ChangePubKey) -> bytes | None:
    """The 20-byte L1 address whose Ethereum personal-sign ``tx.l1_sig`` is, over Lighter's
    "Register Lighter Account" text for this tx (``signing.change_pub_key_message``), or None
    for a malformed signature. The caller compares it with the account's L1 address."""
    text = signing.change_pub_key_message(
        bytes(tx.pub_key), tx.nonce & _NONCE_MASK, tx.account_index, tx.api_key_index
    )
    addr = signing.recover_l1_address(text, "0x" + bytes(tx.l1_sig).hex())
    return None if addr is None else bytes.fromhex(addr[2:])


def transfer_l1_signer(tx: Transfer, chain_id: int = DEFAULT_CHAIN_ID) -> bytes | None:
    """The 20-byte L1 address whose Ethereum personal-sign ``tx.l1_sig`` is, over Lighter's
    transfer text for this tx (``signing.transfer_message``: nonce, accounts, routes, asset,
    amount, fee, chain, memo), or None for a missing (all zeros) or malformed signature."""
    sig = bytes(tx.l1_sig)
    if not any(sig):
        return None
    _, info = lighter_info(tx)
    text = signing.transfer_message(info, chain_id)
    addr = signing.recover_l1_address(text, "0x" + sig.hex())
    return None if addr is None else bytes.fromhex(addr[2:])


def generate_key() -> tuple[bytes, bytes]:
    """A fresh key pair ``(private40, public40)``."""
    return signing.generate_key()


def public_key_of(seed: bytes) -> bytes:
    """The 40-byte public key of a 40-byte private key."""
    return signing.public_key_of(seed)


def sign_tx(tx: U, seed: bytes, chain_id: int = DEFAULT_CHAIN_ID) -> U:
    """``tx`` with ``sig`` set to the signature of its message hash under ``seed``."""
    sig = signing.sign(bytes(seed), message_hash_of(tx, chain_id))
    return cast(U, tx._replace(sig=sig))


class Verifier:
    """Signature checks with a bounded cache of decoded public keys; see the module docstring."""

    __slots__ = ("chain_id", "keys")

    def __init__(self, chain_id: int = DEFAULT_CHAIN_ID, max_keys: int = 50_000) -> None:
        self.chain_id = chain_id
        self.keys = signing.KeyCache(max_keys)

    def verify(self, tx: object, pub_key: bytes, hm: bytes | None = None) -> bool:
        """True iff ``tx`` is a signed tx whose ``sig`` verifies under ``pub_key`` on this chain.
        ``hm``: the tx's message hash when the caller has it already (``tx_hash_of``)."""
        if not is_signed_type(type(tx)):
            return False
        if hm is None:
            try:
                hm = message_hash_of(tx, self.chain_id)
            except (CodecError, KeyError, ValueError, TypeError):
                return False
        return self.keys.verify(pub_key, hm, tx.sig)  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.keys)


_DEFAULT_VERIFIERS: dict[int, Verifier] = {}


def verify_tx(tx: object, pub_key: bytes, chain_id: int = DEFAULT_CHAIN_ID) -> bool:
    """Module-level :meth:`Verifier.verify` with a shared cache per chain id. Never raises."""
    v = _DEFAULT_VERIFIERS.get(chain_id)
    if v is None:
        v = _DEFAULT_VERIFIERS[chain_id] = Verifier(chain_id)
    return v.verify(tx, pub_key)
