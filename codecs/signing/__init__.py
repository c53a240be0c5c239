"""Lighter's signature scheme: Schnorr over ECgFp5 with Poseidon2 (Goldilocks) hashing.

What a Lighter client signs and how raydex checks it (sources: elliottech/poseidon_crypto,
elliottech/lighter-go ``types/txtypes``, pornin/ecgfp5; known answers from lighter-sdk's own
signer library in ``tests/unit/data/lighter_sdk_vectors.json``):

- keys: private 40 bytes (a scalar mod the group order n ~ 2^319, little-endian), public 40 bytes
  (``encode(sk G)``, 80 hex in JSON answers); signatures 80 bytes ``S || E``;
- :func:`message_hash` gives a tx's ``hm`` from its Lighter JSON (``TX_FIELDS`` per tx type,
  ``L2TxAttributes`` folded in); :func:`tx_hash` is Lighter's tx hash (``hm`` as 80 hex);
- :func:`sign` (deterministic nonce: BLAKE2b-512 of ``sk || hm`` mod n, so signing needs no
  randomness and the same tx signs the same way) and :func:`verify`; :class:`KeyCache` keeps
  decoded public keys (decoding costs a square root and, in C, a precomputed table);
- auth tokens (:func:`auth_token_message`, :func:`auth_token_hash`) and ChangePubKey's L1 text
  (:func:`change_pub_key_message`, :func:`recover_l1_address`).

Policy (stricter than Lighter's newest Go code, see ``_schnorr``): non-canonical S or E, key
limbs ``>= p``, the neutral key and undecodable keys are refused; verification never raises.

Two backends compute bit-identical results: the readable pure-Python reference (``_field``,
``_curve``, ``_poseidon2``, ``_schnorr``; tens of ms per sign or verify) and the C extension
``_accel`` built by ``pip install`` (setup.py). :data:`ACCELERATED` says which one runs; the pure
fallback is never silent: importing this package without the C extension emits a
:class:`SigningFallbackWarning` and logs an error, and ``raydex status`` / the metrics report
:data:`BACKEND`. ``RAYDEX_SIGNING=pure`` forces the pure backend (tests, benchmarks).
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple, Protocol

from . import _messages, _pure
from ._curve import N as GROUP_ORDER
from ._l1 import l1_address_text, parse_l1_address, recover_l1_address
from ._messages import (
    ATTR_SKIP_NONCE,
    ATTRIBUTE_NIL,
    MAX_ATTRIBUTES,
    TX_FIELDS,
    auth_token_message,
    change_pub_key_message,
    normalized_attributes,
    transfer_message,
    tx_hash,
)

__all__ = [
    "ACCELERATED",
    "ACCEL",
    "ACTIVE",
    "ATTRIBUTE_NIL",
    "ATTR_SKIP_NONCE",
    "BACKEND",
    "GROUP_ORDER",
    "MAX_ATTRIBUTES",
    "PRIVATE_KEY_SIZE",
    "PUBLIC_KEY_SIZE",
    "PURE",
    "SIGNATURE_SIZE",
    "TX_FIELDS",
    "Backend",
    "KeyCache",
    "SigningFallbackWarning",
    "auth_token_hash",
    "auth_token_message",
    "change_pub_key_message",
    "generate_key",
    "hash_elements",
    "hash_to_quintic",
    "is_valid_public_key",
    "l1_address_text",
    "message_hash",
    "nonce_for",
    "normalized_attributes",
    "parse_l1_address",
    "public_key_of",
    "recover_l1_address",
    "sign",
    "transfer_message",
    "tx_hash",
    "verify",
]

PRIVATE_KEY_SIZE: Final = 40
PUBLIC_KEY_SIZE: Final = 40
SIGNATURE_SIZE: Final = 80

_log = logging.getLogger(__name__)


class SigningFallbackWarning(RuntimeWarning):
    """The C extension is missing: signatures run in pure Python, ~1000x slower."""


class _BackendModule(Protocol):
    NAME: str

    def public_key(self, sk: bytes) -> bytes: ...
    def sign(self, sk: bytes, hm: bytes, k: bytes) -> bytes: ...
    def decode_public_key(self, pk: bytes) -> Any: ...
    def verify(self, key: Any, hm: bytes, sig: bytes) -> bool: ...
    def hash_no_pad(self, elements: Sequence[int], n_out: int) -> list[int]: ...
    def hash_to_quintic_bytes(self, elements: Sequence[int]) -> bytes: ...


class Backend(NamedTuple):
    """One implementation of the primitives (see ``_pure`` for the contract)."""

    name: str
    module: _BackendModule


def _load_accel() -> Backend | None:
    try:
        from . import _native
    except ImportError as e:
        _log.debug("raydex.codecs.signing._accel not importable: %s", e)
        return None
    return Backend("c", _native)


PURE: Final = Backend("pure", _pure)
#: The C backend, or None when the extension is not built.
ACCEL: Final = _load_accel()
_forced_pure = os.environ.get("RAYDEX_SIGNING", "") == "pure"
#: The backend every function below uses.
ACTIVE: Final = PURE if (ACCEL is None or _forced_pure) else ACCEL
ACCELERATED: Final = ACTIVE is ACCEL
BACKEND: Final = ACTIVE.name

if ACCEL is None:
    _msg = (
        "raydex.codecs.signing: the C extension _accel is not built; signatures use the pure-"
        "Python reference (~0.2 s per verify, a replica would manage a few tx/s). Reinstall "
        "with a C compiler available (pip install -e .) to build it."
    )
    _log.error(_msg)
    warnings.warn(_msg, SigningFallbackWarning, stacklevel=2)


def hash_to_quintic(elements: Sequence[int], backend: Backend = ACTIVE) -> bytes:
    """Poseidon2 ``HashToQuinticExtension`` of GF(p) elements (ints in [0, 2^64)), 40 bytes."""
    return backend.module.hash_to_quintic_bytes(elements)


def message_hash(
    tx_type: int, info: Mapping[str, Any], chain_id: int, backend: Backend = ACTIVE
) -> bytes:
    """``hm`` (40 bytes) of a tx from its Lighter JSON object. Raises ``KeyError`` (a missing
    field, an unknown tx type) or ``ValueError`` (a malformed field or attribute)."""
    mod = backend.module
    if info.get("L2TxAttributes"):
        return _messages.message_hash(mod.hash_no_pad, tx_type, info, chain_id)
    return mod.hash_to_quintic_bytes(
        _messages.message_elements(mod.hash_no_pad, tx_type, info, chain_id)
    )


def hash_elements(elements: Sequence[int], backend: Backend = ACTIVE) -> bytes:
    """``hm`` (40 bytes) of a message already given as its GF(p) elements (what
    :func:`message_hash` hashes for a tx without attributes: ``_messages.message_elements``)."""
    return backend.module.hash_to_quintic_bytes(elements)


def auth_token_hash(message: str, backend: Backend = ACTIVE) -> bytes:
    """``hm`` of an auth token message (``auth_token_message``)."""
    return _messages.auth_token_hash(backend.module.hash_no_pad, message)


def _scalar(sk: bytes) -> bytes:
    """sk reduced mod n as Lighter's key manager does; a zero key is refused."""
    if len(sk) != PRIVATE_KEY_SIZE:
        raise ValueError(f"private key needs {PRIVATE_KEY_SIZE} bytes, got {len(sk)}")
    k = int.from_bytes(sk, "little") % GROUP_ORDER
    if k == 0:
        raise ValueError("private key is zero mod the group order")
    return k.to_bytes(PRIVATE_KEY_SIZE, "little")


