"""Target features the delta sink meets on tables shared with Delta's writers: txn records with
``lastUpdated`` under a transaction retention, in-commit timestamps and row ids in its own commit
(recomputed after a lost race), and the early refusal of targets nothing here can write. Delta's
engine checks the same on real targets in tests/delta_spark/test_shared_targets.py."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, TableFeatures, write_deltalake

from airflow_provider_delta.errors import SinkRecordsExpiredError, SinkTargetError
from airflow_provider_delta.job.plan import plan_load
from airflow_provider_delta.job.sinks import DeltaAppendSink
from airflow_provider_delta.job.sinks.target_log import TargetLog
from airflow_provider_delta.job.sinks.targets import STAGING_FOLDER
from airflow_provider_delta.job.spec import SinkSpec

from .conftest import append_rows, delta_rows
from .test_differential import spec_of

HOUR_MS = 3_600_000
ROWS = pa.table({"id": pa.array([1], pa.int64())})


def _commit_actions(target: str, version: int) -> list[dict]:
    path = Path(target, "_delta_log", f"{version:020d}.json")
    return [json.loads(line) for line in path.read_text().splitlines()]


def _append_commit(target: str, *actions: dict) -> int:
    """Another writer's commit of ``actions`` (written as Delta's writers write one)."""
    version = DeltaTable(target).version() + 1
    Path(target, "_delta_log", f"{version:020d}.json").write_text(
        "".join(json.dumps(a) + "\n" for a in actions))
    return version


def _set_configuration(target: str, **configuration: str) -> None:
    """Another writer's commit of table properties (deltalake refuses to commit on targets
    with the features here)."""
    metadata = TargetLog.open(SinkSpec(kind="delta", path=target, app_id="x")).view()
    changed = dict(metadata.raw_metadata)
    changed["configuration"] = {**(changed.get("configuration") or {}), **configuration}
    _append_commit(target, {"metaData": changed})


def test_every_txn_record_carries_last_updated(spark, tmp_path):
    target = str(tmp_path / "target")
    spec = SinkSpec(kind="delta", path=target, app_id="app-1", source="s3://lake/source")
    before = int(time.time() * 1000)
    DeltaAppendSink(spec).write(spark.createDataFrame([(1,)], "id long"), 0, 0)  # deltalake
    DeltaAppendSink(spec).write(spark.createDataFrame([(2,)], "id long"), 1, 1)  # own commit

    for version in (0, 1):
        txns = [a["txn"] for a in _commit_actions(target, version) if "txn" in a]
        assert len(txns) > 3
        assert all(before <= t["lastUpdated"] <= time.time() * 1000 for t in txns), txns


def test_records_expired_under_a_txn_retention_refuse_the_range_they_covered(spark, tmp_path):
    """Delta forgets a txn older than delta.setTransactionRetentionDuration; while the log
    still shows this task's, a re-run of their range is refused, not written twice."""
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    for ids in ([0, 1], [2], [3]):
        append_rows(source, ids)
    spec = spec_of(source, target, 0, 1)
    plan = plan_load(spec)
    from airflow_provider_delta.job.driver import run_job
    run_job(spark, spec)
    assert plan.sink.first_unwritten(0, 1) == 2
    DeltaTable(target).alter.set_table_properties(
        {"delta.setTransactionRetentionDuration": "interval 1 seconds"})
    time.sleep(1.5)

    log = TargetLog.open(spec.sink)
    assert log.committed_version() is None  # forgotten, as Delta's snapshot forgets it
    with pytest.raises(SinkRecordsExpiredError, match="expired under the target's "
                       "delta.setTransactionRetentionDuration='interval 1 seconds'.*"
                       "start_version=2"):
        log.first_unwritten(0, 1)
    assert log.first_unwritten(2, 2) == 2  # a range after them loads
    written = run_job(spark, spec_of(source, target, 2, 2))
    assert [b.rows for b in written.batches] == [1]
    assert delta_rows(target) == delta_rows(source)


def _ict_row_tracking_target(path: Path) -> str:
    """A target whose protocol has in-commit timestamps (enabled) and row tracking, as Delta
    writes them; its newest commit's timestamp an hour ahead (another writer's clock)."""
    target = str(path)
    write_deltalake(target, ROWS)
    metadata = next(a for a in _commit_actions(target, 0) if "metaData" in a)["metaData"]
    metadata["configuration"] = {"delta.enableInCommitTimestamps": "true",
                                 "delta.inCommitTimestampEnablementVersion": "1",
                                 "delta.inCommitTimestampEnablementTimestamp": "1"}
    ahead = int(time.time() * 1000) + HOUR_MS
    _append_commit(
        target, {"commitInfo": {"timestamp": ahead, "inCommitTimestamp": ahead}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": [
            "inCommitTimestamp", "domainMetadata", "rowTracking"]}},
        {"metaData": metadata},
        {"domainMetadata": {"domain": "delta.rowTracking", "removed": False,
                            "configuration": json.dumps({"rowIdHighWaterMark": 9})}})
    return target


