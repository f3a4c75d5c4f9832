"""Arrow arrays to and from NumPy and Python values, built on Arrow buffers.

pyarrow imports pandas the first time it converts a Python or NumPy value (``pa.array``,
``pa.scalar``, ``Array.to_numpy``, a compute call given a Python scalar, ``group_by``): 0.5 s
on a quiet machine, up to 10 s on a loaded worker, paid by the first plan of every sensor
poke, trigger and driver process. The core builds its arrays here instead and never pays it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal

import numpy as np
import pyarrow as pa

_BOOL = np.dtype(bool)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH_DATE = dt.date(1970, 1, 1)
_SCAN_WINDOW = 1 << 22  # bytes of string data compared at a time by holds_character


def from_numpy(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A 1-D NumPy array of integers, floats or booleans as an Arrow array, null where
    ``valid`` is False."""
    values = np.ascontiguousarray(values)
    validity = None if valid is None else _bits(valid)
    if values.dtype == _BOOL:
        return pa.Array.from_buffers(pa.bool_(), len(values), [validity, _bits(values)])
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values),
                                 [validity, pa.py_buffer(values)])


def combined(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One array of a column's values: its lone chunk as it is (``combine_chunks`` copies
    even that), several chunks concatenated."""
    if isinstance(array, pa.Array):
        return array
    return array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()


def to_numpy(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of an integer, float or boolean Arrow array without nulls (read-only)."""
    array = combined(array)
    if array.null_count:
        raise ValueError(f"{array.null_count} nulls in an array that should have none")
    data = array.buffers()[1]
    if pa.types.is_boolean(array.type):
        if data is None:
            return np.zeros(0, bool)
        bits = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little",
                             count=array.offset + len(array))
        return bits[array.offset:].astype(bool)
    dtype = _numpy_dtype(array.type)
    if data is None:
        return np.zeros(0, dtype)
    return np.frombuffer(data, dtype, count=len(array), offset=array.offset * dtype.itemsize)


def to_python(array: pa.Array) -> list:
    """``array.to_pylist()``, but dates, timestamps and decimals built here: pyarrow's own
    conversion of those imports pandas."""
    kind = array.type
    if not (pa.types.is_date32(kind) or pa.types.is_timestamp(kind)
            or pa.types.is_decimal(kind)):
        return array.to_pylist()
    valid = [True] * len(array) if not array.null_count else array.is_valid().to_pylist()
    if pa.types.is_decimal(kind):
        texts = array.cast(pa.string()).to_pylist()
        return [Decimal(t) if t is not None else None for t in texts]
    if pa.types.is_date32(kind):
        days = _integers(array.cast(pa.int32()))
        return [_EPOCH_DATE + dt.timedelta(days=d) if ok else None for d, ok in zip(days, valid)]
    micros = _integers(array.cast(pa.timestamp("us", kind.tz)).cast(pa.int64()))
    epoch = _EPOCH if kind.tz else _EPOCH.replace(tzinfo=None)
    return [epoch + dt.timedelta(microseconds=m) if ok else None for m, ok in zip(micros, valid)]


def _integers(array: pa.Array) -> list[int]:
    """The values of an integer array, whatever lies under its nulls."""
    return np.frombuffer(array.buffers()[1], _numpy_dtype(array.type))[
        array.offset:array.offset + len(array)].tolist()


def full(length: int, value: int | bool, dtype: type = np.int64) -> pa.Array:
    """``length`` copies of ``value``."""
    return from_numpy(np.full(length, value, dtype))


def nulls(type_: pa.DataType, length: int) -> pa.Array:
    """``length`` nulls of ``type_``, every buffer (a struct's children's too) a view of one
    zeroed allocation that the OS maps only when read: ``pa.nulls`` fills a buffer per child
    (31 MiB for a million absent deletion vectors)."""
    zeros = pa.py_buffer(np.zeros(8 * (length + 1), np.uint8))  # calloc: untouched pages
    return _null_array(type_, length, zeros)


def _null_array(type_: pa.DataType, length: int, zeros: pa.Buffer) -> pa.Array:
    # each buffer a slice of the size its type needs, so that copies (IPC, pickle) stay small
    validity = zeros[:(length + 7) // 8]
    if pa.types.is_struct(type_):
        children = [_null_array(f.type, length, zeros) for f in type_]
        return pa.Array.from_buffers(type_, length, [validity], null_count=length,
                                     children=children)
    if pa.types.is_string(type_) or pa.types.is_binary(type_):
        return pa.Array.from_buffers(type_, length, [validity, zeros[:4 * (length + 1)],
                                                     zeros[:0]], null_count=length)
    if pa.types.is_boolean(type_) or pa.types.is_integer(type_) or pa.types.is_floating(type_):
        values = zeros[:(type_.bit_width * length + 7) // 8]
        return pa.Array.from_buffers(type_, length, [validity, values], null_count=length)
    return pa.nulls(length, type_)


def holds_character(array: pa.Array, character: str) -> bool:
    """Whether a string array may hold the ASCII ``character``: one scan of its data,
    twenty times quicker than ``match_substring`` (a null's bytes count too)."""
    _, offsets, data = array.buffers()[:3]
    if data is None or not len(array):
        return False
    width = np.int64 if pa.types.is_large_string(array.type) else np.int32
    low, high = np.frombuffer(offsets, width)[[array.offset, array.offset + len(array)]]
    values = np.frombuffer(data, np.uint8)[low:high]
    code = ord(character)
    return any((values[start:start + _SCAN_WINDOW] == code).any()
               for start in range(0, len(values), _SCAN_WINDOW))


def strings(values: Sequence[str | None]) -> pa.Array:
    """Python strings (None for null) as an Arrow string array."""
    encoded = [b"" if value is None else value.encode("utf-8") for value in values]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(value) for value in encoded], out=offsets[1:])
    nulls = np.fromiter((value is None for value in values), bool, len(values))
    validity = _bits(~nulls) if nulls.any() else None
    as_large = pa.Array.from_buffers(pa.large_string(), len(encoded), [
        validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])
    return as_large.cast(pa.string())


def scalar(value: str | int | bool) -> pa.Scalar:
    """A string, 64-bit integer or boolean Arrow scalar, for compute calls."""
    if isinstance(value, str):
        return strings([value])[0]
    return from_numpy(np.array([value], _BOOL if isinstance(value, bool) else np.int64))[0]


def _numpy_dtype(arrow_type: pa.DataType) -> np.dtype:
    """The NumPy dtype of an integer or float type (``to_pandas_dtype`` imports pandas on
    pyarrow 18)."""
    if pa.types.is_signed_integer(arrow_type):
        return np.dtype(f"int{arrow_type.bit_width}")
    if pa.types.is_unsigned_integer(arrow_type):
        return np.dtype(f"uint{arrow_type.bit_width}")
    if pa.types.is_floating(arrow_type):
        return np.dtype(f"float{arrow_type.bit_width}")
    raise TypeError(f"no NumPy view of Arrow type {arrow_type}")


def _bits(flags: np.ndarray) -> pa.Buffer:
    """Booleans as an Arrow bitmap."""
    return pa.py_buffer(np.packbits(flags, bitorder="little"))
