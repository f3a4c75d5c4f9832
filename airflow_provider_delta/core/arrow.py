"""Arrow arrays to and from NumPy and Python values, built on Arrow buffers.

pyarrow imports pandas the first time it converts a Python or NumPy value (``pa.array``,
``pa.scalar``, ``Array.to_numpy``, a compute call given a Python scalar, ``group_by``): 0.5 s
on a quiet machine, up to 10 s on a loaded worker, paid by the first plan of every sensor
poke, trigger and driver process. The core builds its arrays here instead and never pays it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

_BOOL = np.dtype(bool)


def from_numpy(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A 1-D NumPy array of integers, floats or booleans as an Arrow array, null where
    ``valid`` is False."""
    values = np.ascontiguousarray(values)
    validity = None if valid is None else _bits(valid)
    if values.dtype == _BOOL:
        return pa.Array.from_buffers(pa.bool_(), len(values), [validity, _bits(values)])
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values),
                                 [validity, pa.py_buffer(values)])


def to_numpy(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of an integer, float or boolean Arrow array without nulls (read-only)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
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


def full(length: int, value: int | bool, dtype: type = np.int64) -> pa.Array:
    """``length`` copies of ``value``."""
    return from_numpy(np.full(length, value, dtype))


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