class _RacedOnce(DeltaAppendSink):
    """The real sink; another writer commits right before its first attempt, with an
    in-commit timestamp two hours ahead and row ids up to 99."""

    def _commit(self, *args, **kwargs):
        if not self.lost_races and not getattr(self, "raced", False):
            self.raced = True
            ahead = int(time.time() * 1000) + 2 * HOUR_MS
            self.other_ict = ahead
            _append_commit(self.spec.path, {"commitInfo": {"timestamp": ahead,
                                                     "inCommitTimestamp": ahead}},
                           {"domainMetadata": {"domain": "delta.rowTracking", "removed": False,
                                               "configuration": '{"rowIdHighWaterMark": 99}'}})
        return super()._commit(*args, **kwargs)


def test_in_commit_timestamp_and_row_ids_follow_the_snapshot_and_a_lost_race(spark, tmp_path):
    target = _ict_row_tracking_target(tmp_path / "target")
    spec = SinkSpec(kind="delta", path=target, app_id="app-1")
    ahead = _commit_actions(target, 1)[0]["commitInfo"]["inCommitTimestamp"]

    written = DeltaAppendSink(spec).write(
        spark.createDataFrame([(2,), (3,), (4,)], "id long").repartition(2), 0, 0)

    actions = _commit_actions(target, written.sink_version)
    assert actions[0]["commitInfo"]["inCommitTimestamp"] == ahead + 1  # not the clock's now
    adds = sorted((a["add"] for a in actions if "add" in a), key=lambda a: a["baseRowId"])
    assert [a["defaultRowCommitVersion"] for a in adds] == [written.sink_version] * len(adds)
    counts = [json.loads(a["stats"])["numRecords"] for a in adds]
    assert [a["baseRowId"] for a in adds] == [10 + sum(counts[:i]) for i in range(len(adds))]
    marks = [a["domainMetadata"] for a in actions if "domainMetadata" in a]
    assert marks == [{"domain": "delta.rowTracking", "removed": False,
                      "configuration": json.dumps({"rowIdHighWaterMark": 12})}]

    raced = _RacedOnce(spec)
    written = raced.write(spark.createDataFrame([(5,), (6,)], "id long").coalesce(1), 1, 1)
    assert raced.lost_races == 1
    actions = _commit_actions(target, written.sink_version)
    assert actions[0]["commitInfo"]["inCommitTimestamp"] == raced.other_ict + 1
    assert [a["add"]["baseRowId"] for a in actions if "add" in a] == [100]
    assert [json.loads(a["domainMetadata"]["configuration"]) for a in actions
            if "domainMetadata" in a] == [{"rowIdHighWaterMark": 101}]
    assert delta_rows(target) == Counter({(i,): 1 for i in range(1, 7)})


def test_row_tracking_suspended_assigns_no_row_ids(spark, tmp_path):
    target = _ict_row_tracking_target(tmp_path / "target")
    _set_configuration(target, **{"delta.rowTrackingSuspended": "true"})
    spec = SinkSpec(kind="delta", path=target, app_id="app-1")
    written = DeltaAppendSink(spec).write(spark.createDataFrame([(2,)], "id long"), 0, 0)
    actions = _commit_actions(target, written.sink_version)
    assert not [a for a in actions if "domainMetadata" in a]
    assert all("baseRowId" not in a["add"] for a in actions if "add" in a)


def test_targets_nothing_here_writes_are_refused_before_spark(tmp_path):
    source = str(tmp_path / "source")
    append_rows(source, [0, 1])
    target = str(tmp_path / "target")
    write_deltalake(target, pa.table({"id": pa.array([1], pa.int64()),
                                      "name": pa.array(["a"], pa.string())}))
    table = DeltaTable(target)
    table.alter.add_feature(TableFeatures.RowTracking, allow_protocol_versions_increase=True)
    assert plan_load(spec_of(source, target, 0, 0)).resume == 0  # the own commit writes it

    _set_configuration(target, **{"delta.constraints.positive": "id > 0"})
    with pytest.raises(SinkTargetError, match="table feature 'rowTracking', which deltalake "
                       ".*own commit cannot write this target \\(CHECK constraint "
                       "delta.constraints.positive\\); nothing was written. "
                       'Set sink="delta-spark"'):
        plan_load(spec_of(source, target, 0, 0))
    with pytest.raises(SinkTargetError, match="deltalake \\(which commits merges\\)"):
        plan_load(spec_of(source, target, 0, 0, change_feed=True))
    assert not Path(target, STAGING_FOLDER).exists()


def test_new_columns_on_a_target_deltalake_cannot_alter_are_refused_before_writing(
        spark, tmp_path):
    target = _ict_row_tracking_target(tmp_path / "target")
    spec = SinkSpec(kind="delta", path=target, app_id="app-1",
                    options={"mergeSchema": "true"})
    with pytest.raises(SinkTargetError, match="'domainMetadata'.*own commit cannot write "
                       "this target \\(the rows add columns, which only deltalake adds\\)"):
        DeltaAppendSink(spec).check(spark.createDataFrame([(2, "x")], "id long, extra string"))
