"""Group commit: the WAL's writes and syncs on their own thread, off the sequencer's loop.

::

    sequencer loop thread                      journal thread
    close block N ─► submit(N, record) ──────► write N, N+1, ... (all queued) ─► one fsync
    close block N+1 ─► submit(...)  (no wait)                                        │
    on_durable(N+1) ◄──── call_soon_threadsafe ◄─────────────────────────────────────┘
    publish N, N+1; release their outcomes

The loop keeps executing and closing blocks while the disk works, and one sync covers every record
written since the last; a tx's acknowledgment still waits for the sync that covers its block.
With ``realtime`` (the sequencer's ``journal_realtime``) the thread asks for SCHED_FIFO: it sleeps
in the sync and wakes as soon as the disk answers; where the host refuses, ``policy`` says so.

Invariants: records are written in submit order (one writer thread); ``on_durable(seq, fsync_ns,
synced_at_ns)`` is called on the loop with non-decreasing seqs, only after every record up to
``seq`` is written and (``fsync="block"``) synced; ``durable_seq`` is the newest such seq. A write
or sync error stops the journal and is handed to the loop via ``on_error``: nothing after
``durable_seq`` may ever be acknowledged, and the sequencer must exit and restart from the disk.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable

from raydex.cluster.pinning import current_policy, try_thread_realtime

from .wal import Wal


class Journal:
    """Owns ``wal`` from :meth:`start` until :meth:`close` (see module docstring)."""

    def __init__(
        self,
        wal: Wal,
        loop: asyncio.AbstractEventLoop,
        on_durable: Callable[[int, int, int], None],
        on_error: Callable[[BaseException], None],
        realtime: bool = False,
        rt_priority: int = 10,
    ) -> None:
        self.wal = wal
        self.realtime = realtime
        self.rt_priority = rt_priority
        #: the journal thread's scheduling policy once it runs (``cluster.pinning`` names)
        self.policy = ""
        self.loop = loop
        self.on_durable = on_durable
        self.on_error = on_error
        # None: stop once what was queued before it is written and synced
        self._queue: queue.SimpleQueue[tuple[int, bytes] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="raydex-journal", daemon=True)
        self.syncs = 0
        self.records = 0
        #: the journal thread's CPU so far (ns; its writes and syncs: waiting costs none), read
        #: racily by the loop for the sequencer's step counters (``steps.py``)
        self.cpu_ns = 0
        #: newest seq written and synced (read on the loop after the thread stopped, or racy)
        self.durable_seq = wal.last_seq
        #: the write/sync error that stopped the journal, if any
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def submit(self, seq: int, record: bytes) -> None:
        """Queue block ``seq``'s record (loop thread; never blocks on the disk, takes no lock the
        journal thread holds: a ``SimpleQueue`` put wakes the thread only if it waits)."""
        self._queue.put((seq, record))

    def _run(self) -> None:
        self.policy = try_thread_realtime(self.rt_priority) if self.realtime else current_policy()
        wal = self.wal
        get, get_nowait = self._queue.get, self._queue.get_nowait
        while True:
            batch: list[tuple[int, bytes]] = []
            stop = False
            item = get()  # waits (GIL released) until a record or the stop comes
            while True:  # and takes everything queued meanwhile: one fsync for all of it
                if item is None:
                    stop = True
                else:
                    batch.append(item)
                try:
                    item = get_nowait()
                except queue.Empty:
                    break
            if batch:
                try:
                    for seq, record in batch:
                        wal.write_record(seq, record)
                    sync_ns = wal.sync()
                except BaseException as exc:  # the loop decides; nothing is acknowledged after
                    self.error = exc
                    self.loop.call_soon_threadsafe(self.on_error, exc)
                    return
                self.durable_seq = batch[-1][0]
                self.syncs += 1
                self.records += len(batch)
                # when the sync returned: the loop measures how long it took to run the callback
                done_ns = time.perf_counter_ns()
                self.loop.call_soon_threadsafe(self.on_durable, batch[-1][0], sync_ns, done_ns)
            self.cpu_ns = time.thread_time_ns()
            if stop:
                return

    def close(self) -> None:
        """Drain what is queued (written and synced), then stop the thread."""
        self._queue.put(None)
        self._thread.join()