def generate_key() -> tuple[bytes, bytes]:
    """A fresh key pair ``(private40, public40)`` from the OS's CSPRNG."""
    sk = (secrets.randbelow(GROUP_ORDER - 1) + 1).to_bytes(PRIVATE_KEY_SIZE, "little")
    return sk, ACTIVE.module.public_key(sk)


def public_key_of(sk: bytes, backend: Backend = ACTIVE) -> bytes:
    """The 40-byte public key of a 40-byte private key."""
    return backend.module.public_key(_scalar(sk))


def _nonce_digest(sk: bytes, hm: bytes) -> bytes:
    return hashlib.blake2b(sk + hm, digest_size=64, person=b"raydex-ecgfp5-k").digest()


def nonce_for(sk: bytes, hm: bytes) -> bytes:
    """The deterministic signing nonce: BLAKE2b-512(sk || hm) mod n (never 0)."""
    k = int.from_bytes(_nonce_digest(sk, hm), "little") % GROUP_ORDER or 1
    return k.to_bytes(PRIVATE_KEY_SIZE, "little")


def sign(sk: bytes, hm: bytes, backend: Backend = ACTIVE) -> bytes:
    """The 80-byte signature ``S || E`` of the 40-byte message hash ``hm`` under ``sk``."""
    if len(hm) != 40:
        raise ValueError(f"message hash needs 40 bytes, got {len(hm)}")
    fast = getattr(backend.module, "sign_digest", None)
    if fast is not None and type(sk) is bytes and len(sk) == PRIVATE_KEY_SIZE:
        # C: the nonce's reduction and the whole signature in one call; None when sk is not
        # canonical (>= n or 0): then the general path below reduces it first
        sig: bytes | None = fast(sk, hm, _nonce_digest(sk, hm))
        if sig is not None:
            return sig
    sk = _scalar(sk)
    return backend.module.sign(sk, hm, nonce_for(sk, hm))


