"""One storage module: the same storage options reach the same store from the reader and the
sinks, and a store failure on a data file is classified as on the log."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from airflow_provider_delta.core import plan_snapshot
from airflow_provider_delta.errors import StorageAccessError
from airflow_provider_delta.job.sinks.written_files import written_parquet_files
from airflow_provider_delta.spark.deletion_vectors import deleted_rows
from airflow_provider_delta.spark.reader import check_files_exist
from tests.conftest import S3_BUCKET, S3_SECRET


def test_sink_and_reader_open_an_http_endpoint_from_the_same_options(s3_options, request):
    """``AWS_ALLOW_HTTP`` is a client option: handed to obstore as store config it panicked."""
    folder = f"s3://{S3_BUCKET}/{request.node.name}"
    writer_options = {**s3_options, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}  # one writer
    for part in range(3):
        write_deltalake(f"{folder}/table", pa.table({"id": list(range(part * 10, part * 10 + 7))}),
                        mode="append", storage_options=writer_options)
    check_files_exist(plan_snapshot(f"{folder}/table", storage_options=s3_options), s3_options)
    written = written_parquet_files(folder, "table", s3_options)
    table = DeltaTable(f"{folder}/table", storage_options=writer_options)
    counted = pa.table(QueryBuilder().register("t", table).execute(
        "SELECT count(*) AS n FROM t").read_all())
    assert len(written) == 3 and sum(rows for _, _, rows in written) == counted["n"][0].as_py() == 21


def test_refused_credentials_on_data_files_are_permanent(
        shared_table, upload, s3_options, request):
    uri = upload(shared_table("delta-golden/dv-partitioned-with-checkpoint"), request.node.name)
    plan = plan_snapshot(uri, storage_options=s3_options)
    request.getfixturevalue("moto_checks_credentials")
    wrong = {**s3_options, "AWS_ACCESS_KEY_ID": "AKIAWRONG"}
    with_dv = next(f for f in plan.files if f.deletion_vector is not None)
    for read in (lambda: check_files_exist(plan, wrong),
                 lambda: deleted_rows(with_dv.deletion_vector, table_root_uri=uri, table_uri=uri,
                                      version=with_dv.version, storage_options=wrong)):
        with pytest.raises(StorageAccessError) as caught:
            read()
        message = str(caught.value)
        assert caught.value.permanent and uri in message and "403" in message
        assert "AWS_ACCESS_KEY_ID" in message and S3_SECRET not in message


def test_a_ranged_object_reads_like_its_bytes_a_request_a_span(s3_store, s3_options,
                                                                 monkeypatch):
    """Reads anywhere in a large object give its bytes; reading a span from start to end,
    a piece at a time, is one request, and a read in its tail none."""
    import random

    import obstore

    from airflow_provider_delta import storage
    from airflow_provider_delta.storage import RangedObject, open_store, read_object_tail
    from tests.moto_s3 import counted_requests

    monkeypatch.setattr(storage, "TAIL_BYTES", 1_000_000)
    data = random.Random(7).randbytes(3_000_000)
    obstore.put(s3_store, "ranged/object.bin", data)
    with counted_requests(s3_options) as (counted, requests):
        store = open_store(f"s3://{S3_BUCKET}", counted)
        assert read_object_tail(store, "ranged/absent.bin", RuntimeError) is None
        source = read_object_tail(store, "ranged/object.bin", RuntimeError)
        assert isinstance(source, RangedObject) and source.size == len(data)
        assert requests == {"GET": 2}
        source.spans = [(100, 1_500_000), (1_500_000, len(data) - len(source.tail))]
        source.seek(100)
        pieces = [source.read(65_536) for _ in range(20)]
        assert b"".join(pieces) == data[100:100 + 20 * 65_536]
        assert requests == {"GET": 3}
        assert source.seek(-10, 2) == len(data) - 10 and source.read() == data[-10:]
        assert requests == {"GET": 3}
        again = source.reopened()
        for start, length in [(0, 10), (2_999_990, 100), (1_499_000, 2_000), (5, 0)]:
            again.seek(start)
            assert again.read(length) == data[start:start + length]
        assert again.read(10) == data[5:15]
    obstore.put(s3_store, "ranged/empty.bin", b"")
    direct = open_store(f"s3://{S3_BUCKET}", s3_options)
    assert read_object_tail(direct, "ranged/empty.bin", RuntimeError) == b""
