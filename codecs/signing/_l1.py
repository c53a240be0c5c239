"""Ethereum ``personal_sign`` recovery for ``L1Sig`` (ChangePubKey, Transfer), via eth-account,
and L1 addresses as text (:func:`parse_l1_address`, :func:`l1_address_text`).

``recover_l1_address(text, l1_sig)`` returns the checksummed address whose key signed ``text``
with EIP-191 ("\\x19Ethereum Signed Message:\\n" + length + text), or None for a malformed
signature (not ``0x`` + 65 bytes hex, bad v, s out of range, point not on the curve). Lighter
(lighter-go ``calculateL1AddressBySignature``) accepts v as 0/1 or 27/28; so does this.

Cost: ~0.3 ms (eth-account's pure secp256k1 recovery through eth-keys' backend); ChangePubKey
is rare, so it is not on any hot path.
"""

from __future__ import annotations

import re

from eth_account import Account
from eth_account.messages import encode_defunct
from eth_utils.address import to_checksum_address

_ADDRESS = re.compile(r"0[xX][0-9a-fA-F]{40}")


def parse_l1_address(text: object) -> bytes | None:
    """``0x`` + 40 hex digits (any case; the EIP-55 checksum is not required) as 20 bytes, or
    None. The zero address is refused (no key signs for it)."""
    if not isinstance(text, str) or _ADDRESS.fullmatch(text) is None:
        return None
    raw = bytes.fromhex(text[2:])
    return raw if any(raw) else None


def l1_address_text(raw: bytes) -> str:
    """20 bytes as Lighter writes an L1 address: ``0x`` + EIP-55 checksummed hex."""
    return str(to_checksum_address(raw))


def recover_l1_address(text: str, l1_sig: str) -> str | None:
    """The Ethereum address (``0x`` + 40 hex, EIP-55 checksummed) that signed ``text``."""
    if not isinstance(l1_sig, str) or not l1_sig.startswith(("0x", "0X")) or len(l1_sig) != 132:
        return None
    try:
        raw = bytearray(bytes.fromhex(l1_sig[2:]))
    except ValueError:
        return None
    if raw[64] < 27:
        raw[64] += 27
    try:
        return str(Account.recover_message(encode_defunct(text=text), signature=bytes(raw)))
    except Exception:  # eth-keys raises several types (BadSignature, ValidationError, ValueError)
        return None
