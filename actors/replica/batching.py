"""The micro-batcher: concurrent callers' txs coalesced into batches to the sequencer.

::

    execute_txs ─► enqueue(txs, deadline) ─► queue ─► _pump (next loop turn) ─► batch ─► channel
                         ▲                                 at most max_in_flight out at once
                         └────── outcomes, or ApiError 21822 by the caller's deadline ◄──────┘

:class:`MicroBatcher` says why more than one batch may be out and what a caller gets at its
deadline. Knob: ``max_batch_txs`` caps one batch (larger: fewer round trips under load; a burst
waits behind at most the batches in flight).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

from raydex.codecs import (
    DEFAULT_CHAIN_ID,
    ResultCode,
    TxOutcome,
    decode_outcomes,
    encode_batch,
    tx_hash_of,
)

from ..transport import TransportError, TxChannel
from .deadlines import Deadlines
from .http import ApiError

__all__ = ["MicroBatcher"]

log = logging.getLogger(__name__)


class _Pending:
    """One caller's txs waiting in the micro-batcher."""

    __slots__ = ("at", "fut", "sent", "txs")

    def __init__(self, txs: list[Any], fut: asyncio.Future[list[TxOutcome]], at: float) -> None:
        self.txs = txs
        self.fut = fut
        #: event-loop time it was queued
        self.at = at
        #: taken into a batch (handed to the channel); before that a timed-out caller is dropped
        self.sent = False


def _keys(txs: list[Any]) -> set[tuple[int, int]]:
    """The (account, API key) nonce sequences ``txs`` belong to."""
    return {(getattr(tx, "account_index", -1), getattr(tx, "api_key_index", -1)) for tx in txs}


