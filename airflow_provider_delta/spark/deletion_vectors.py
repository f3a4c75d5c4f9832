"""Deletion vectors: from a log descriptor to the sorted row indexes it marks as deleted.

Implements PROTOCOL.md's "Deletion Vector Format": storage types ``i`` (inline, Z85),
``u`` (``deletion_vector_<uuid>.bin`` under the table root, UUID Z85-encoded after an optional
folder prefix) and ``p`` (absolute URI); the file framing (version byte, big-endian size,
bitmap, CRC-32); and the bitmap itself, a magic number followed by a 64-bit "portable"
RoaringBitmap.

We decode the descriptor ourselves rather than use ``deltalake``'s ``deletion_vectors()``:
that call returns the vectors of one snapshot keyed by file path, while a version range can
hold the same path several times with a different vector each time, and each occurrence must be
read with its own vector.
"""

from __future__ import annotations

import base64
import struct
import uuid
import zlib
from typing import NoReturn

import numpy as np

from airflow_provider_delta.core.model import DeletionVectorDescriptor
from airflow_provider_delta.errors import CorruptDeletionVectorError, MissingDataFileError
from airflow_provider_delta.storage import read_range

MAGIC_NUMBER = 1681511377
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_B85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"
# Z85 and base64's b85 are the same big-endian base-85 code over different alphabets.
_Z85_TO_B85 = str.maketrans(_Z85, _B85)
_SERIAL_COOKIE_NO_RUN = 12346
_SERIAL_COOKIE = 12347
_NO_OFFSET_THRESHOLD = 4
_ARRAY_MAX = 4096


def z85_decode(text: str) -> bytes:
    """Decode Z85 text (ZeroMQ RFC 32) to bytes."""
    return base64.b85decode(text.translate(_Z85_TO_B85))


def dv_file_uri(dv: DeletionVectorDescriptor, table_root_uri: str) -> str:
    """The absolute decoded URI of an on-disk vector (storage type ``u`` or ``p``).

    The core already resolves ``p`` paths to absolute decoded URIs.
    """
    if dv.storage_type == "p":
        return dv.path_or_inline_dv
    if dv.storage_type != "u":
        raise ValueError(f"deletion vector storage type {dv.storage_type!r} is not on disk")
    prefix, encoded_uuid = dv.path_or_inline_dv[:-20], dv.path_or_inline_dv[-20:]
    file_name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded_uuid))}.bin"
    folder = f"{table_root_uri.rstrip('/')}/{prefix}" if prefix else table_root_uri.rstrip("/")
    return f"{folder}/{file_name}"


def deleted_rows(
    dv: DeletionVectorDescriptor,
    *,
    table_root_uri: str,
    table_uri: str,
    version: int | None = None,
    storage_options: dict[str, str] | None = None,
) -> np.ndarray:
    """The row indexes ``dv`` deletes, sorted, as ``uint64``.

    Raises MissingDataFileError when the vector's file is gone and CorruptDeletionVectorError
    when its bytes do not match the descriptor.
    """
    if dv.storage_type == "i":
        data = z85_decode(dv.path_or_inline_dv)[: dv.size_in_bytes]
    elif dv.storage_type in ("u", "p"):
        uri = dv_file_uri(dv, table_root_uri)
        data = _read_framed(dv, uri, table_uri, version, storage_options)
    else:
        raise CorruptDeletionVectorError(
            f"{table_uri}: version {version} has a deletion vector with unknown storage type "
            f"{dv.storage_type!r}; this provider reads 'i', 'u' and 'p' only.",
            table_uri=table_uri, version=version,
        )
    rows = _decode_bitmap(data, table_uri, version)
    if len(rows) != dv.cardinality:
        raise CorruptDeletionVectorError(
            f"{table_uri}: the deletion vector {dv.unique_id} of version {version} holds "
            f"{len(rows)} rows, its descriptor says {dv.cardinality}. The vector file is "
            "damaged; restore it or rewrite the data file (e.g. OPTIMIZE ... PURGE).",
            table_uri=table_uri, version=version,
        )
    return rows


