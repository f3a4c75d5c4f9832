"""The delta sink's own commit (``job/sinks/blind_append.py``): which targets it commits itself
and which it leaves to deltalake, what readers see of its commits, the checkpoints it keeps
making, and its put-if-absent on S3."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter

import pyarrow as pa
import pytest
from deltalake import DeltaTable, Field, write_deltalake
from deltalake.transaction import Transaction

from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.errors import (
    SinkCommitConflictError, SinkHardLinksError, SinkSchemaMismatchError,
)
from airflow_provider_delta.job.sinks import DeltaAppendSink, delta_append
from airflow_provider_delta.job.sinks.blind_append import (
    ENGINE, blind_append_actions, put_commit, unwritable_feature,
)
from airflow_provider_delta.job.sinks.target_log import TargetLog
from airflow_provider_delta.job.spec import SinkSpec

from .conftest import delta_rows


def _metadata(*fields: dict, **configuration: str) -> dict:
    return {"schemaString": json.dumps({"type": "struct", "fields": list(fields)}),
            "configuration": configuration}


def _field(name: str, kind: object = "long", **metadata: object) -> dict:
    return {"name": name, "type": kind, "nullable": True, "metadata": metadata}


PLAIN = _metadata(_field("id"))


def _features(*names: str) -> dict:
    return {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": [],
            "writerFeatures": list(names)}


def test_targets_the_sink_commits_itself_and_those_it_leaves_to_deltalake():
    for writer_version in (2, 3, 4, 5, 6):
        assert unwritable_feature({"minWriterVersion": writer_version}, PLAIN, None) is None
    assert unwritable_feature(_features("appendOnly", "deletionVectors", "domainMetadata",
                                        "changeDataFeed", "timestampNtz"), PLAIN, None) is None
    for feature in ("clustering", "icebergCompatV2",
                    "v2Checkpoint", "allowColumnDefaults", "a-feature-of-tomorrow"):
        assert unwritable_feature(_features("appendOnly", feature), PLAIN, None) == feature

    constrained = _metadata(_field("id"), **{"delta.constraints.positive": "id > 0"})
    assert unwritable_feature({"minWriterVersion": 3}, constrained, None) == (
        "CHECK constraint delta.constraints.positive")
    mapped = _metadata(_field("id"), **{"delta.columnMapping.mode": "name"})
    assert unwritable_feature({"minWriterVersion": 5}, mapped, None) == "columnMapping"
    nested = {"type": "struct", "fields": [_field("x", **{"delta.invariants": "x > 0"})]}
    assert unwritable_feature({"minWriterVersion": 2}, _metadata(_field("inner", nested)),
                              None) == "column 'x' (delta.invariants)"
    generated = _field("day", "date", **{"delta.generationExpression": "CAST(ts AS DATE)"})
    assert unwritable_feature({"minWriterVersion": 4}, _metadata(generated), None) == (
        "column 'day' (delta.generationExpression)")
    identity = _field("id", **{"delta.identity.start": 1, "delta.identity.step": 1})
    assert unwritable_feature({"minWriterVersion": 6}, _metadata(identity), None) == (
        "column 'id' (delta.identity.start)")
    assert unwritable_feature({"minWriterVersion": 2}, PLAIN,
                              {"AWS_S3_LOCKING_PROVIDER": "dynamodb"}) == (
        "storage option AWS_S3_LOCKING_PROVIDER")


def _newest_commit_info(target: str) -> dict:
    return DeltaTable(target).history(1)[0]


def test_the_sink_commits_itself_and_keeps_the_checkpoints_coming(spark, tmp_path):
    target = str(tmp_path / "target")
    spec = SinkSpec(kind="delta", path=target, partition_by=("part",), app_id="app-1")
    frame = spark.createDataFrame([(1, "a b%/é")], "id long, part string")
    DeltaAppendSink(spec).write(frame, 0, 0)  # deltalake creates the table
    DeltaTable(target).alter.set_table_properties({"delta.checkpointInterval": "3"})

    written = DeltaAppendSink(spec).write(
        spark.createDataFrame([(2, "a b%/é"), (3, None)], "id long, part string"), 1, 1)

    assert (written.sink_version, written.rows) == (2, 2)
    info = _newest_commit_info(target)
    assert (info["engineInfo"], info["isBlindAppend"], info["readVersion"]) == (ENGINE, True, 1)
    assert info["operationMetrics"]["numOutputRows"] == 2
    assert DeltaTable(target).transaction_version("app-1") == 1
    assert delta_rows(target) == Counter({(1, "a b%/é"): 1, (2, "a b%/é"): 1, (3, None): 1})
    # Version 2 is where deltalake checkpoints with an interval of 3: the sink made it there.
    assert (tmp_path / "target/_delta_log/00000000000000000002.checkpoint.parquet").exists()
    assert json.loads((tmp_path / "target/_delta_log/_last_checkpoint").read_text())[
        "version"] == 2
    assert TargetLog.open(spec).first_unwritten(0, 5) == 2


def test_a_target_with_a_check_constraint_is_committed_by_deltalake(spark, tmp_path, caplog):
    target = str(tmp_path / "target")
    spec = SinkSpec(kind="delta", path=target, app_id="app-1")
    DeltaAppendSink(spec).write(spark.createDataFrame([(1,)], "id long"), 0, 0)
    DeltaTable(target).alter.add_constraint({"positive": "id > 0"})
    caplog.set_level("INFO", logger="airflow_provider_delta.job.sinks.delta_append")

    written = DeltaAppendSink(spec).write(spark.createDataFrame([(2,)], "id long"), 1, 1)

    assert written.sink_version == 2
    assert "deltalake commits the batch (CHECK constraint delta.constraints.positive)" in (
        caplog.text)
    assert _newest_commit_info(target)["engineInfo"].startswith("delta-rs")
    assert delta_rows(target) == Counter({(1,): 1, (2,): 1})
    assert TargetLog.open(spec).first_unwritten(0, 5) == 2


class _SchemaChangedBeforeCommit(DeltaAppendSink):
    """The real sink; another writer adds a column to the target right before its commit."""

    def _commit(self, *args, **kwargs):
        if not getattr(self, "changed", False):
            self.changed = True
            DeltaTable(self.uri).alter.add_columns([Field("extra", "string", nullable=True)])
        return super()._commit(*args, **kwargs)


def test_a_schema_another_writer_changed_before_the_commit_is_refused(spark, tmp_path):
    """The commit loses its version to the schema change; on the newer snapshot the files
    lack a column of the target: refused, as Delta refuses a commit across a metadata change."""
    target = str(tmp_path / "target")
    spec = SinkSpec(kind="delta", path=target, app_id="app-1")
    DeltaAppendSink(spec).write(spark.createDataFrame([(1,)], "id long"), 0, 0)

    with pytest.raises(SinkSchemaMismatchError, match="extra"):
        _SchemaChangedBeforeCommit(spec).write(spark.createDataFrame([(2,)], "id long"), 1, 1)

    assert DeltaTable(target).version() == 1  # the other writer's change only
    assert delta_rows(target) == Counter({(1, None): 1})
    assert TargetLog.open(spec).committed_version() == 0


def test_put_if_absent_on_s3_lets_one_writer_have_a_version(s3_options):
    uri = "s3://lake/own-commit"
    write_deltalake(uri, pa.table({"id": pa.array([1], pa.int64())}), storage_options=s3_options)
    location = TableLocation(uri, s3_options)

    first, second = (blind_append_actions([], [Transaction(app_id, 7)], {}, [], 0, 0)
                     for app_id in ("first", "second"))

    assert put_commit(location, 1, first) is True
    assert put_commit(location, 1, second) is False  # version 1 exists: the second writer lost
    # A put whose answer was lost, retried: it finds its own commit, which it must not take
    # for another writer's (the sink would drop the files it commits).
    assert put_commit(location, 1, first) is True
    table = DeltaTable(uri, storage_options=s3_options)
    assert table.version() == 1
    assert (table.transaction_version("first"), table.transaction_version("second")) == (7, None)


class _AnotherWriterBeforeEachCommit(DeltaAppendSink):
    """The real sink; another writer appends to the target right before each of its commits,
    so every attempt finds its version taken."""

    def _commit(self, *args, **kwargs):
        write_deltalake(self.uri, pa.table({"id": pa.array([-1], pa.int64())}), mode="append")
        return super()._commit(*args, **kwargs)


@pytest.mark.parametrize("constraint", [None, {"positive": "id != 0"}],
                         ids=["own-commit", "deltalake-commit"])
def test_a_batch_that_loses_every_race_is_refused_and_commits_nothing(spark, tmp_path,
                                                                     monkeypatch, constraint):
    target = str(tmp_path / "target")
    spec = SinkSpec(kind="delta", path=target, app_id="app-1")
    DeltaAppendSink(spec).write(spark.createDataFrame([(1,)], "id long"), 0, 0)
    if constraint:
        DeltaTable(target).alter.add_constraint(constraint)
    before = DeltaTable(target).version()
    monkeypatch.setattr(delta_append, "COMMIT_ATTEMPTS", 3)

    sink = _AnotherWriterBeforeEachCommit(spec)
    with pytest.raises(SinkCommitConflictError, match="3 commits of source versions 1..1 lost "
                       "to concurrent writers; nothing of this batch was committed. The task's "
                       "retry loads it again"):
        sink.write(spark.createDataFrame([(2,)], "id long"), 1, 1)

    assert sink.lost_races == 3
    staged = (tmp_path / "target" / "airflow_staging").glob(f"{1:020d}-*/*.parquet")
    assert list(staged) == []  # the batch's files are dropped (batch 0's stay: committed)
    assert DeltaTable(target).version() == before + 3  # the other writer's appends only
    assert delta_rows(target) == Counter({(1,): 1, (-1,): 3})
    assert TargetLog.open(spec).committed_version() == 0


@pytest.fixture
def log_without_hard_links(tmp_path):
    """A table folder whose ``_delta_log`` is a FAT file system (fusefat, through FUSE): it
    refuses hard links, as FAT, some FUSE and network mounts do."""
    if not (shutil.which("fusefat") and shutil.which("mkfs.vfat")):
        pytest.skip("needs Debian's fusefat and dosfstools (.ci/run installs them)")
    image, log = tmp_path / "log.img", tmp_path / "target" / "_delta_log"
    with open(image, "wb") as handle:
        handle.truncate(32 << 20)
    subprocess.run(["mkfs.vfat", str(image)], check=True, capture_output=True)
    log.mkdir(parents=True)
    mounted = subprocess.run(["fusefat", "-o", "rw+", str(image), str(log)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"mounting a FUSE file system is not permitted here: {mounted.stderr}")
    yield log.parent
    subprocess.run(["fusermount", "-u", str(log)], check=True)


def test_a_file_system_without_hard_links_falls_back_to_deltalake(spark, log_without_hard_links,
                                                                  caplog):
    """The own commit's put-if-absent is a hard link: refused there, the sink leaves the commit
    to deltalake, whose commit (a hard link too, in deltalake 1.6) fails the same way unless
    allow_unsafe_rename lets it rename; the error says so."""
    target = str(log_without_hard_links)
    unsafe = {"allow_unsafe_rename": "true"}
    write_deltalake(target, pa.table({"id": pa.array([1], pa.int64())}), storage_options=unsafe)
    caplog.set_level("INFO", logger="airflow_provider_delta.job.sinks.delta_append")
    spec = SinkSpec(kind="delta", path=target, app_id="app-1")

    with pytest.raises(SinkHardLinksError, match="version 1 was not committed.*"
                       "allow_unsafe_rename"):
        DeltaAppendSink(spec).write(spark.createDataFrame([(2,)], "id long"), 0, 0)
    assert "the file system refuses hard links (Operation not permitted), which this sink's own " \
        "commit uses; deltalake commits the batch instead" in caplog.text
    assert "deltalake commits the batch (the file system refuses hard links" in caplog.text
    assert DeltaTable(target).version() == 0

    written = DeltaAppendSink(SinkSpec(kind="delta", path=target, app_id="app-1",
                                       storage_options=unsafe)).write(
        spark.createDataFrame([(2,)], "id long"), 0, 0)
    assert written.sink_version == 1
    assert delta_rows(target) == Counter({(1,): 1, (2,): 1})
