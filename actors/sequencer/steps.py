"""Where the sequencer's CPU goes, by step: plain integer accumulators bumped on the real path.

::

    tx batch in ─► decode ─► engine ─► (block) close ─► journal: WAL write + sync ─► publish
                   decode_ns  engine_ns     close_ns      Journal.cpu_ns              publish_ns

- ``decode``: a batch frame decoded into txs (``handle_batch``), once per batch;
- ``engine``: ``BlockProducer.submit`` of a batch: each tx's hash and WAL frame, and the engine's
  ``execute_into`` writing its events into the open block;
- ``close``: the block closed on the loop: its WAL record and delta frame encoded, handed to the
  journal (``_close_block``);
- WAL write and sync: the journal thread's own CPU (``Journal.cpu_ns``: its writes, the kernel's
  work in the sync; waiting for the disk costs no CPU);
- ``publish``: durable blocks into both rings (the replicas' frame, the holder's stamped copy),
  their outcomes released, and each batch's reply encoded.

Each is *CPU* time of the thread doing it (``time.thread_time_ns``), so another process or the
journal thread preempting the loop on a shared core is not counted in a step. What the steps do
not cover is the event loop and the data plane's sockets (reading batches, writing blocks and
replies), the tx-log reads, the oracle, GC and metrics: the process's CPU minus the steps
(``raydex bench sequencer`` reports it as the rest).

Cost: two clock reads (~0.3 µs each here) per step per batch or per block, never per tx.
"""

from __future__ import annotations

import dataclasses
import time

__all__ = ["StepClock", "StepCounters"]

#: the thread's CPU clock, read at a step's start and end
StepClock = time.thread_time_ns


@dataclasses.dataclass(slots=True)
class StepCounters:
    """Running totals since the service started (ns of thread CPU; see the module docstring)."""

    decode_ns: int = 0
    engine_ns: int = 0
    close_ns: int = 0
    publish_ns: int = 0
    #: batches decoded (refused ones included) and blocks published
    batches: int = 0
    blocks: int = 0

    def as_dict(self, journal_ns: int = 0) -> dict[str, int]:
        """The totals, with the journal thread's CPU as ``wal_ns``."""
        return {**dataclasses.asdict(self), "wal_ns": journal_ns}
