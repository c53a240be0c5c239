"""Arrow snapshots: one table per snapshot record type, schemas derived from the wire layouts.

Tables, in the canonical order (:data:`TABLES`): ``exchange`` (one row), ``markets``,
``accounts``, ``positions``, ``api_keys``, ``orders``, ``funding``, ``l1_addresses``,
``conditional_orders`` (the last three are optional: a snapshot written before them reads them as
empty). Column types follow the
construct fields:
``Int8/16/32/64ul`` -> ``uint8/16/32/64``, ``Int32sl``/``Int64sl`` -> ``int32``/``int64``,
``Bytes(n)`` -> ``fixed_size_binary(n)``, the ASCII ``Symbol`` -> ``string``. Non-nullable.

- :func:`records_to_tables` groups records by type and builds each table column-wise (one Python
  list per column, transposed with ``zip``), never via row dicts. Every table is present, possibly
  empty. Row order within a type is kept.
- :func:`tables_to_records` yields records in the canonical order, rows in table order: restoring
  them in that order rebuilds the state (see ``_records``).
- :func:`write_snapshot_ipc` writes one Arrow IPC file per table into a directory, the snapshot's
  ``seq`` in every schema's metadata; each file is written to a temporary name and renamed, so a
  reader never sees a half-written file. :func:`read_snapshot_ipc` memory-maps them (zero-copy),
  checks every schema against the derived one and that all files carry the same seq, else
  CodecError.

Cost: linear in rows, dominated by the Python side (one Python object per value each way); the IPC
read itself is a memory map and copies nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc

from ._errors import CodecError
from ._hot import field_format
from ._records import (
    AccountRecord,
    ApiKeyRecord,
    ConditionalOrderRecord,
    ExchangeRecord,
    FundingRecord,
    L1AddressRecord,
    MarketRecord,
    OrderRecord,
    PositionRecord,
)
from ._wire import spec_of

#: Table name -> record class, in the canonical (restore) order.
TABLES: dict[str, type] = {
    "exchange": ExchangeRecord,
    "markets": MarketRecord,
    "accounts": AccountRecord,
    "positions": PositionRecord,
    "api_keys": ApiKeyRecord,
    "orders": OrderRecord,
    "funding": FundingRecord,
    "l1_addresses": L1AddressRecord,
    "conditional_orders": ConditionalOrderRecord,
}
#: Tables added after the first snapshot format: a snapshot written before them reads as empty.
OPTIONAL_TABLES = frozenset({"funding", "l1_addresses", "conditional_orders"})
_TABLE_OF: dict[type, str] = {cls: name for name, cls in TABLES.items()}
SEQ_KEY = b"raydex.seq"
TABLE_KEY = b"raydex.table"

_ARROW_INTS = {
    "B": pa.uint8(),
    "H": pa.uint16(),
    "I": pa.uint32(),
    "Q": pa.uint64(),
    "i": pa.int32(),
    "q": pa.int64(),
}


def _arrow_type(con: Any, py_type: type) -> pa.DataType:
    fmt = field_format(con)
    if fmt in _ARROW_INTS:
        return _ARROW_INTS[fmt]
    return pa.string() if py_type is str else pa.binary(int(fmt[:-1]))


def arrow_schema(cls: type) -> pa.Schema:
    """The Arrow schema of a registered wire type (field order = wire order)."""
    return pa.schema(
        [
            pa.field(f.name, _arrow_type(f.construct, f.py_type), nullable=False)
            for f in spec_of(cls).fields
        ]
    )


_SCHEMAS: dict[str, pa.Schema] = {name: arrow_schema(cls) for name, cls in TABLES.items()}


def records_to_tables(records: Iterable[Any]) -> dict[str, pa.Table]:
    """Group snapshot records by type into the tables (every one present, maybe empty)."""
    rows: dict[str, list[Any]] = {name: [] for name in TABLES}
    table_of = _TABLE_OF
    try:
        for r in records:
            rows[table_of[type(r)]].append(r)
    except KeyError as e:
        raise CodecError(f"not a snapshot record type: {e}") from None
    return {name: _table(name, group) for name, group in rows.items()}


def _table(name: str, group: list[Any]) -> pa.Table:
    schema = _SCHEMAS[name]
    columns = list(zip(*group, strict=True)) if group else [() for _ in schema]
    try:
        arrays = [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)]
    except (pa.ArrowException, OverflowError, TypeError, ValueError) as e:
        raise CodecError(f"cannot build column: {e}", type_name=TABLES[name].__name__) from None
    return pa.Table.from_arrays(arrays, schema=schema)


def tables_to_records(tables: dict[str, pa.Table]) -> Iterator[Any]:
    """Every row as its record, tables in canonical order, rows in table order."""
    for name, cls in TABLES.items():
        table = tables.get(name)
        if table is None:
            continue
        columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
        make = cls._make  # type: ignore[attr-defined]
        for row in zip(*columns, strict=True):
            yield make(row)


def write_snapshot_ipc(path: str | os.PathLike[str], seq: int, tables: dict[str, pa.Table]) -> None:
    """Write ``tables`` as ``<path>/<name>.arrow`` (Arrow IPC file format) with ``seq`` in each
    schema's metadata. Each file lands atomically (temporary name, then rename)."""
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    for name in TABLES:
        table = tables[name]
        meta = {SEQ_KEY: str(seq).encode(), TABLE_KEY: name.encode()}
        table = table.replace_schema_metadata(meta)
        tmp = root / f".{name}.arrow.tmp"
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        os.replace(tmp, root / f"{name}.arrow")


def read_snapshot_ipc(path: str | os.PathLike[str]) -> tuple[int, dict[str, pa.Table]]:
    """Memory-map the snapshot at ``path``: ``(seq, tables)``. CodecError when a file is missing or
    corrupt, a schema differs from the derived one, or the files disagree on seq."""
    root = Path(path)
    seqs: set[int] = set()
    tables: dict[str, pa.Table] = {}
    for name, schema in _SCHEMAS.items():
        file = root / f"{name}.arrow"
        if name in OPTIONAL_TABLES and not file.exists():
            tables[name] = schema.empty_table()
            continue
        try:
            with pa.memory_map(str(file), "r") as source:
                table = pa.ipc.open_file(source).read_all()
        except (OSError, pa.ArrowException) as e:
            raise CodecError(f"cannot read snapshot table {name!r}: {e}") from None
        meta = table.schema.metadata or {}
        if not table.schema.equals(schema, check_metadata=False):
            raise CodecError(f"schema mismatch in {file}", type_name=TABLES[name].__name__)
        try:
            seqs.add(int(meta[SEQ_KEY]))
        except (KeyError, ValueError):
            raise CodecError(f"no seq in {file}") from None
        tables[name] = table
    if len(seqs) != 1:
        raise CodecError(f"snapshot tables disagree on seq: {sorted(seqs)}")
    return seqs.pop(), tables
