"""The Redis Stream source's rows built column by column are the rows built entry by entry:
the same values for every text a producer may send, and the same error naming the entry for
a text that does not parse (a hypothesis search over ids, fields and typed columns)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from twopc.sinks.redis_source._rows import converters, entries_batch, to_batch, to_row
from twopc.spi import SourceError

TYPED = {"l": LongType(), "i": IntegerType(), "s": ShortType(), "b": ByteType(), "d": DoubleType(),
         "f": FloatType(), "t": BooleanType(), "dt": DateType(), "dec": DecimalType(10, 2), "raw": BinaryType(),
         "txt": StringType()}
SCHEMA = StructType([StructField("stream", StringType()), StructField("id", StringType()),
                     StructField("timestamp", TimestampType()),
                     StructField("fields", MapType(StringType(), StringType())),
                     *(StructField(k, v) for k, v in TYPED.items())])
ARROW = to_arrow_schema(SCHEMA, timezone="UTC")
TYPED_PAIRS = converters(SCHEMA)

#: texts near every parser's edges: what Arrow and Python read differently
EDGES = ["0", "-0", "007", "+5", " 5", "5 ", "1_000", "0x10", "1e3", "1E-2", "1.", ".5", "1.5", "-2.25", "inf",
         "-Infinity", "NaN", "127", "128", "-129", "32768", "2147483648", "9223372036854775808", "3.4028235e38",
         "1e39", "٣", "true", "f", "2026-11-30", "12.345", "", "x"]
TEXT = st.one_of(st.sampled_from(EDGES), st.integers(-2**70, 2**70).map(str),
                 st.floats(allow_nan=False).map(repr), st.text(max_size=6))
FIELD_VALUE = st.one_of(TEXT.map(lambda t: t.encode("utf-8")), st.binary(max_size=3))


@st.composite
def entries(draw: Any) -> list[tuple[bytes, dict[bytes, bytes]]]:
    n = draw(st.integers(1, 6))
    out = []
    for i in range(n):
        fields = draw(st.dictionaries(st.sampled_from([k.encode() for k in TYPED] + [b"other", "é".encode()]),
                                      FIELD_VALUE, max_size=4))
        ms = draw(st.one_of(st.integers(0, 2**41), st.just(2**53)))
        out.append((f"{ms}-{i}".encode(), fields))
    return out


def _by_entry(stream: str, rows: list[tuple[bytes, dict[bytes, bytes]]]) -> pa.RecordBatch | str:
    try:
        return to_batch([to_row(stream, e, f, TYPED_PAIRS) for e, f in rows], ARROW)
    except (SourceError, pa.ArrowInvalid, OverflowError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _by_column(stream: str, rows: list[tuple[bytes, dict[bytes, bytes]]]) -> pa.RecordBatch | str:
    try:
        return entries_batch(stream, rows, TYPED_PAIRS, ARROW)
    except (SourceError, pa.ArrowInvalid, OverflowError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _values(batch: pa.RecordBatch) -> list[list[Any]]:
    """The batch's values, comparable: timestamps as integers (Python's datetime ends at
    year 9999), NaN as a string (NaN is not equal to itself)."""
    out = []
    for column in batch.columns:
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.int64())
        out.append([v if v == v else "NaN" for v in column.to_pylist()])
    return out


@settings(max_examples=400)
@given(entries())
def test_column_by_column_is_entry_by_entry(rows: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
    want, got = _by_entry("s", rows), _by_column("s", rows)
    if isinstance(want, str) or isinstance(got, str):
        assert got == want
    else:
        assert _values(got) == _values(want)


@pytest.mark.parametrize("column", ["l", "s", "d", "f"])
@pytest.mark.parametrize("text", ["0x10", " 5", "1_000", "٣", "+5", "1e3", "inf", "1.", "-0", "300"])
def test_a_text_arrow_reads_otherwise_than_python_gets_pythons_answer(column: str, text: str) -> None:
    rows = [(b"1-1", {column.encode(): b"1"}), (b"1-2", {column.encode(): text.encode()})]
    want, got = _by_entry("s", rows), _by_column("s", rows)
    if isinstance(want, str):  # 0x10: Python refuses it, Arrow would read 16
        assert got == want
    else:
        assert not isinstance(got, str) and _values(got) == _values(want)
