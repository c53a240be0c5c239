"""Blocks: the sequenced binary deltas the sequencer publishes and every replica applies.

Layout (little-endian)::

    header  seq u64 | height u64 | timestamp_ns u64 | count u32        (28 bytes)
    body    count x ( event tag u8 | event layout )                    (see ``_events``)

Both halves are declared with construct (:data:`BLOCK_HEADER_CONSTRUCT`, :data:`BLOCK_CONSTRUCT`);
the construct codecs (:func:`encode_block_reference` / :func:`decode_block_reference`) are the
reference for tests and benchmarks, the hot ones are derived from the same registry.

- :func:`encode_block`: one ``struct.pack`` per event, joined once; CodecError for an unregistered
  event class or an unencodable value.
- :func:`decode_block`: trusted bytes from our sequencer: one C loop (``codecs/_blockdec.c``)
  where built, else ``unpack_from`` per event; CodecError only (truncated, unknown tag, trailing
  bytes); ``Range`` extras are not checked.
- :func:`decode_block_checked`: untrusted bytes: a count sanity check and every ``Range`` extra.
- :func:`peek_block_header`: the header alone, so a replica drops a duplicate or sees a gap
  without touching the body.
- :func:`stamp_block` / :func:`unstamp_block`: a frame prefixed with the crc32 of its WAL record
  (the snapshot holder's stream: the crc is the identity of the history it follows).

Cost: ``raydex bench codecs``; decoding is about a hand-written ``struct`` loop's cost.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat, starmap
from typing import Any, NamedTuple

import construct as cs

from ._errors import CodecError
from ._events import EVENT, Event
from ._hot import HOT_BY_TAG, Buffer, HotCodec, struct_of
from ._wire import REGISTRY, U32, U64

BLOCK_HEADER_CONSTRUCT = cs.Struct("seq" / U64, "height" / U64, "timestamp_ns" / U64, "count" / U32)
#: The reference for the whole block: header fields, then the count-prefixed tagged events.
BLOCK_CONSTRUCT = cs.Struct(
    *BLOCK_HEADER_CONSTRUCT.subcons[:3],
    "events"
    / cs.PrefixedArray(
        BLOCK_HEADER_CONSTRUCT.subcons[3].subcon,
        cs.Struct(
            "tag" / cs.Int8ul,
            "event"
            / cs.Switch(
                cs.this.tag,
                {int(tag): spec.construct for tag, spec in REGISTRY[EVENT].items()},
                default=cs.Error,
            ),
        ),
    ),
    cs.Terminated,
)

_HEADER = struct_of([sc.subcon for sc in BLOCK_HEADER_CONSTRUCT.subcons])
HEADER_SIZE = _HEADER.size

#: A block stamped with its WAL record's crc32 (``codecs.wal_record_crc``), for the snapshot holder.
STAMPED_BLOCK_CONSTRUCT = cs.Struct("record_crc" / U32, "block" / cs.GreedyBytes)
_STAMP = struct_of([STAMPED_BLOCK_CONSTRUCT.subcons[0].subcon])


class BlockHeader(NamedTuple):
    seq: int
    height: int
    timestamp_ns: int
    count: int  # type: ignore[assignment]  # shadows tuple.count: the wire name wins


class Block(NamedTuple):
    seq: int
    height: int
    timestamp_ns: int
    events: list[Event]


_EVENT_CODECS: dict[int, HotCodec[Any]] = HOT_BY_TAG[EVENT]
_MIN_EVENT = 1 + min(c.size for c in _EVENT_CODECS.values())

# Encode table: class -> (tagged pack, tag, fix). ``fix`` is None for all-integer layouts (the
# common case: no call at all); otherwise it returns the values to pack after the checks struct
# would skip (struct pads a short ``ns`` value silently) and the ASCII encoding of text fields.
_EncodeEntry = tuple[Callable[..., bytes], int, Callable[[Any], Any] | None]


def _bytes_checker(c: HotCodec[Any]) -> Callable[[Any], Any]:
    (i, n), name = c.bytes_fields[0], c.spec.fields[c.bytes_fields[0][0]].name

    def check(ev: Any) -> Any:
        if len(ev[i]) != n:
            raise CodecError(f"needs exactly {n} bytes", type_name=c.cls.__name__, field=name)
        return ev

    return check


def _encode_entry(c: HotCodec[Any]) -> _EncodeEntry:
    if c.text_fields or len(c.bytes_fields) > 1:
        return (c.tagged.pack, c.tag, c.prepare)
    if c.bytes_fields:
        return (c.tagged.pack, c.tag, _bytes_checker(c))
    return (c.tagged.pack, c.tag, None)


_ENCODE: dict[type, _EncodeEntry] = {c.cls: _encode_entry(c) for c in _EVENT_CODECS.values()}


def _unknown_tag(buf: Buffer, off: int) -> Any:
    raise CodecError(f"unknown event tag {buf[off]} at offset {off}", type_name="Block")


def _text_unpacker(c: HotCodec[Any]) -> Callable[[Buffer, int], list[Any]]:
    """unpack_from for a layout with text fields: the values with NULs stripped, ASCII decoded."""
    unpack_from = struct.Struct("<x" + c.struct.format[1:]).unpack_from
    text = [i for i, _ in c.text_fields]
    name = c.cls.__name__

    def unpack(buf: Buffer, off: int) -> list[Any]:
        vals = list(unpack_from(buf, off))
        try:
            for i in text:
                vals[i] = vals[i].rstrip(b"\0").decode("ascii")
        except UnicodeDecodeError as e:
            raise CodecError(f"bad ASCII text: {e}", type_name=name) from None
        return vals

    return unpack


# Decode table: 256 entries indexed by the tag byte -> (unpack_from of "x" + layout, i.e. the tag
# skipped as a pad byte, class, tag + layout size). Layouts with text get an unpacker that also
# decodes the text. Unknown tags unpack with ``_unknown_tag``, which raises CodecError. (One list
# of triples measured ~4% faster than three parallel lists indexed by the tag.)
_DecodeEntry = tuple[Callable[[Buffer, int], Any], type, int]
_DECODE: list[_DecodeEntry] = [(_unknown_tag, tuple, 1)] * 256
for _c in _EVENT_CODECS.values():
    _DECODE[_c.tag] = (
        _text_unpacker(_c)
        if _c.text_fields
        else struct.Struct("<x" + _c.struct.format[1:]).unpack_from,
        _c.cls,
        _c.size + 1,
    )

_NEW: Callable[..., Any] = tuple.__new__

try:  # optional C extension (codecs/_blockdec.c), built by every install where a compiler is
    from . import _blockdec  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - exercised where no C compiler exists
    _blockdec = None
if _blockdec is not None:
    _blockdec.configure(
        [
            (c.tag, c.cls, c.struct.format[1:], _DECODE[c.tag][0] if c.text_fields else None)
            for c in _EVENT_CODECS.values()
        ],
        HEADER_SIZE,
    )
    _decode_events: Callable[[Buffer, int], list[Any] | None] | None = _blockdec.decode_events
else:  # pragma: no cover
    _decode_events = None
#: whether :func:`decode_block` runs the C loop (``codecs/_blockdec.c``)
BLOCK_DECODE_ACCELERATED = _decode_events is not None


def encode_block(seq: int, height: int, timestamp_ns: int, events: Sequence[Event]) -> bytes:
    """Header + tagged events, packed per event and joined once."""
    table = _ENCODE
    try:
        parts = [_HEADER.pack(seq, height, timestamp_ns, len(events))]
        append = parts.append
        for ev in events:
            pack, tag, fix = table[type(ev)]
            append(pack(tag, *ev) if fix is None else pack(tag, *fix(ev)))
    except KeyError as e:
        raise CodecError(f"not a registered event class: {e}", type_name="Block") from None
    except (struct.error, TypeError) as e:
        raise CodecError(f"cannot encode: {e}", type_name="Block") from None
    return b"".join(parts)


def encode_event(ev: Event) -> bytes:
    """One event as it sits in a block body: its tag byte, then its layout. CodecError as
    :func:`encode_block` raises it."""
    try:
        pack, tag, fix = _ENCODE[type(ev)]
    except KeyError as e:
        raise CodecError(f"not a registered event class: {e}", type_name="Block") from None
    try:
        return pack(tag, *ev) if fix is None else pack(tag, *fix(ev))
    except (struct.error, TypeError) as e:
        raise CodecError(f"cannot encode: {e}", type_name="Block") from None


def encode_block_body(seq: int, height: int, timestamp_ns: int, count: int, body: bytes) -> bytes:
    """A block from a body already laid out (``count`` events, each as :func:`encode_event`
    writes it: what the engine's ``Deltas`` hold): the header, then the body as it is."""
    return _HEADER.pack(seq, height, timestamp_ns, count) + body


def decode_body(body: Buffer, count: int) -> list[Event]:
    """The ``count`` events of a block body (the bytes after a header), as :func:`decode_block`
    decodes them; CodecError if they are not exactly that."""
    return decode_block(_HEADER.pack(0, 0, 0, count) + bytes(body)).events


def peek_block_header(buf: Buffer) -> BlockHeader:
    """The header only; CodecError if ``buf`` is shorter than a header."""
    try:
        return BlockHeader._make(_HEADER.unpack_from(buf, 0))
    except struct.error:
        raise CodecError(
            f"truncated header: needs {HEADER_SIZE} bytes, got {len(buf)}", type_name="Block"
        ) from None


def stamp_block(frame: bytes, record_crc: int) -> bytes:
    """``frame`` prefixed with the crc of its WAL record (see the module docstring)."""
    return _STAMP.pack(record_crc) + frame


def unstamp_block(buf: bytes) -> tuple[int, bytes]:
    """``(record_crc, block frame)`` of a stamped block; CodecError if it is too short."""
    if len(buf) < _STAMP.size + HEADER_SIZE:
        raise CodecError(f"stamped block of {len(buf)} bytes is too short", type_name="Block")
    crc: int = _STAMP.unpack_from(buf, 0)[0]
    return crc, buf[_STAMP.size :]


def decode_block(buf: Buffer) -> Block:
    """Decode a trusted block (our sequencer's). Raises CodecError only; no Range checks.

    With the C extension (``codecs/_blockdec.c``) one C loop builds the events: on the
    ``raydex bench apply`` stream ~124 against ~308 ns per event for the Python loop (CPU time,
    2,000 blocks of 10 txs, best of 5, same process). On a malformed body it returns None and
    the Python loop raises the CodecError.

    The Python loop (:func:`_decode_block_py`) has two phases: a loop walks the tags, unpacking
    each event's values into a plain tuple and noting its class; then
    ``starmap(tuple.__new__, zip(classes, values))`` builds the NamedTuples in C. Building them
    inside the loop (``new(cls, unpack(...))`` per event) costs ~20% more: per call the
    interpreter makes an argument tuple that ``zip`` reuses here.
    """
    seq, height, ts, count = peek_block_header(buf)
    if _decode_events is not None:
        events = _decode_events(buf, count)
        if events is not None:
            return Block(seq, height, ts, events)
        # malformed: the loop below raises the CodecError that says how
    return _decode_block_py(buf, seq, height, ts, count)


def decode_block_loop(buf: Buffer) -> Block:
    """:func:`decode_block` by its Python loop alone, C extension or not: what runs where the
    extension is not built (and the reference the extension is tested against)."""
    return _decode_block_py(buf, *peek_block_header(buf))


def _decode_block_py(buf: Buffer, seq: int, height: int, ts: int, count: int) -> Block:
    """:func:`decode_block`'s Python loop (the fallback, and the error path of the C one)."""
    table = _DECODE
    classes: list[type] = []
    values: list[Any] = []
    add_class, add_values = classes.append, values.append
    off = HEADER_SIZE
    try:
        for _ in repeat(None, count):
            unpack, cls, step = table[buf[off]]
            add_class(cls)
            add_values(unpack(buf, off))
            off += step
    except (IndexError, struct.error):
        raise _truncated(buf, off, len(values), count) from None
    if off != len(buf):
        raise CodecError(f"{len(buf) - off} trailing bytes after {count} events", type_name="Block")
    # starmap over zip, not map(_NEW, classes, values): see the docstring.
    events = list(starmap(_NEW, zip(classes, values, strict=True)))
    return Block(seq, height, ts, events)


def decode_block_of(buf: Buffer, kinds: frozenset[type]) -> Block:
    """:func:`decode_block` keeping only the events whose class is in ``kinds``, in order; the
    others are stepped over (every layout has a fixed size) and never built. For a follower that
    reads a few kinds of a block (the committer: balances, positions, tx outcomes, key changes)."""
    seq, height, ts, count = peek_block_header(buf)
    table = _DECODE
    classes: list[type] = []
    values: list[Any] = []
    off = HEADER_SIZE
    try:
        for _ in repeat(None, count):
            unpack, cls, step = table[buf[off]]
            if cls in kinds:
                classes.append(cls)
                values.append(unpack(buf, off))
            off += step
    except (IndexError, struct.error):
        off = len(buf) + 1
    if off > len(buf):  # a stepped-over event may end past the buffer too
        raise CodecError(
            f"truncated: {count} events need more than {len(buf)} bytes", type_name="Block"
        )
    if off != len(buf):
        raise CodecError(f"{len(buf) - off} trailing bytes after {count} events", type_name="Block")
    return Block(seq, height, ts, list(starmap(_NEW, zip(classes, values, strict=True))))


def _truncated(buf: Buffer, off: int, done: int, count: int) -> CodecError:
    return CodecError(
        f"truncated at event {done} of {count} (offset {off}, buffer {len(buf)} bytes)",
        type_name="Block",
    )


def decode_block_checked(buf: Buffer) -> Block:
    """Decode an untrusted block: structure as :func:`decode_block`, plus a count sanity check
    before any work and every ``Range`` extra of the event layouts. Raises CodecError only."""
    seq, height, ts, count = peek_block_header(buf)
    if count * _MIN_EVENT > len(buf) - HEADER_SIZE:
        raise CodecError(
            f"count {count} cannot fit in {len(buf) - HEADER_SIZE} body bytes", type_name="Block"
        )
    codecs = _EVENT_CODECS
    events: list[Any] = []
    off = HEADER_SIZE
    for _ in range(count):
        if off >= len(buf):
            raise _truncated(buf, off, len(events), count)
        codec = codecs.get(buf[off])
        if codec is None:
            raise CodecError(f"unknown event tag {buf[off]} at offset {off}", type_name="Block")
        events.append(codec.validate(codec.decode(buf, off + 1)))
        off += codec.size + 1
    if off != len(buf):
        raise CodecError(f"{len(buf) - off} trailing bytes after {count} events", type_name="Block")
    return Block(seq, height, ts, events)


# ---- construct reference -----------------------------------------------------------------------


def _as_container(events: Iterable[Event]) -> list[dict[str, Any]]:
    by_class = {spec.cls: int(tag) for tag, spec in REGISTRY[EVENT].items()}
    return [{"tag": by_class[type(ev)], "event": ev._asdict()} for ev in events]


def encode_block_reference(
    seq: int, height: int, timestamp_ns: int, events: Sequence[Event], *, compiled: Any = None
) -> bytes:
    """The construct reference encoder (``compiled``: a ``BLOCK_CONSTRUCT.compile()`` to use)."""
    con = compiled if compiled is not None else BLOCK_CONSTRUCT
    data = {"seq": seq, "height": height, "timestamp_ns": timestamp_ns}
    out: bytes = con.build({**data, "events": _as_container(events)})
    return out


def decode_block_reference(buf: Buffer, *, compiled: Any = None) -> Block:
    """The construct reference decoder; construct errors are reported as CodecError."""
    con = compiled if compiled is not None else BLOCK_CONSTRUCT
    try:
        c = con.parse(bytes(buf))
    except (cs.ConstructError, UnicodeDecodeError) as e:
        raise CodecError(f"construct: {e}", type_name="Block") from None
    specs = REGISTRY[EVENT]
    events: list[Any] = []
    for item in c.events:
        spec = specs[item.tag]
        events.append(spec.cls(*(item.event[f.name] for f in spec.fields)))
    return Block(c.seq, c.height, c.timestamp_ns, events)