def _read_framed(
    dv: DeletionVectorDescriptor,
    uri: str,
    table_uri: str,
    version: int | None,
    storage_options: dict[str, str] | None,
) -> bytes:
    """Read one vector from a DV file: size (4 bytes), bitmap, CRC-32 (4 bytes), big-endian."""
    offset = 1 if dv.offset is None else dv.offset  # byte 0 is the file format version
    try:
        frame = read_range(uri, offset, dv.size_in_bytes + 8, table_uri, storage_options)
    except FileNotFoundError as exc:
        raise MissingDataFileError(table_uri, version, uri) from exc
    if len(frame) != dv.size_in_bytes + 8:
        _corrupt(table_uri, version, uri, "the file is shorter than the descriptor says")
    (size,) = struct.unpack_from(">i", frame, 0)
    data = frame[4 : 4 + dv.size_in_bytes]
    (checksum,) = struct.unpack_from(">I", frame, 4 + dv.size_in_bytes)
    if size != dv.size_in_bytes:
        _corrupt(table_uri, version, uri, f"size {size} != descriptor's {dv.size_in_bytes}")
    if zlib.crc32(data) != checksum:
        _corrupt(table_uri, version, uri, "CRC-32 checksum mismatch")
    return data


def _corrupt(table_uri: str, version: int | None, uri: str, detail: str) -> NoReturn:
    raise CorruptDeletionVectorError(
        f"{table_uri}: deletion vector file {uri} of version {version} is damaged ({detail}). "
        "Restore the file, or rewrite the data file without the vector.",
        table_uri=table_uri, version=version,
    )


def _decode_bitmap(data: bytes, table_uri: str, version: int | None) -> np.ndarray:
    """Magic number, then a portable 64-bit RoaringBitmap: bucket count and 32-bit buckets."""
    try:
        (magic,) = struct.unpack_from("<i", data, 0)
        if magic != MAGIC_NUMBER:
            raise ValueError(f"magic number {magic}, expected {MAGIC_NUMBER}")
        (buckets,) = struct.unpack_from("<q", data, 4)
        pos, parts = 12, []
        for _ in range(buckets):
            (high,) = struct.unpack_from("<I", data, pos)
            low, pos = _decode_roaring32(data, pos + 4)
            parts.append((np.uint64(high) << np.uint64(32)) | low.astype(np.uint64))
    except (ValueError, struct.error) as exc:
        raise CorruptDeletionVectorError(
            f"{table_uri}: a deletion vector of version {version} is not a RoaringBitmapArray "
            f"({exc}). Restore the vector or rewrite the data file without it.",
            table_uri=table_uri, version=version,
        ) from exc
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)


def _decode_roaring32(data: bytes, pos: int) -> tuple[np.ndarray, int]:
    """One 32-bit RoaringBitmap in the standard portable format; returns values and end."""
    (cookie,) = struct.unpack_from("<I", data, pos)
    pos += 4
    if cookie & 0xFFFF == _SERIAL_COOKIE:
        count = (cookie >> 16) + 1
        run_flags = np.unpackbits(
            np.frombuffer(data, np.uint8, (count + 7) // 8, pos), bitorder="little"
        )
        pos += (count + 7) // 8
    elif cookie == _SERIAL_COOKIE_NO_RUN:
        (count,) = struct.unpack_from("<I", data, pos)
        pos += 4
        run_flags = np.zeros(count, np.uint8)
    else:
        raise ValueError(f"unknown RoaringBitmap cookie {cookie}")
    header = np.frombuffer(data, "<u2", 2 * count, pos).reshape(count, 2)
    pos += 4 * count
    if cookie == _SERIAL_COOKIE_NO_RUN or count >= _NO_OFFSET_THRESHOLD:
        pos += 4 * count  # container offsets: we read the containers in order anyway
    values = []
    for index in range(count):
        key, cardinality = int(header[index, 0]), int(header[index, 1]) + 1
        low, pos = _decode_container(data, pos, bool(run_flags[index]), cardinality)
        values.append((np.uint32(key) << np.uint32(16)) | low.astype(np.uint32))
    return (np.concatenate(values) if values else np.empty(0, np.uint32)), pos


def _decode_container(
    data: bytes, pos: int, is_run: bool, cardinality: int
) -> tuple[np.ndarray, int]:
    if is_run:
        (runs,) = struct.unpack_from("<H", data, pos)
        pairs = np.frombuffer(data, "<u2", 2 * runs, pos + 2).reshape(runs, 2).astype(np.uint32)
        ranges = [np.arange(start, start + length + 1) for start, length in pairs]
        low = np.concatenate(ranges) if ranges else np.empty(0, np.uint32)
        return low, pos + 2 + 4 * runs
    if cardinality <= _ARRAY_MAX:
        return np.frombuffer(data, "<u2", cardinality, pos).astype(np.uint32), pos + 2 * cardinality
    bits = np.unpackbits(np.frombuffer(data, np.uint8, 8192, pos), bitorder="little")
    return np.flatnonzero(bits).astype(np.uint32), pos + 8192
