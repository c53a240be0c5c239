"""raydex.codecs: every wire layout declared once (construct), with derived hot codecs, Arrow
schemas, Lighter JSON and Lighter signatures (``raydex.codecs.signing``). See ``_wire`` for how one
declaration feeds the rest."""

from typing import TYPE_CHECKING

from . import _enums, _events, _records, _tx
from ._batch import (
    MAX_BATCH_TXS,
    TxOutcome,
    decode_batch,
    decode_outcomes,
    encode_batch,
    encode_batch_frames,
    encode_outcomes,
)
from ._block import (
    BLOCK_CONSTRUCT,
    BLOCK_DECODE_ACCELERATED,
    BLOCK_HEADER_CONSTRUCT,
    HEADER_SIZE,
    Block,
    BlockHeader,
    decode_block,
    decode_block_checked,
    decode_block_loop,
    decode_block_of,
    decode_block_reference,
    decode_body,
    encode_block,
    encode_block_body,
    encode_block_reference,
    encode_event,
    peek_block_header,
    stamp_block,
    unstamp_block,
)
from ._enums import *  # noqa: F403
from ._errors import CodecError
from ._events import *  # noqa: F403
from ._hot import HOT, HotCodec, codec_of, field_format, int_bounds
from ._json import (
    lots_to_str,
    str_to_lots,
    str_to_ticks,
    str_to_usdc,
    ticks_to_str,
    tx_from_json,
    tx_to_json,
    tx_to_json_str,
    usdc_to_str,
)
from ._market import MARKET_PARAMS
from ._records import *  # noqa: F403
from ._signing import (
    DEFAULT_CHAIN_ID,
    Verifier,
    generate_key,
    l1_signer,
    lighter_info,
    message_hash_of,
    public_key_of,
    sign_tx,
    signer_key,
    transfer_l1_signer,
    tx_hash_of,
    verify_tx,
)
from ._tx import *  # noqa: F403
from ._tx import grouped_canonical, grouped_orders, grouped_slots
from ._txcodec import decode_tx, encode_tx, is_signed_type, tx_hash, tx_type_of
from ._txlist import decode_tx_list, encode_tx_list
from ._walcodec import (
    REPLICATE_DIVERGED,
    REPLICATE_FENCED,
    REPLICATE_GAP,
    REPLICATE_OK,
    Refusal,
    ReplicateReply,
    WalBlock,
    WalReadReply,
    WalRecordInfo,
    decode_replicate,
    decode_replicate_reply,
    decode_wal_read_reply,
    decode_wal_read_request,
    decode_wal_record,
    encode_replicate,
    encode_replicate_reply,
    encode_restored_wal_record,
    encode_wal_read_reply,
    encode_wal_read_request,
    encode_wal_record,
    find_wal_record,
    peek_wal_record,
    read_wal_records,
    wal_record_crc,
)
from ._wire import BY_CLASS, REGISTRY, FieldSpec, Json, Range, WireSpec, spec_of, wire

if TYPE_CHECKING:
    from ._arrow import (
        TABLES as TABLES,
    )
    from ._arrow import (
        arrow_schema as arrow_schema,
    )
    from ._arrow import (
        read_snapshot_ipc as read_snapshot_ipc,
    )
    from ._arrow import (
        records_to_tables as records_to_tables,
    )
    from ._arrow import (
        tables_to_records as tables_to_records,
    )
    from ._arrow import (
        write_snapshot_ipc as write_snapshot_ipc,
    )

# Arrow is imported lazily, on first attribute access (not in ``__all__``, so ``import *`` does not
# trigger it): pyarrow costs ~0.2 s and pulls in socket/threading, which importers of the plain
# types (the engine) must not pay for.
_ARROW_NAMES = frozenset(
    {
        "TABLES",
        "arrow_schema",
        "records_to_tables",
        "tables_to_records",
        "write_snapshot_ipc",
        "read_snapshot_ipc",
    }
)


def __getattr__(name: str) -> object:
    if name in _ARROW_NAMES:
        from . import _arrow

        return getattr(_arrow, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    *(n for n in dir(_enums) if not n.startswith("_") and n[0].isupper()),
    *(n for n in dir(_tx) if not n.startswith("_") and n[0].isupper()),
    *(n for n in dir(_events) if not n.startswith("_") and n[0].isupper()),
    *(n for n in dir(_records) if not n.startswith("_") and n[0].isupper()),
    "BY_CLASS",
    "REGISTRY",
    "FieldSpec",
    "Json",
    "Range",
    "WireSpec",
    "spec_of",
    "wire",
    "CodecError",
    "MARKET_PARAMS",
    "MAX_BATCH_TXS",
    "TxOutcome",
    "decode_batch",
    "decode_outcomes",
    "encode_batch",
    "encode_batch_frames",
    "encode_outcomes",
    "decode_tx_list",
    "encode_tx_list",
    "grouped_canonical",
    "grouped_orders",
    "grouped_slots",
    "Refusal",
    "WalBlock",
    "WalReadReply",
    "WalRecordInfo",
    "REPLICATE_DIVERGED",
    "REPLICATE_FENCED",
    "REPLICATE_GAP",
    "REPLICATE_OK",
    "ReplicateReply",
    "decode_replicate",
    "decode_replicate_reply",
    "encode_replicate",
    "encode_replicate_reply",
    "decode_wal_read_reply",
    "decode_wal_read_request",
    "encode_wal_read_reply",
    "encode_wal_read_request",
    "decode_wal_record",
    "encode_restored_wal_record",
    "encode_wal_record",
    "find_wal_record",
    "peek_wal_record",
    "wal_record_crc",
    "read_wal_records",
    "field_format",
    "int_bounds",
    "HOT",
    "HotCodec",
    "codec_of",
    "decode_tx",
    "encode_tx",
    "is_signed_type",
    "tx_hash",
    "tx_hash_of",
    "tx_type_of",
    "BLOCK_CONSTRUCT",
    "BLOCK_HEADER_CONSTRUCT",
    "BLOCK_DECODE_ACCELERATED",
    "HEADER_SIZE",
    "Block",
    "BlockHeader",
    "decode_block",
    "decode_block_of",
    "decode_block_checked",
    "decode_block_loop",
    "decode_block_reference",
    "decode_body",
    "encode_block",
    "encode_block_body",
    "encode_block_reference",
    "encode_event",
    "peek_block_header",
    "stamp_block",
    "unstamp_block",
    "lots_to_str",
    "str_to_lots",
    "str_to_ticks",
    "str_to_usdc",
    "ticks_to_str",
    "tx_from_json",
    "tx_to_json",
    "tx_to_json_str",
    "usdc_to_str",
    "DEFAULT_CHAIN_ID",
    "Verifier",
    "generate_key",
    "l1_signer",
    "transfer_l1_signer",
    "lighter_info",
    "message_hash_of",
    "public_key_of",
    "sign_tx",
    "signer_key",
    "verify_tx",
]
