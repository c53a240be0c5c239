"""Hot codecs: a precompiled ``struct.Struct`` per registered fixed layout, derived at import.

For every type in the ``@wire`` registry, :func:`codec_of` returns a :class:`HotCodec` whose
``struct.Struct`` format is derived field by field from the construct declaration (little-endian;
``Int8ul``->``B``, ``Int16ul``->``H``, ``Int32ul``->``I``, ``Int32sl``->``i``, ``Int64ul``->``Q``,
``Int64sl``->``q``, ``Bytes(n)``->``ns``, ``PaddedString(n, 'ascii')``->``ns`` with NULs stripped on
decode and padded on encode). The construct ``Struct`` stays the reference: a property test proves
both produce the same bytes and the same objects for every registered type.

Semantics and caller duties:

- ``decode(buf, off)`` is for trusted bytes (our own sequencer's output): it reads ``size`` bytes at
  ``off``, ignores anything after them and does not check ``Range`` extras. It still raises only
  :class:`CodecError` (truncation, bad ASCII).
- ``decode_checked(buf)`` is for untrusted bytes: the buffer must be exactly ``size`` bytes and
  every ``Range`` extra must hold, else :class:`CodecError` naming the type and field.
- ``encode`` never truncates or pads silently: a wrong-length ``bytes`` field, a too-long or
  non-ASCII symbol or an integer outside its C type raises :class:`CodecError`. It does not check
  ``Range`` extras (call ``validate``); the engine only emits in-range values.

Cost: one ``pack`` or ``unpack_from`` per value, and in ``decode`` the NamedTuple's build
(``tuple.__new__``, more than half of it); ``decode_checked`` adds a comparison per ``Range`` extra.
"""

from __future__ import annotations

import struct as _struct
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

import construct as cs

from . import _events, _records, _tx, _wal  # noqa: F401  (register every layout first)
from ._errors import CodecError
from ._wire import BY_CLASS, REGISTRY, WireSpec

T = TypeVar("T")
Buffer = bytes | bytearray | memoryview

#: construct spells 32-bit fields ``<L``/``<l``; both mean 4 bytes with the ``<`` prefix.
_INT_FORMATS = {
    "<B": "B",
    "<H": "H",
    "<I": "I",
    "<L": "I",
    "<i": "i",
    "<l": "i",
    "<Q": "Q",
    "<q": "q",
}


def field_format(con: Any) -> str:
    """The ``struct`` format (no ``<`` prefix) of one construct field; TypeError if not fixed."""
    if isinstance(con, cs.FormatField) and con.fmtstr in _INT_FORMATS:
        return _INT_FORMATS[con.fmtstr]
    if isinstance(con, cs.Bytes) and isinstance(con.length, int):
        return f"{con.length}s"
    if (
        isinstance(con, cs.StringEncoded)
        and con.encoding == "ascii"
        and isinstance(con.subcon, cs.FixedSized)
        and isinstance(con.subcon.length, int)
        and isinstance(con.subcon.subcon, cs.NullStripped)
    ):
        return f"{con.subcon.length}s"
    raise TypeError(f"no fixed struct format for construct field {con!r}")


def int_bounds(fmt: str) -> tuple[int, int] | None:
    """Inclusive domain of an integer struct format char, None for byte/str fields."""
    if fmt[-1] == "s":
        return None
    bits = _struct.calcsize("<" + fmt) * 8
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if fmt.islower() else (0, (1 << bits) - 1)


def struct_of(constructs: list[Any] | tuple[Any, ...]) -> _struct.Struct:
    """A little-endian ``struct.Struct`` for a sequence of fixed construct fields."""
    return _struct.Struct("<" + "".join(field_format(c) for c in constructs))


