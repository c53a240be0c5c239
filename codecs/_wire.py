"""The one declaration behind every binary layout.

A wire type is a ``typing.NamedTuple`` whose fields are annotated ``Annotated[<py type>, <construct
field>, *extras]``. :func:`wire` reads those annotations once, at import, and records:

- ``construct``: the construct ``Struct`` (the reference codec; never used on the hot path),
- ``tag``: the type's tag inside its family (tx type for transactions, event tag for events),
- ``fields``: ``(name, construct field, extras)`` in declaration order.

Everything else (hot ``struct.Struct`` codecs, Arrow schemas, Lighter JSON field names, range checks
on untrusted bytes) is derived from this record in the sibling modules; nothing is written twice.

Field extras:

- :class:`Range` ``(lo, hi)``: inclusive domain, checked when decoding untrusted input.
- :class:`Json` ``("Name")``: the Lighter JSON key when it is not the PascalCase of the field name.
- :class:`Attr` ``(type, nil)``: the field is Lighter's ``L2TxAttributes`` entry ``type``, not a
  key of its own in the tx's JSON; ``nil`` is that entry's "not set" value, the field's default.

NamedTuples are immutable and cheap to build (a tuple), and their field order is the wire order, so
a hot decode is ``tuple.__new__(cls, struct.unpack_from(...))``.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import construct as cs

U8 = cs.Int8ul
U16 = cs.Int16ul
U32 = cs.Int32ul
I32 = cs.Int32sl
U64 = cs.Int64ul
I64 = cs.Int64sl
Bytes20 = cs.Bytes(20)
Bytes32 = cs.Bytes(32)
Bytes40 = cs.Bytes(40)
Bytes65 = cs.Bytes(65)
Bytes80 = cs.Bytes(80)
Symbol = cs.PaddedString(16, "ascii")


@dataclass(frozen=True, slots=True)
class Range:
    """Inclusive domain of an integer field; enforced on untrusted input."""

    lo: int
    hi: int


@dataclass(frozen=True, slots=True)
class Json:
    """Lighter JSON key of a field whose name is not simply the PascalCase of the field name."""

    name: str


@dataclass(frozen=True, slots=True)
class Attr:
    """The field carries Lighter's ``L2TxAttributes`` entry ``type`` (``nil``: not set)."""

    type: int
    nil: int


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    construct: Any
    py_type: type
    extras: tuple[object, ...]

    @property
    def range(self) -> Range | None:
        for e in self.extras:
            if isinstance(e, Range):
                return e
        return None

    @property
    def attribute(self) -> Attr | None:
        for e in self.extras:
            if isinstance(e, Attr):
                return e
        return None

    @property
    def json_name(self) -> str:
        for e in self.extras:
            if isinstance(e, Json):
                return e.name
        return "".join(part.capitalize() for part in self.name.split("_"))


@dataclass(frozen=True, slots=True)
class WireSpec:
    family: str
    tag: int
    cls: type
    fields: tuple[FieldSpec, ...]
    construct: Any


#: family -> tag -> spec, and class -> spec.
REGISTRY: dict[str, dict[int, WireSpec]] = {}
BY_CLASS: dict[type, WireSpec] = {}

T = TypeVar("T")


def wire(family: str, tag: int) -> Callable[[type[T]], type[T]]:
    """Register a NamedTuple as the layout of ``tag`` in ``family`` (see module docstring)."""

    def register(cls: type[T]) -> type[T]:
        hints = typing.get_type_hints(cls, include_extras=True)
        fields: list[FieldSpec] = []
        for name in cls._fields:  # type: ignore[attr-defined]
            hint = hints[name]
            if typing.get_origin(hint) is not typing.Annotated:
                raise TypeError(
                    f"{cls.__name__}.{name}: wire fields need Annotated[type, construct]"
                )
            py_type, con, *extras = typing.get_args(hint)
            base = getattr(py_type, "__supertype__", py_type)
            fields.append(FieldSpec(name, con, base, tuple(extras)))
        family_reg = REGISTRY.setdefault(family, {})
        if tag in family_reg:
            raise TypeError(f"{family} tag {tag} declared twice ({family_reg[tag].cls.__name__})")
        spec = WireSpec(
            family=family,
            tag=tag,
            cls=cls,
            fields=tuple(fields),
            construct=cs.Struct(*(f.name / f.construct for f in fields)),
        )
        family_reg[tag] = spec
        BY_CLASS[cls] = spec
        return cls

    return register


def spec_of(cls: type) -> WireSpec:
    return BY_CLASS[cls]
