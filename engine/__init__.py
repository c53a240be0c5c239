"""raydex.engine: the deterministic perpetual-futures state machine (pure Python, no I/O).

``Engine.execute_into(cmd, now_ms) -> ResultCode`` is the sequencer's interface: the events go
into ``Engine.deltas`` (a ``Deltas``) as block bytes, handed over by ``take_deltas()``;
``Engine.execute(cmd, now_ms, out)`` appends them to ``out`` as NamedTuples instead;
``records()`` / ``Engine.from_records`` / ``state_hash()`` are the snapshot API;
``state_digest(records)`` is the state hash every role reports (engine or replica caches).
See ``_engine`` for the semantics and the module map. ``raydex.engine.rules`` holds the pure
order and margin rules (shared with the replica's dry-run) and ``raydex.engine.codes`` the
engine's result codes and order values as ints, derived from ``raydex.codecs``.

``COMPILED`` is True when the engine runs as mypyc-compiled extensions (``RAYDEX_MYPYC=1``
build, see ``setup.py``), False for the pure-Python default; both behave identically.
"""

from . import _engine
from ._deltas import Deltas
from ._digest import digest_steps, state_digest
from ._engine import (
    DEFAULT_ORDER_LIFETIME_MS,
    Engine,
    InvariantViolation,
    Result,
    records_hash,
)
from ._funding import HOUR_MS as FUNDING_INTERVAL_MS
from ._funding import funding_rate
from .rules import exposure

COMPILED: bool = not str(_engine.__file__).endswith((".py", ".pyc"))

__all__ = [
    "COMPILED",
    "DEFAULT_ORDER_LIFETIME_MS",
    "FUNDING_INTERVAL_MS",
    "Deltas",
    "Engine",
    "InvariantViolation",
    "Result",
    "exposure",
    "funding_rate",
    "digest_steps",
    "state_digest",
    "records_hash",
]
