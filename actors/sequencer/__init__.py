"""The sequencer: executes every transaction, closes blocks, logs them, fans them out.

==============  ==========================================================================
``service``     ``SequencerService`` (asyncio core: block loop, batches in, blocks out) and
                ``SequencerActor`` (the Ray shell: start, status, operator)
``producer``    ``BlockProducer``: execute txs into the open block, close it, recover
``journal``     group commit: WAL writes and fsyncs on their own thread
``wal``         the write-ahead log files: segments, torn-tail handling, pruning
``oracle``      the mark-price oracle that stamps marks toward each book's mid
==============  ==========================================================================
"""

from .journal import Journal
from .producer import BlockProducer, ClosedBlock
from .service import SequencerActor, SequencerConfig, SequencerService
from .wal import FsyncPolicy, Wal, WalError

__all__ = [
    "BlockProducer",
    "ClosedBlock",
    "FsyncPolicy",
    "Journal",
    "SequencerActor",
    "SequencerConfig",
    "SequencerService",
    "Wal",
    "WalError",
]
