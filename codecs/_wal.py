"""Write-ahead log record layout (codec: ``_walcodec``; files: ``actors/sequencer/wal.py``).

One record per block: a fixed header, then the block's ``count`` executed transactions, each as a
``uint16`` length and its tagged wire form (``encode_tx``), then ``refused`` fixed-size entries for
the txs the sequencer refused before the engine (bad signature, unknown key, operator-only):
``uint32`` position among the block's txs + the ``TxExecuted`` layout it published for them. With
the refusals logged, a block rebuilt from the WAL is byte-identical to the one first published, so
"same seq, same bytes" is a valid test of a follower's history (``actors/snapshot/follow.py``).

A **restored** record (``WAL_MAGIC_RESTORED``) holds a block the sequencer's log had lost (a
damaged tail) and took back from its followers: the same header (``count`` and ``refused`` 0),
then ``u32 origin_crc`` (the identity of the record it replaces, or the frame's crc32 when no
follower knew it) and the block's delta frame exactly as first published. It is replayed by
folding the frame's events into the state, not by executing txs (it holds none).

**Layout 3** (``WAL_MAGIC_3``, ``WAL_MAGIC_RESTORED_3``) is layout 2 with the ``epoch`` that
sequenced the block appended to the header (``WalRecordHeader3``): the arbiter's epoch of the
primary that closed it (``actors/sequencer/arbiter.py``). A record of epoch 0 (a deployment
without an arbiter) is written in layout 2, byte for byte as before, so logs and their crcs do
not change where there is no arbiter; both layouts are read, a layout-2 record as epoch 0.

``crc32`` covers everything after the crc field, so a torn or damaged record is detected on
recovery. ``WAL_MAGIC`` starts every record and names the layout version: a log written with the
first layout (``WAL_MAGIC_V1``, no ``refused`` field) is refused with a clear error rather than
read as damage.
"""

from __future__ import annotations

from typing import Annotated, NamedTuple

from ._wire import U32, U64, wire

WAL = "wal"
WAL_MAGIC = 0x32445857  # "WXD2" little-endian: marks the start of every record (layout 2)
WAL_MAGIC_V1 = 0x52445857  # "WXDR": layout 1 (no refusals); not read by this version
WAL_MAGIC_RESTORED = 0x42445857  # "WXDB": a block restored from the followers (a delta frame)
WAL_MAGIC_3 = 0x33445857  # "WXD3": layout 3, layout 2 with the block's epoch in the header
WAL_MAGIC_RESTORED_3 = 0x43445857  # "WXDC": a restored block, layout 3


@wire(WAL, 1)
class WalRecordHeader(NamedTuple):
    magic: Annotated[int, U32]
    body_len: Annotated[int, U32]
    crc32: Annotated[int, U32]
    seq: Annotated[int, U64]
    timestamp_ns: Annotated[int, U64]
    count: Annotated[int, U32]  # type: ignore[assignment]  # shadows tuple.count
    refused: Annotated[int, U32]


@wire(WAL, 3)
class WalRecordHeader3(NamedTuple):
    magic: Annotated[int, U32]
    body_len: Annotated[int, U32]
    crc32: Annotated[int, U32]
    seq: Annotated[int, U64]
    timestamp_ns: Annotated[int, U64]
    count: Annotated[int, U32]  # type: ignore[assignment]  # shadows tuple.count
    refused: Annotated[int, U32]
    #: the epoch of the primary that sequenced the block (the arbiter's)
    epoch: Annotated[int, U32]
