"""Targets shared with Delta's own writers, checked by Delta's engine: the sink's txn records
outlive Delta's checkpoints and log cleanup under a transaction retention, its own commits carry
in-commit timestamps and row ids as Delta's rules ask, and targets neither of its committers can
write are refused before any Spark job."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_provider_delta.errors import MissingDataFileError, SinkTargetError
from airflow_provider_delta.job.driver import run_job
from airflow_provider_delta.job.plan import plan_load
from airflow_provider_delta.job import plan
from airflow_provider_delta.job.sinks import DeltaAppendSink
from airflow_provider_delta.job.sinks.blind_append import ENGINE
from airflow_provider_delta.job.sinks.targets import STAGING_FOLDER
from tests.delta_spark.conftest import needs_delta_jars
from tests.operators.conftest import append_rows, delta_rows
from tests.operators.test_differential import spec_of

pytestmark = [needs_delta_jars, pytest.mark.slow]

DAY_MS = 86_400_000


def _commits(target: str) -> dict[int, list[dict]]:
    """Each commit file still in the target's log: its actions, in file order."""
    log = Path(target, "_delta_log")
    return {int(p.name.split(".")[0]): [json.loads(line) for line in p.read_text().splitlines()]
            for p in sorted(log.glob("*.json"))}


def _set_properties(spark, target: str, **properties: str) -> None:
    """One commit of Delta's writer setting table properties."""
    pairs = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    spark.sql(f"ALTER TABLE delta.`{target}` SET TBLPROPERTIES ({pairs})")


def _age_log(target: str, days: int) -> None:
    """Date every log file ``days`` back, as if the loads had happened then."""
    when = time.time() - days * 86_400
    for path in Path(target, "_delta_log").iterdir():
        if path.is_file():
            os.utime(path, (when, when))


def _delta_rows(spark, target: str) -> Counter:
    return Counter(tuple(r) for r in spark.read.format("delta").load(target).collect())


def test_records_outlive_deltas_checkpoint_and_log_cleanup_under_a_txn_retention(
        delta_spark, tmp_path):
    """Delta drops, at its checkpoint, every txn not updated within
    delta.setTransactionRetentionDuration (and every txn without lastUpdated); the sink's
    records carry lastUpdated, so a re-run of a loaded range, once Delta has checkpointed and
    cleaned the log of every commit of the loads, still writes nothing."""
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    for ids in ([0, 1], [2], [3, 4]):
        append_rows(source, ids)
    spec = spec_of(source, target, 0, 2, max_files=1)
    assert len(run_job(delta_spark, spec).batches) == 3
    loaded = delta_rows(target)
    app_id = spec.sink.app_id

    _set_properties(delta_spark, target, **{
        "delta.setTransactionRetentionDuration": "interval 1 days",
        "delta.logRetentionDuration": "interval 1 days",
        "delta.deletedFileRetentionDuration": "interval 1 days", "delta.checkpointInterval": "1"})
    for step in range(2):  # Delta checkpoints each of its commits; cleanup needs an old one
        _age_log(target, days=3)
        _set_properties(delta_spark, target, **{"probe.step": str(step)})
    commits = _commits(target)
    assert min(commits) > 3, f"Delta left commits {sorted(commits)}"  # the loads' are gone

    assert run_job(delta_spark, spec).batches == ()  # the re-run writes nothing
    assert delta_rows(target) == loaded
    checkpoints = sorted(Path(target, "_delta_log").glob("*.checkpoint.parquet"))
    txns = [t for t in pq.read_table(checkpoints[-1], columns=["txn"]).column("txn").to_pylist()
            if t]
    ours = {t["appId"]: t for t in txns}
    assert ours[app_id]["version"] == 2
    assert ours[app_id]["lastUpdated"] > time.time() * 1000 - DAY_MS
    assert run_job(delta_spark, spec_of(source, target, 1, 2)).batches == ()
    append_rows(source, [5])
    assert [b.start_version for b in run_job(delta_spark, spec_of(source, target, 0, 3)
                                             ).batches] == [3]
    assert _delta_rows(delta_spark, target) == delta_rows(source)


def _ict_commits(target: str, since: int) -> list[tuple[int, str, int]]:
    """(version, first action's name, its inCommitTimestamp) of each commit from ``since``."""
    return [(version, next(iter(actions[0])), actions[0].get("commitInfo", {}).get(
        "inCommitTimestamp")) for version, actions in sorted(_commits(target).items())
        if version >= since]


