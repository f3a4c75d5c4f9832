"""The core on S3 (a local moto server): start-after listing and storage_options end to end."""

from __future__ import annotations


import pytest

from airflow_provider_delta.core import (
    commit_timestamp, latest_version, plan_changes, plan_snapshot, version_at,
)
from airflow_provider_delta.errors import LogGapError, TableNotFoundError

@pytest.mark.parametrize("name", [
    "delta-kernel/basic-with-checkpoint", "delta-golden/v2-checkpoint-json",
    "delta-golden/multi-part-checkpoint", "delta-rs/simple_table",
    "delta-golden/dv-partitioned-with-checkpoint",
])
def test_remote_table_plans_like_its_local_copy(shared_table, upload, s3_options, name):
    local = shared_table(name)
    uri = upload(local, name)
    latest = latest_version(local)
    assert latest_version(uri, storage_options=s3_options) == latest
    assert latest_version(uri, since=0, storage_options=s3_options) == latest
    remote_snapshot = plan_snapshot(uri, storage_options=s3_options)
    local_snapshot = plan_snapshot(local)
    assert sorted(f.path.replace(uri, "") for f in remote_snapshot) == sorted(
        f.path.replace("file://" + local, "") for f in local_snapshot)
    assert all(f.path.startswith(uri + "/") for f in remote_snapshot)
    remote_changes = plan_changes(uri, 0, storage_options=s3_options, ignore_changes=True)
    local_changes = plan_changes(local, 0, ignore_changes=True)
    assert [(f.version, f.partition_values, f.deletion_vector) for f in remote_changes] == [
        (f.version, f.partition_values, f.deletion_vector) for f in local_changes]


def test_remote_commit_times_and_errors(shared_table, upload, s3_options):
    uri = upload(shared_table("delta-golden/snapshot-data1"), "times")
    first, second = (commit_timestamp(uri, v, storage_options=s3_options) for v in (0, 1))
    assert second > first
    from datetime import datetime, timezone

    assert version_at(uri, datetime.fromtimestamp(second / 1000, timezone.utc),
                      storage_options=s3_options) == 1
    hadoop_uri = uri.replace("s3://", "s3a://")  # Spark's scheme: listed as s3, paths kept
    assert latest_version(hadoop_uri, storage_options=s3_options) == 1
    assert all(f.path.startswith(hadoop_uri + "/")
               for f in plan_changes(hadoop_uri, 0, storage_options=s3_options))
    gap = upload(shared_table("delta-rs-errors/table_c"), "gap")
    with pytest.raises(LogGapError):
        latest_version(gap, storage_options=s3_options)
    with pytest.raises(TableNotFoundError):
        latest_version("s3://lake/absent", storage_options=s3_options)


