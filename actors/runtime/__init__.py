"""What every raydex actor shell does the same way (``shell``): pin itself to its bundle's cores,
apply its role's GC policy, say where it runs, export its metrics; and (``supervise``) restart a
background loop that failed, or exit the process so Ray restarts the actor; and (``held``) what a
follower answers a sequencer that lost its log's tail; and (``primary``) which sequencer a
follower follows after a takeover. A leaf: it imports no role."""

from .held import MAX_DIGESTS, MAX_FRAMES, HeldBlocks, RecentBlocks, held_blocks
from .primary import ARBITER_NAME, PrimaryTargets, PrimaryWatch, find_primary, targets_of
from .shell import (
    DEPLOYMENT_ENV,
    LIVE_HINT,
    LIVE_LOG_INTERVAL_S,
    LIVE_LOG_PREFIX,
    METRICS_INTERVAL_S,
    ActorRuntime,
    advertised_host,
    current_namespace,
    live_line,
    pin_actor,
    short_hash,
)
from .supervise import EXIT_STATUS, Supervisor, exit_process, log_fatal

__all__ = [
    "ARBITER_NAME",
    "PrimaryTargets",
    "PrimaryWatch",
    "find_primary",
    "targets_of",
    "DEPLOYMENT_ENV",
    "EXIT_STATUS",
    "LIVE_HINT",
    "LIVE_LOG_INTERVAL_S",
    "LIVE_LOG_PREFIX",
    "MAX_DIGESTS",
    "MAX_FRAMES",
    "METRICS_INTERVAL_S",
    "ActorRuntime",
    "HeldBlocks",
    "RecentBlocks",
    "Supervisor",
    "advertised_host",
    "current_namespace",
    "exit_process",
    "held_blocks",
    "live_line",
    "log_fatal",
    "pin_actor",
    "short_hash",
]