def test_in_commit_timestamps_on_a_target_delta_enabled_them(delta_spark, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    for ids in ([0, 1], [2], [3, 4], [5]):
        append_rows(source, ids)
    run_job(delta_spark, spec_of(source, target, 0, 0))
    _set_properties(delta_spark, target, **{"delta.enableInCommitTimestamps": "true"})
    enabled = max(_commits(target))

    batches = run_job(delta_spark, spec_of(source, target, 0, 3, max_files=1)).batches
    assert [b.sink_version for b in batches] == [enabled + 1, enabled + 2, enabled + 3]
    delta_spark.sql(f"INSERT INTO delta.`{target}` VALUES (100, 'by Delta')")

    commits = _ict_commits(target, enabled)
    assert [c[1] for c in commits] == ["commitInfo"] * 5
    stamps = [c[2] for c in commits]
    assert all(isinstance(s, int) for s in stamps) and stamps == sorted(set(stamps)), stamps
    ours = [actions[0]["commitInfo"].get("engineInfo") == ENGINE
            for version, actions in sorted(_commits(target).items()) if version > enabled]
    assert ours == [True, True, True, False]
    history = delta_spark.sql(f"DESCRIBE HISTORY delta.`{target}`").collect()
    by_version = {r["version"]: int(r["timestamp"].timestamp() * 1000) for r in history}
    assert [by_version[v] for v, _, _ in commits] == stamps  # Delta reads them as commit times
    assert _delta_rows(delta_spark, target) == delta_rows(source) + Counter({(100, "by Delta"): 1})


def test_row_ids_on_a_row_tracking_target_continue_deltas(delta_spark, tmp_path):
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    for ids in ([0, 1, 2], [3, 4], [5, 6, 7, 8]):
        append_rows(source, ids)
    delta_spark.sql(f"CREATE TABLE delta.`{target}` (id BIGINT, name STRING) USING delta "
                    "TBLPROPERTIES ('delta.enableRowTracking' = 'true')")
    delta_spark.sql(f"INSERT INTO delta.`{target}` VALUES (100, 'a'), (101, 'b')")

    batches = run_job(delta_spark, spec_of(source, target, 0, 2, max_files=1)).batches
    delta_spark.sql(f"INSERT INTO delta.`{target}` VALUES (102, 'c'), (103, 'd')")

    rows = delta_spark.read.format("delta").load(target).select(
        "id", "_metadata.row_id", "_metadata.row_commit_version").collect()
    ids = [r["row_id"] for r in rows]
    assert len(ids) == 13 and len(set(ids)) == 13 and None not in ids
    versions = {r["id"]: r["row_commit_version"] for r in rows}
    for batch in batches:  # each source version's rows: its own commit's version
        ids_of_batch = {0: [0, 1, 2], 1: [3, 4], 2: [5, 6, 7, 8]}[batch.start_version]
        assert {versions[i] for i in ids_of_batch} == {batch.sink_version}
    row_id = {r["id"]: r["row_id"] for r in rows}
    ours = [row_id[i] for i in range(9)]
    assert min(ours) > max(row_id[100], row_id[101])  # after Delta's first rows
    assert min(row_id[102], row_id[103]) > max(ours)  # Delta's next rows continue after ours
    marks = [json.loads(a["domainMetadata"]["configuration"])["rowIdHighWaterMark"]
             for _, actions in sorted(_commits(target).items()) for a in actions
             if "domainMetadata" in a and a["domainMetadata"]["domain"] == "delta.rowTracking"]
    assert marks == sorted(marks) and marks[-1] == max(row_id.values())


def test_targets_neither_committer_writes_are_refused_before_spark(delta_spark, tmp_path):
    source = str(tmp_path / "source")
    append_rows(source, [0, 1])
    identity = str(tmp_path / "identity")
    delta_spark.sql(f"CREATE TABLE delta.`{identity}` (id BIGINT, name STRING, "
                    "n BIGINT GENERATED ALWAYS AS IDENTITY) USING delta")
    checked = str(tmp_path / "checked")
    delta_spark.sql(f"CREATE TABLE delta.`{checked}` (id BIGINT, name STRING) USING delta "
                    "TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')")
    delta_spark.sql(f"ALTER TABLE delta.`{checked}` ADD CONSTRAINT positive CHECK (id >= 0)")

    for target, problem in ((identity, "'identityColumns'.*column 'n'"),
                            (checked, "'inCommitTimestamp'.*CHECK constraint")):
        with pytest.raises(SinkTargetError, match=f"{problem}.*nothing was written.*"
                           'sink="delta-spark"'):
            plan_load(spec_of(source, target, 0, 0))  # what the operator runs before Spark
        assert not Path(target, STAGING_FOLDER).exists()

    # Delta's own writer takes them.
    spec = spec_of(source, checked, 0, 0)
    run_job(delta_spark, replace(spec, sink=replace(spec.sink, use_delta_spark=True)))
    assert _delta_rows(delta_spark, checked) == delta_rows(source)
    txns = [a["txn"] for a in _commits(checked)[max(_commits(checked))] if "txn" in a]
    assert [t["appId"] for t in txns] == [spec.sink.app_id] and txns[0]["lastUpdated"] > 0


def test_versions_beyond_the_deleted_file_retention_load_while_their_files_exist(
        delta_spark, tmp_path):
    """A deliberate difference from Delta: Delta refuses time travel to a version older than
    delta.deletedFileRetentionDuration (VACUUM may have taken its files); the provider reads
    any version whose files exist, and refuses at task start, before Spark, one whose files
    VACUUM removed."""
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    append_rows(source, [0, 1])
    delta_spark.sql(f"ALTER TABLE delta.`{source}` SET TBLPROPERTIES "
                    "('delta.deletedFileRetentionDuration' = 'interval 1 seconds', "
                    "'delta.logRetentionDuration' = 'interval 1 seconds')")
    delta_spark.createDataFrame([(7, "x")], "id long, name string").write.format("delta") \
        .mode("overwrite").save(source)  # version 2 removes version 0's file
    time.sleep(2)
    with pytest.raises(Exception, match="BEYOND_DELETED_FILE_RETENTION_DURATION"):
        delta_spark.read.format("delta").option("versionAsOf", 0).load(source).collect()

    run_job(delta_spark, spec_of(source, target, None, 0))
    assert delta_rows(target) == delta_rows(source, version=0)

    # VACUUM lists the table's folders in a Spark job of parallelPartitionDiscovery.parallelism
    # tasks: 10,000 by default, 40 s of this test's 53 on local[2] for a table of two files.
    confs = {"spark.databricks.delta.retentionDurationCheck.enabled": "false",
             "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2"}
    for key, value in confs.items():
        delta_spark.conf.set(key, value)
    try:
        delta_spark.sql(f"VACUUM delta.`{source}` RETAIN 0 HOURS")
    finally:
        for key in confs:
            delta_spark.conf.unset(key)
    with pytest.raises(MissingDataFileError, match="deletedFileRetentionDuration"):
        plan_load(spec_of(source, str(tmp_path / "other"), None, 0), check_files=True)


class _DeltaWritesFirst(DeltaAppendSink):
    """The real sink; Delta's writer appends a row right before each batch's first commit
    attempt, taking the version that attempt reads as free."""

    spark = None
    appended: list[int] = []

    def _commit(self, target, *args, **kwargs):
        if getattr(self, "raced_at", None) != args[3]:  # once per batch (its start version)
            self.raced_at = args[3]
            row = 1000 + len(self.appended)
            self.spark.sql(f"INSERT INTO delta.`{self.spec.path}` VALUES ({row}, 'by Delta')")
            self.appended.append(row)
        return super()._commit(target, *args, **kwargs)


def test_loads_racing_deltas_writer_on_an_ict_row_tracking_target(delta_spark, tmp_path,
                                                                  monkeypatch):
    """Delta's writer wins the version of each batch's first commit attempt: the provider
    rebuilds every commit on Delta's (in-commit timestamp, row ids) and loses or doubles
    nothing."""
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    for i in range(4):
        append_rows(source, [10 * i, 10 * i + 1])
    delta_spark.sql(f"CREATE TABLE delta.`{target}` (id BIGINT, name STRING) USING delta "
                    "TBLPROPERTIES ('delta.enableRowTracking' = 'true', "
                    "'delta.enableInCommitTimestamps' = 'true')")
    sinks = []

    def racing_sink(spec):
        sink = _DeltaWritesFirst(spec)
        sink.spark, sink.appended = delta_spark, []
        sinks.append(sink)
        return sink

    monkeypatch.setattr(plan, "make_sink", racing_sink)
    result = run_job(delta_spark, spec_of(source, target, 0, 3, max_files=1))

    (sink,) = sinks
    assert len(result.batches) == 4 and len(sink.appended) == 4
    assert sink.lost_races == 4  # each batch lost its first attempt, and committed once
    assert [b.sink_version for b in result.batches] == [2, 4, 6, 8]
    expected = delta_rows(source) + Counter({(r, "by Delta"): 1 for r in sink.appended})
    assert _delta_rows(delta_spark, target) == expected
    rows = delta_spark.read.format("delta").load(target).select(
        "id", "_metadata.row_id", "_metadata.row_commit_version").collect()
    assert len({r["row_id"] for r in rows}) == len(rows) == sum(expected.values())
    for batch in result.batches:
        ours = {r["row_commit_version"] for r in rows if r["id"] // 10 == batch.start_version
                and r["id"] < 1000}
        assert ours == {batch.sink_version}
    stamps = [c[2] for c in _ict_commits(target, 0)]
    assert stamps == sorted(set(stamps)) and None not in stamps
