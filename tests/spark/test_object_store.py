"""The reader's driver-side storage work on S3 (moto): file checks and deletion vectors.

Spark itself cannot read ``s3://`` here (no hadoop-aws jars), so these cover what the reader does
before Spark: existence checks and deletion-vector reads through obstore with storage_options.
"""

from __future__ import annotations

import obstore
import pytest

from airflow_provider_delta.core import plan_snapshot
from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.errors import MissingDataFileError
from airflow_provider_delta.spark.deletion_vectors import deleted_rows
from airflow_provider_delta.storage import missing_files

TABLE = "delta-golden/dv-partitioned-with-checkpoint"


def _rows_by_file(plan, storage_options=None):
    root = TableLocation(plan.table_uri, storage_options).root_uri
    return {
        "/".join(f.path.rsplit("/", 2)[-2:]): deleted_rows(  # partition folder / file name
            f.deletion_vector, table_root_uri=root, table_uri=plan.table_uri,
            version=f.version, storage_options=storage_options,
        ).tolist()
        for f in plan.files if f.deletion_vector is not None
    }


def test_deletion_vectors_read_from_s3_equal_local(shared_table, upload, s3_options):
    local = shared_table(TABLE)
    uri = upload(local, "dv-table")
    remote_rows = _rows_by_file(plan_snapshot(uri, storage_options=s3_options), s3_options)
    assert remote_rows and remote_rows == _rows_by_file(plan_snapshot(local))


def test_missing_files_on_s3(shared_table, upload, s3_options, s3_store):
    uri = upload(shared_table(TABLE), "dv-missing")
    plan = plan_snapshot(uri, storage_options=s3_options)
    paths = [f.path for f in plan.files]
    assert missing_files(paths, uri, s3_options) == []
    store = s3_store
    obstore.delete(store, paths[3].removeprefix("s3://lake/"))
    assert missing_files(paths, uri, s3_options) == [paths[3]]
    for batch in obstore.list(store, prefix="dv-missing"):
        for meta in batch:
            if "deletion_vector_" in meta["path"]:
                obstore.delete(store, meta["path"])
    with_dv = next(f for f in plan.files if f.deletion_vector is not None)
    with pytest.raises(MissingDataFileError) as error:
        deleted_rows(with_dv.deletion_vector, table_root_uri=uri, table_uri=uri,
                     version=with_dv.version, storage_options=s3_options)
    assert error.value.version == with_dv.version