class HotCodec(Generic[T]):
    """The derived fast codec of one wire type. Attributes are plain and bound once, at import.

    ``struct`` packs the layout; ``tagged`` packs the 1-byte family tag followed by the layout (the
    tx and block framing). ``size`` is the layout length without the tag.
    """

    __slots__ = (
        "bytes_fields",
        "cls",
        "decode",
        "encode",
        "encode_into",
        "encode_tagged",
        "ranges",
        "size",
        "spec",
        "struct",
        "tag",
        "tagged",
        "text_fields",
    )
    spec: WireSpec
    cls: type[T]
    tag: int
    struct: _struct.Struct
    tagged: _struct.Struct
    size: int
    text_fields: tuple[tuple[int, int], ...]
    bytes_fields: tuple[tuple[int, int], ...]
    ranges: tuple[tuple[int, int, int, str], ...]
    encode: Callable[[T], bytes]
    encode_tagged: Callable[[T], bytes]
    encode_into: Callable[[bytearray | memoryview, int, T], int]
    decode: Callable[[Buffer, int], T]

    def __init__(self, spec: WireSpec) -> None:
        self.spec = spec
        self.cls = spec.cls
        self.tag = int(spec.tag)
        fmts = [field_format(f.construct) for f in spec.fields]
        self.struct = _struct.Struct("<" + "".join(fmts))
        self.tagged = _struct.Struct("<B" + "".join(fmts))
        self.size = self.struct.size
        #: (index, length) of str fields (NUL-padded ASCII) and of fixed-length bytes fields.
        self.text_fields = tuple(
            (i, int(fmt[:-1]))
            for i, (f, fmt) in enumerate(zip(spec.fields, fmts, strict=True))
            if fmt.endswith("s") and f.py_type is str
        )
        self.bytes_fields = tuple(
            (i, int(fmt[:-1]))
            for i, (f, fmt) in enumerate(zip(spec.fields, fmts, strict=True))
            if fmt.endswith("s") and f.py_type is not str
        )
        #: (index, lo, hi, name) of every field with a Range extra.
        self.ranges = tuple(
            (i, r.lo, r.hi, f.name) for i, f in enumerate(spec.fields) if (r := f.range) is not None
        )
        self.encode = self._make_encode(self.struct.pack, None)
        self.encode_tagged = self._make_encode(self.tagged.pack, self.tag)
        self.encode_into = self._make_into()
        self.decode = self._make_decode()

    # ---- encode ----------------------------------------------------------------------------

    def prepare(self, obj: T | tuple[Any, ...]) -> tuple[Any, ...]:
        """The values ``struct`` packs: str fields ASCII-encoded; lengths checked (no silent pad).

        ``obj`` may be a prefix of the layout's values (the signed form drops ``sig``).
        """
        seq = cast(tuple[Any, ...], obj)
        count = len(seq)
        if not self.text_fields:  # bytes fields only: check lengths, pack the tuple as it is
            for i, n in self.bytes_fields:
                if i < count and (not isinstance(seq[i], bytes | bytearray) or len(seq[i]) != n):
                    raise CodecError(
                        f"needs exactly {n} bytes",
                        type_name=self.cls.__name__,
                        field=self.spec.fields[i].name,
                    )
            return seq
        vals: list[Any] = list(seq)
        name = self.cls.__name__
        for i, n in self.text_fields:
            if i >= count:
                break
            try:
                raw = vals[i].encode("ascii")
            except (UnicodeEncodeError, AttributeError) as e:
                raise CodecError(
                    f"not an ASCII str: {e}", type_name=name, field=self.spec.fields[i].name
                ) from None
            if len(raw) > n:
                raise CodecError(
                    f"longer than {n} bytes", type_name=name, field=self.spec.fields[i].name
                )
            vals[i] = raw
        for i, n in self.bytes_fields:
            if i >= count:
                break
            v = vals[i]
            if not isinstance(v, bytes | bytearray) or len(v) != n:
                raise CodecError(
                    f"needs exactly {n} bytes", type_name=name, field=self.spec.fields[i].name
                )
        return tuple(vals)

    def _fail_pack(self, err: _struct.error) -> CodecError:
        return CodecError(f"cannot encode: {err}", type_name=self.cls.__name__)

    def _make_encode(self, pack: Callable[..., bytes], tag: int | None) -> Callable[[T], bytes]:
        prepare = self.prepare if self.text_fields or self.bytes_fields else None
        fail = self._fail_pack
        if tag is None:
            if prepare is None:

                def encode(obj: T) -> bytes:
                    try:
                        return pack(*obj)  # type: ignore[misc]
                    except _struct.error as e:
                        raise fail(e) from None
            else:

                def encode(obj: T) -> bytes:
                    try:
                        return pack(*prepare(obj))
                    except _struct.error as e:
                        raise fail(e) from None
        elif prepare is None:

            def encode(obj: T) -> bytes:
                try:
                    return pack(tag, *obj)  # type: ignore[misc]
                except _struct.error as e:
                    raise fail(e) from None
        else:

            def encode(obj: T) -> bytes:
                try:
                    return pack(tag, *prepare(obj))
                except _struct.error as e:
                    raise fail(e) from None

        return encode

    def _make_into(self) -> Callable[[bytearray | memoryview, int, T], int]:
        pack_into = self.struct.pack_into
        size = self.size
        prepare = self.prepare if self.text_fields or self.bytes_fields else tuple
        fail = self._fail_pack

        def encode_into(buf: bytearray | memoryview, off: int, obj: T) -> int:
            """Pack ``obj`` into ``buf`` at ``off``; returns the offset just past it."""
            try:
                pack_into(buf, off, *prepare(obj))  # type: ignore[arg-type]
            except _struct.error as e:
                raise fail(e) from None
            return off + size

        return encode_into

    # ---- decode ----------------------------------------------------------------------------

    def _make_decode(self) -> Callable[[Buffer, int], T]:
        unpack_from = self.struct.unpack_from
        cls: Any = self.cls
        new = tuple.__new__
        name = cls.__name__
        size = self.size
        text = self.text_fields

        def fail(buf: Buffer, off: int, err: Exception) -> CodecError:
            if isinstance(err, _struct.error):
                return CodecError(
                    f"truncated: needs {size} bytes at offset {off}, buffer has {len(buf)}",
                    type_name=name,
                )
            return CodecError(f"bad ASCII text: {err}", type_name=name)

        if not text:

            def decode(buf: Buffer, off: int = 0) -> T:
                try:
                    return new(cls, unpack_from(buf, off))  # type: ignore[no-any-return]
                except _struct.error as e:
                    raise fail(buf, off, e) from None
        else:

            def decode(buf: Buffer, off: int = 0) -> T:
                try:
                    vals = list(unpack_from(buf, off))
                    for i, _ in text:
                        vals[i] = vals[i].rstrip(b"\0").decode("ascii")
                except (_struct.error, UnicodeDecodeError) as e:
                    raise fail(buf, off, e) from None
                return new(cls, vals)  # type: ignore[no-any-return]

        return decode

    def validate(self, obj: T) -> T:
        """Enforce every ``Range`` extra of the layout; returns ``obj`` or raises CodecError."""
        for i, lo, hi, field in self.ranges:
            v = obj[i]  # type: ignore[index]
            if not lo <= v <= hi:
                raise CodecError(
                    f"{v} out of range [{lo}, {hi}]", type_name=self.cls.__name__, field=field
                )
        return obj

    def decode_checked(self, buf: Buffer, off: int = 0) -> T:
        """Untrusted bytes: exactly ``size`` bytes from ``off`` to the end, Range enforced."""
        if len(buf) - off != self.size:
            raise CodecError(
                f"needs exactly {self.size} bytes, got {len(buf) - off}",
                type_name=self.cls.__name__,
            )
        return self.validate(self.decode(buf, off))


#: class -> hot codec, for every registered wire type.
HOT: dict[type, HotCodec[Any]] = {cls: HotCodec(spec) for cls, spec in BY_CLASS.items()}
#: family -> tag -> hot codec.
HOT_BY_TAG: dict[str, dict[int, HotCodec[Any]]] = {
    family: {int(tag): HOT[spec.cls] for tag, spec in specs.items()}
    for family, specs in REGISTRY.items()
}


def codec_of(cls: type[T]) -> HotCodec[T]:
    """The hot codec of a registered wire type (KeyError for an unregistered class).

    Types registered after this module was imported (another family declared later) get their
    codec built on first use and cached.
    """
    codec = HOT.get(cls)
    if codec is None:
        spec = BY_CLASS[cls]
        codec = HOT[cls] = HotCodec(spec)
        HOT_BY_TAG.setdefault(spec.family, {})[int(spec.tag)] = codec
    return codec
