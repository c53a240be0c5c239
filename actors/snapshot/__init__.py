"""The snapshot holder: the full exchange state, materialized as Arrow snapshots.

==========  ==============================================================================
``holder``  ``SnapshotService`` (follows the sequencer, writes snapshots, serves catch-up) and
            ``SnapshotActor`` (the Ray shell; owns the snapshots it ``ray.put``\\ s)
``store``   the snapshot folder: durable, atomic Arrow IPC snapshots on disk, verified (state
            hash) on the way back into an engine, with fallback to older ones
``follow``  the follower's side of "a published block is never replaced": resume at the seq
            you hold and check the sequencer's block there (holder, committer, replicas)
==========  ==============================================================================
"""

from .deltas import DeltaState
from .follow import ONE_ATTEMPT, Diverged, Reconnect, block_digest, follow
from .holder import SnapshotActor, SnapshotConfig, SnapshotService
from .store import (
    LoadedSnapshot,
    SnapshotError,
    fold_frame,
    load_engine_snapshot,
    load_newest_snapshot,
    load_snapshot,
    newest_snapshot,
    quarantine,
    read_snapshot_meta,
    replay_block,
    snapshot_path,
    snapshot_seq,
    snapshots,
    write_snapshot,
)

__all__ = [
    "ONE_ATTEMPT",
    "DeltaState",
    "Diverged",
    "LoadedSnapshot",
    "Reconnect",
    "SnapshotActor",
    "SnapshotConfig",
    "SnapshotError",
    "SnapshotService",
    "block_digest",
    "fold_frame",
    "follow",
    "load_engine_snapshot",
    "load_newest_snapshot",
    "load_snapshot",
    "newest_snapshot",
    "quarantine",
    "read_snapshot_meta",
    "replay_block",
    "snapshot_path",
    "snapshot_seq",
    "snapshots",
    "write_snapshot",
]