class MicroBatcher:
    """Coalesces concurrent callers' txs into batches, with at most ``max_in_flight`` batches
    out at once: what arrives while they are out rides the next one.

    Why more than one: the sequencer answers a batch once its block is durable. With one batch
    out, what reaches the replica meanwhile waits for that answer, so a block holds what arrived
    over a whole round trip (the WAL sync, the answer's way back, the replica's loop, the way
    there). With a second one out, it reaches the sequencer during the sync and joins the open
    block there (``block_close: durable``), so a block holds what arrived during one sync.
    Batches must execute in the order they were sent (a later tx of an API key carries a later
    nonce): more than one is out only on a channel that says it keeps order (``ordered``: one
    stream, batches dispatched in arrival order); the Ray plane does not, and gets one.

    Every caller waits until its own deadline: a caller whose txs were not taken into a batch by
    then is dropped from the queue (they are never sent); one whose batch is out gets 21822 (the
    txs may still execute). A transport failure fails the whole batch with 21822."""

    def __init__(
        self,
        channel: TxChannel,
        max_batch_txs: int,
        chain_id: int = DEFAULT_CHAIN_ID,
        max_in_flight: int = 1,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self.channel = channel
        self.max_batch_txs = max_batch_txs
        #: batches out at once: ``max_in_flight`` on an order-keeping channel, else 1
        self.max_in_flight = max_in_flight if getattr(channel, "ordered", False) else 1
        self.chain_id = chain_id  # for the tx hashes of an unknown outcome
        self._queue: deque[_Pending] = deque()
        self._pump_scheduled = False
        #: event-loop times the batches in flight were handed to the channel, oldest first
        self._out: list[float] = []
        self._sends: set[asyncio.Task[None]] = set()
        self._deadlines: Deadlines[_Pending] = Deadlines(self._expire)
        self.batches = 0
        self.txs = 0
        #: batches handed to the channel while another was out (pipelined)
        self.pipelined = 0
        #: callers answered 21822 because their deadline passed (sent or not)
        self.timeouts = 0
        #: txs answered 21822 unsent because an earlier queued tx of their key timed out
        self.dropped_behind = 0

    async def enqueue(self, txs: list[Any], deadline: float) -> list[TxOutcome]:
        """The sequencer's outcomes for ``txs`` (one per tx, in order), or ApiError 21822 by
        ``deadline`` (event-loop time)."""
        loop = asyncio.get_running_loop()
        item = _Pending(txs, loop.create_future(), loop.time())
        self._queue.append(item)
        if not self._pump_scheduled:
            # next loop turn: the callers of this turn go out together
            self._pump_scheduled = True
            loop.call_soon(self._pump)
        # The deadlines' one timer answers a caller still waiting at its deadline (deadlines.py;
        # cheaper than a timer per caller, and than asyncio.wait_for, which makes its own waiter
        # future and callbacks); a cancelled caller cancels ``item.fut`` with it.
        timer = self._deadlines.watch(item.fut, deadline, item)
        try:
            return await item.fut
        finally:
            if timer is not None:
                timer.cancel()

    def _expire(self, item: _Pending) -> None:
        """``item``'s deadline passed with no answer: 21822, "not sent" (and the callers queued
        behind it with any of its keys, ``_drop_followers``) or "may still execute". ``_pump``
        skips a queued item whose future is done and ``_send`` ignores a late reply for it."""
        if item.fut.done():
            return
        self.timeouts += 1
        if not item.sent:
            self._drop_followers(item)
            item.fut.set_exception(
                ApiError(
                    int(ResultCode.SEQUENCER_UNAVAILABLE),
                    "sequencer busy: the tx was not sent before its deadline; send it again",
                    503,
                )
            )
            return
        item.fut.set_exception(
            ApiError(
                int(ResultCode.SEQUENCER_UNAVAILABLE),
                "no answer from the sequencer before the deadline; the tx may still execute: "
                "look it up by hash",
                503,
                [tx_hash_of(tx, self.chain_id) for tx in item.txs],
            )
        )

    def delay(self) -> float:
        """Seconds the oldest tx on its way to the sequencer has waited: the oldest batch in
        flight (since it was handed over) or the oldest caller still queued, whichever is older; 0
        when idle. The overload door's signal (admission.py). O(1) but for callers that gave
        up at the queue's head."""
        now = asyncio.get_running_loop().time()
        oldest = self._out[0] if self._out else now
        for item in self._queue:
            if not item.fut.done():
                oldest = min(oldest, item.at)
                break
        return now - oldest

    def _drop_followers(self, dropped: _Pending) -> None:
        """``dropped`` leaves the queue unsent and its caller releases its nonces, so a tx of
        the same API key queued behind it carries a nonce the sequencer would refuse
        (INVALID_NONCE), and the replica's next nonce (highest pending + 1) would run past the
        hole. Such callers are answered "not sent" too (and release their nonces), and so,
        in turn, are those queued behind them with any of their keys. O(queue)."""
        keys = _keys(dropped.txs)
        behind = False
        for item in self._queue:
            if item is dropped:
                behind = True
            elif behind and not item.fut.done():
                mine = _keys(item.txs)
                if mine.isdisjoint(keys):
                    continue
                keys |= mine
                self.dropped_behind += len(item.txs)
                item.fut.set_exception(
                    ApiError(
                        int(ResultCode.SEQUENCER_UNAVAILABLE),
                        "sequencer busy: not sent, an earlier tx of this API key was not sent "
                        "before its deadline; take the next nonce from nextNonce and send again",
                        503,
                    )
                )

    def _pump(self) -> None:
        """Hand queued callers to the channel as batches while fewer than ``max_in_flight`` are
        out (each batch a task; they reach the channel in the order they were made)."""
        self._pump_scheduled = False
        queue = self._queue
        loop = asyncio.get_running_loop()
        while queue and len(self._out) < self.max_in_flight:
            batch: list[_Pending] = []
            n = 0
            while queue and (not batch or n + len(queue[0].txs) <= self.max_batch_txs):
                item = queue.popleft()
                if item.fut.done():  # its caller gave up before it was sent
                    continue
                item.sent = True
                batch.append(item)
                n += len(item.txs)
            if not batch:
                continue
            if self._out:
                self.pipelined += 1
            at = loop.time()
            self._out.append(at)
            task = loop.create_task(self._send(batch, at))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)

    async def _send(self, batch: list[_Pending], sent_at: float) -> None:
        txs = [tx for item in batch for tx in item.txs]
        try:
            reply = await self.channel.submit(encode_batch(txs))
            outcomes = [TxOutcome._make(o) for o in decode_outcomes(reply)]
        except TransportError as exc:
            for item in batch:
                if not item.fut.done():
                    item.fut.set_exception(
                        ApiError(
                            int(ResultCode.SEQUENCER_UNAVAILABLE),
                            f"sequencer unavailable ({type(exc).__name__}); the tx may "
                            "still execute: look it up by hash",
                            503,
                            [tx_hash_of(tx, self.chain_id) for tx in item.txs],
                        )
                    )
            return
        finally:
            self._out.remove(sent_at)
            self._pump()
        if len(outcomes) != len(txs):  # refused whole (undecodable, over the sequencer's cap)
            code = outcomes[0].code if outcomes else int(ResultCode.SEQUENCER_UNAVAILABLE)
            log.error("the sequencer refused a batch of %d txs whole: %d", len(txs), code)
            for item in batch:
                if not item.fut.done():
                    item.fut.set_exception(
                        ApiError(code, f"the sequencer refused the batch ({code})", 503)
                    )
            return
        self.batches += 1
        self.txs += len(txs)
        at = 0
        for item in batch:
            if not item.fut.done():
                item.fut.set_result(outcomes[at : at + len(item.txs)])
            at += len(item.txs)
