"""The snapshot holder: the full exchange state, materialized as Arrow snapshots.

==========  ==============================================================================
``holder``  ``SnapshotService`` (follows the sequencer, writes snapshots, serves catch-up) and
            ``SnapshotActor`` (the Ray shell; owns the snapshots it ``ray.put``\\ s)
``store``   the snapshot folder: atomic Arrow IPC snapshots on disk, read back into an engine
==========  ==============================================================================
"""

from .holder import SnapshotActor, SnapshotConfig, SnapshotService
from .store import (
    load_engine_snapshot,
    newest_snapshot,
    read_snapshot_meta,
    replay_block,
    snapshot_path,
    write_snapshot,
)

__all__ = [
    "SnapshotActor",
    "SnapshotConfig",
    "SnapshotService",
    "load_engine_snapshot",
    "newest_snapshot",
    "read_snapshot_meta",
    "replay_block",
    "snapshot_path",
    "write_snapshot",
]
