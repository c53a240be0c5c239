"""raydex.engine: the deterministic perpetual-futures state machine (pure Python, no I/O).

``Engine.execute(cmd, now_ms, out) -> ResultCode`` is the whole interface for the sequencer;
``records()`` / ``Engine.from_records`` / ``state_hash()`` are the snapshot API; ``BareBook`` is the
matching-only floor used by the benchmark. See ``_engine`` for the semantics.
"""

from ._bare_book import BareBook
from ._engine import DEFAULT_ORDER_LIFETIME_MS, Engine, InvariantViolation, Result

__all__ = ["DEFAULT_ORDER_LIFETIME_MS", "BareBook", "Engine", "InvariantViolation", "Result"]
