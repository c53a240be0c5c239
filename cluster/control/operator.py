"""Operator commands through the Ray control plane (what ``raydex deposit`` sends).

An operator command is a Ray call to the sequencer actor (``SequencerActor.operator``), never the
public API: only members of the Ray cluster can make it. ``deposit_l1`` is Lighter's deposit from
L1: it credits the account of an L1 address, creating it (next free index) if that address has
none, and answers the account's index. Cost: two actor calls (~ms); not a hot path.
"""

from __future__ import annotations

from typing import Any

from raydex.codecs import L1Deposit, ResultCode

from .view import NAMESPACE, primary_name

__all__ = ["deposit_l1"]


def deposit_l1(
    l1_address: bytes, micro_usdc: int, namespace: str = NAMESPACE, timeout_s: float = 30.0
) -> tuple[int, int | None]:
    """``(result code, account index)`` of crediting ``micro_usdc`` to ``l1_address``'s account;
    the index is None when the deposit was refused. Needs ``ray.init`` done."""
    import ray

    seq: Any = ray.get_actor(primary_name(namespace), namespace=namespace)
    (outcome,) = ray.get(
        seq.operator.remote([L1Deposit(l1_address, micro_usdc)]), timeout=timeout_s
    )
    if outcome.code != ResultCode.OK:
        return int(outcome.code), None
    index = ray.get(seq.account_by_l1.remote(l1_address), timeout=timeout_s)
    return int(ResultCode.OK), index