def _log_in_moto(tmp_path, bucket: str, prefix: str, commits: int) -> str:
    """A table of versions 0..commits-1 put straight into a moto bucket (no HTTP): version 0
    and its checkpoint written by deltalake, then one-file overwrites (remove the previous
    file, add a new one), the newest tenth version checkpointed and named by
    ``_last_checkpoint``, as a writer checkpointing every 10 commits leaves it (older
    checkpoints are left out: no poke reads them)."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable, write_deltalake
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    local = tmp_path / bucket / prefix
    write_deltalake(str(local), pa.table({"id": pa.array([0], pa.int64())}))
    DeltaTable(str(local)).create_checkpoint()
    log = local / "_delta_log"
    template = pq.read_table(log / f"{0:020d}.checkpoint.parquet")
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]

    def put(name: str, data: bytes) -> None:
        backend.put_object(bucket, f"{prefix}/_delta_log/{name}", data)

    put(f"{0:020d}.json", (log / f"{0:020d}.json").read_bytes())
    previous = next(a["path"] for a in template.column("add").to_pylist() if a)
    commit = "\n".join(json.dumps(action) for action in [  # formatted, not dumped 100,000 times
        {"commitInfo": {"timestamp": "TIME", "operation": "WRITE"}},
        {"remove": {"path": "REMOVED", "deletionTimestamp": 1_700_000_000_000,
                    "dataChange": True}},
        {"add": {"path": "ADDED", "partitionValues": {}, "size": 500,
                 "modificationTime": 1_700_000_000_000, "dataChange": True}},
    ]).replace('"TIME"', "%d").replace("REMOVED", "%s").replace("ADDED", "%s") + "\n"
    for version in range(1, commits):
        added = f"part-{version:07d}.parquet"
        put(f"{version:020d}.json",
            (commit % (1_700_000_000_000 + version, previous, added)).encode())
        previous = added
    newest = (commits - 1) // 10 * 10
    added = f"part-{newest:07d}.parquet" if newest else previous
    adds = [dict(a, path=added) if a else None for a in template.column("add").to_pylist()]
    index = template.schema.get_field_index("add")
    checkpoint = template.set_column(index, template.schema.field("add"),
                                     pa.array(adds, template.schema.field("add").type))
    sink = pa.BufferOutputStream()
    pq.write_table(checkpoint, sink)
    put(f"{newest:020d}.checkpoint.parquet", sink.getvalue().to_pybytes())
    put("_last_checkpoint", json.dumps({"version": newest, "size": len(checkpoint)}).encode())
    return f"s3://{bucket}/{prefix}"


@pytest.mark.slow  # 100,000 commits put into moto
def test_an_idle_poke_is_one_listing_at_any_history_length(tmp_path, s3_options):
    """What a sensor or trigger sends to S3 when nothing is new: one start-after LIST from
    its watermark, at 100 commits and at 100,000; its first poke (which also replays the
    head's protocol from the newest checkpoint) costs the same at both lengths."""
    from airflow_provider_delta.core.probe import VersionProbe
    from tests.moto_s3 import counted_requests, scratch_bucket

    first_pokes = []
    for commits in (100, 100_000):
        head = commits - 1
        with scratch_bucket(f"history-{commits}") as bucket, \
                counted_requests(s3_options) as (counted, requests):
            uri = _log_in_moto(tmp_path, bucket, "t", commits)
            probe = VersionProbe(uri, counted)
            assert probe.new_range(head + 1, probe.latest(since=head)) is None
            first_pokes.append(dict(requests))
            requests.clear()
            for _ in range(3):
                assert probe.new_range(head + 1, probe.latest(since=head)) is None
            assert requests == {"GET": 3}, (commits, requests)
    assert first_pokes[0] == first_pokes[1], first_pokes


def _table_of_many_files(path, files: int) -> None:
    """A table whose second commit adds ``files`` files (log only) with statistics, then
    deltalake's checkpoint of it: one row group holding every file, as a big table has it."""
    import json

    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    write_deltalake(str(path), pa.table({"id": pa.array([], pa.int64()),
                                         "part": pa.array([], pa.string())}),
                    partition_by=["part"])
    lines = [json.dumps({"commitInfo": {"timestamp": 1_700_000_000_000, "operation": "WRITE"}})]
    lines += [json.dumps({"add": {
        "path": f"part=p{i % 7}/f-{i:06d}.parquet", "partitionValues": {"part": f"p{i % 7}"},
        "size": 1000 + i, "modificationTime": 1_700_000_000_000 + i, "dataChange": True,
        "stats": json.dumps({"numRecords": 10 + i % 5, "minValues": {"id": i},
                             "maxValues": {"id": i + 9}, "nullCount": {"id": 0}})}})
        for i in range(files)]
    (path / "_delta_log" / f"{1:020d}.json").write_text("\n".join(lines) + "\n")
    DeltaTable(str(path)).create_checkpoint()


def test_a_large_remote_checkpoint_is_read_in_ranges(tmp_path, s3_options, monkeypatch):
    """A checkpoint larger than the tail read first is not fetched whole: one request for its
    tail (the footer), then one streamed request per column chunk the plan reads. The plan
    is the local copy's."""
    import pyarrow.parquet as pq

    from airflow_provider_delta import storage
    from tests.moto_s3 import counted_requests, put_tree

    local = tmp_path / "many"
    _table_of_many_files(local, 20_000)
    checkpoint = local / "_delta_log" / f"{1:020d}.checkpoint.parquet"
    size = checkpoint.stat().st_size
    monkeypatch.setattr(storage, "TAIL_BYTES", size // 8)
    uri = put_tree(local, "ranged")
    with counted_requests(s3_options) as (counted, requests):
        remote = plan_snapshot(uri, storage_options=counted)
    local_plan = plan_snapshot(str(local))
    assert remote.file_table.drop_columns("path").equals(
        local_plan.file_table.drop_columns("path"))
    assert remote.file_table.column("path").to_pylist() == [
        p.replace(f"file://{local}", uri) for p in local_plan.file_table.column("path").to_pylist()]
    # the listing, _last_checkpoint, the tail, and a request per column chunk read (of the
    # protocol and metaData rows, and of the adds' fields a plan keeps), well below one a MiB
    chunks = pq.ParquetFile(checkpoint).metadata.num_columns
    assert requests["HEAD"] == 1 and 4 < requests["GET"] < 3 + chunks, (requests, chunks)
