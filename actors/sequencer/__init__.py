"""The sequencer: executes every transaction, closes blocks, logs them, fans them out.

==============  ==========================================================================
``service``     ``SequencerService`` (asyncio core: block loop, batches in, blocks out, WAL
                range reads, maintenance) and ``SequencerActor`` (the Ray shell: start,
                status, state_hash, operator; exits its process when it cannot go on)
``producer``    ``BlockProducer``: execute txs into the open block, close it, recover
``journal``     group commit: WAL writes and fsyncs on their own thread
``steps``       the CPU of each step (decode, engine, close, publish) as plain counters
``wal``         the write-ahead log files: segments, torn tail vs damage, index, pruning
``repair``      before serving: the rebuilt blocks checked against the committer's chain, a
                lost tail taken back from the followers (restored records)
``oracle``      the mark-price oracle that stamps marks toward each book's mid
``replication`` the primary's side of replicated durability: WAL records pushed to the
                standby, acked once synced there (``Replicator``)
``standby``     ``StandbyService``: the standby's log and hot engine; ``promote`` makes it
                the primary
==============  ==========================================================================
"""

from .journal import Journal
from .oracle import Oracle, oracle_commands
from .producer import BlockProducer, ClosedBlock
from .replication import Replicator
from .service import SequencerActor, SequencerConfig, SequencerService, SnapshotInfo
from .standby import StandbyActor, StandbyService
from .steps import StepCounters
from .wal import FsyncPolicy, Wal, WalError

__all__ = [
    "BlockProducer",
    "ClosedBlock",
    "FsyncPolicy",
    "Journal",
    "Oracle",
    "SequencerActor",
    "SequencerConfig",
    "SequencerService",
    "Replicator",
    "SnapshotInfo",
    "StandbyActor",
    "StandbyService",
    "StepCounters",
    "Wal",
    "WalError",
    "oracle_commands",
]
