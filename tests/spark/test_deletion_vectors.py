"""Deletion-vector decoding against pyroaring's portable 64-bit serialisation (an independent
implementation of the same RoaringBitmap format), in every Delta storage type."""

from __future__ import annotations

import struct
import uuid
import zlib

import numpy as np
import pytest
from pyroaring import BitMap64

from airflow_provider_delta.core.model import DeletionVectorDescriptor
from airflow_provider_delta.errors import CorruptDeletionVectorError, MissingDataFileError
from airflow_provider_delta.spark.deletion_vectors import (
    deleted_rows,
    dv_file_uri,
    z85_decode,
)
from tests.spark.conftest import bitmap_bytes, inline_deletion_vector, z85_encode

ROW_SETS = {
    "array": [0, 3, 9, 65535, 65536, 70000],
    "bitmap": list(range(0, 20000, 3)),  # > 4096 values in one container
    "runs": list(range(100, 50000)) + list(range(70000, 70010)),
    "buckets": [5, 2**32 + 7, 2**33 + 1, 2**40],  # several high 32-bit keys
    "empty": [],
}


def _write_dv_file(folder, rows_per_vector: list[list[int]], name: str) -> list[tuple[int, int]]:
    """A DV file holding several vectors; returns (offset, size) of each."""
    content, spans = bytearray(b"\x01"), []
    for rows in rows_per_vector:
        data = bitmap_bytes(rows)
        spans.append((len(content), len(data)))
        content += struct.pack(">i", len(data)) + data + struct.pack(">I", zlib.crc32(data))
    (folder / name).write_bytes(bytes(content))
    return spans


@pytest.mark.parametrize("kind", sorted(ROW_SETS))
def test_inline_vectors(kind):
    rows = ROW_SETS[kind]
    got = deleted_rows(inline_deletion_vector(rows), table_root_uri="file:///nowhere", table_uri="t")
    assert got.dtype == np.uint64
    assert got.tolist() == sorted(rows)


def test_relative_vectors_with_prefix_and_offsets(tmp_path):
    dv_id = uuid.uuid4()
    (tmp_path / "ab").mkdir()
    spans = _write_dv_file(
        tmp_path / "ab", [ROW_SETS["runs"], ROW_SETS["bitmap"]], f"deletion_vector_{dv_id}.bin"
    )
    encoded = "ab" + z85_encode(dv_id.bytes)
    root = f"file://{tmp_path}"
    for (offset, size), rows in zip(spans, [ROW_SETS["runs"], ROW_SETS["bitmap"]]):
        dv = DeletionVectorDescriptor("u", encoded, size, len(rows), offset)
        assert dv_file_uri(dv, root) == f"{root}/ab/deletion_vector_{dv_id}.bin"
        assert deleted_rows(dv, table_root_uri=root, table_uri="t").tolist() == rows


def test_absolute_vector_without_offset(tmp_path):
    [(offset, size)] = _write_dv_file(tmp_path, [ROW_SETS["array"]], "any name.bin")
    assert offset == 1
    dv = DeletionVectorDescriptor("p", f"file://{tmp_path}/any name.bin", size, 6)
    got = deleted_rows(dv, table_root_uri="file:///elsewhere", table_uri="t")
    assert got.tolist() == ROW_SETS["array"]


def test_checksum_mismatch_is_refused(tmp_path):
    [(offset, size)] = _write_dv_file(tmp_path, [ROW_SETS["array"]], "dv.bin")
    raw = bytearray((tmp_path / "dv.bin").read_bytes())
    raw[offset + 4 + 12] ^= 0xFF  # flip a bitmap byte, keep the stored CRC
    (tmp_path / "dv.bin").write_bytes(bytes(raw))
    dv = DeletionVectorDescriptor("p", f"file://{tmp_path}/dv.bin", size, 6, offset)
    with pytest.raises(CorruptDeletionVectorError, match="checksum"):
        deleted_rows(dv, table_root_uri="file:///x", table_uri="t", version=3)


def test_cardinality_mismatch_is_refused():
    dv = inline_deletion_vector([1, 2, 3])
    wrong = DeletionVectorDescriptor("i", dv.path_or_inline_dv, dv.size_in_bytes, 4)
    with pytest.raises(CorruptDeletionVectorError, match="descriptor says 4"):
        deleted_rows(wrong, table_root_uri="file:///x", table_uri="t")


def test_wrong_magic_number_is_refused():
    data = struct.pack("<i", 42) + BitMap64([1]).serialize()
    dv = DeletionVectorDescriptor("i", z85_encode(data + b"\0" * (-len(data) % 4)), len(data), 1)
    with pytest.raises(CorruptDeletionVectorError, match="magic number"):
        deleted_rows(dv, table_root_uri="file:///x", table_uri="t")


def test_missing_vector_file_names_version_and_path(tmp_path):
    dv = DeletionVectorDescriptor("u", z85_encode(uuid.uuid4().bytes), 40, 2, 1)
    with pytest.raises(MissingDataFileError) as error:
        deleted_rows(dv, table_root_uri=f"file://{tmp_path}", table_uri="t", version=7)
    assert error.value.version == 7
    assert "deletion_vector_" in str(error.value)


def test_z85_matches_the_spec_example():
    # ZeroMQ RFC 32 test vector
    assert z85_decode("HelloWorld") == bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