def is_valid_public_key(pk: bytes, backend: Backend = ACTIVE) -> bool:
    """True iff ``pk`` is 40 bytes encoding a group element other than the neutral (the checks
    :func:`verify` makes of a key: canonical limbs, on the curve). Deterministic; ~1 ms in C
    (the decode builds the 40 KB verification table)."""
    return (
        isinstance(pk, bytes)
        and len(pk) == PUBLIC_KEY_SIZE
        and backend.module.decode_public_key(pk) is not None
    )


class KeyCache:
    """Decoded public keys, one decode per key (a square root in GF(p^5), plus in C a table of
    multiples, ``_accel.KEY_TABLE_BYTES`` = 40 KB, that makes every later verify ~2x cheaper).
    Bounded by ``max_keys`` entries and by ``max_bytes`` of key tables (the default, 512 MiB, is
    ~13,000 keys in C); when full, the oldest entry is evicted (insertion order: one dict
    operation, no work on a hit), so an evicted key costs one decode (~1-2 ms) when it returns.
    Refused keys are cached too (as None), so a flood of one bad key costs one decode."""

    __slots__ = ("_keys", "backend", "capacity", "decodes", "evictions", "max_keys")

    def __init__(
        self, max_keys: int = 50_000, backend: Backend = ACTIVE, max_bytes: int = 512 << 20
    ) -> None:
        self.backend = backend
        self.max_keys = max_keys
        per_key = int(getattr(backend.module, "KEY_TABLE_BYTES", 1024))
        #: The entries held at most: ``max_keys``, lowered to what ``max_bytes`` allows.
        self.capacity = max(1, min(max_keys, max_bytes // max(per_key, 1)))
        self.decodes = 0
        self.evictions = 0
        self._keys: dict[bytes, Any] = {}

    def key(self, pk: bytes) -> Any:
        """The backend's decoded key, or None if ``pk`` is not a valid public key."""
        try:
            return self._keys[pk]
        except KeyError:
            pass
        except TypeError:  # unhashable input
            return None
        key = None
        if isinstance(pk, bytes) and len(pk) == PUBLIC_KEY_SIZE:
            key = self.backend.module.decode_public_key(pk)
        keys = self._keys
        while len(keys) >= self.capacity:
            del keys[next(iter(keys))]
            self.evictions += 1
        keys[pk] = key
        self.decodes += 1
        return key

    def is_valid(self, pk: bytes) -> bool:
        return self.key(pk) is not None

    def verify(self, pk: bytes, hm: bytes, sig: bytes) -> bool:
        """True iff ``sig`` is a valid signature of ``hm`` under ``pk``. Never raises."""
        key = self.key(pk)
        if key is None or not isinstance(sig, bytes) or len(sig) != SIGNATURE_SIZE:
            return False
        if not isinstance(hm, bytes) or len(hm) != 40:
            return False
        return self.backend.module.verify(key, hm, sig)

    def __len__(self) -> int:
        return len(self._keys)


_DEFAULT_CACHE = KeyCache()


def verify(pk: bytes, hm: bytes, sig: bytes) -> bool:
    """:meth:`KeyCache.verify` on a shared module-level cache. Never raises."""
    return _DEFAULT_CACHE.verify(pk, hm, sig)
