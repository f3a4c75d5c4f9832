"""The bad inputs and the error each gives. ``test_bad_input_table.py`` runs every case;
``scripts/bad_inputs_table.py`` prints the table of ``docs/mistakes.rst`` from this list.

A case is an attempt on a :class:`Scene` (a three-commit source table, versions 0..2, and a
target path). Operators run with ``conn_id="no_such_spark"`` unless a case needs a real Spark
connection: an attempt that got as far as submitting would fail on that connection instead
of with the expected error.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

try:
    from airflow.sdk import DAG
except ImportError:  # Airflow 2
    from airflow.models import DAG

from airflow_provider_delta.errors import (
    DamagedLogFileError,
    DataChangeError,
    DeltaProviderError,
    InvalidParameterError,
    LogGapError,
    MissingDataFileError,
    SchemaChangeError,
    SinkSchemaMismatchError,
    SinkTargetError,
    StorageLocationError,
    TableNotFoundError,
    UnsupportedFeatureError,
    VersionNotAvailableError,
    WatermarkError,
)

DAG_PARSE, TASK_START, SPARK_JOB = "DAG parse", "task start", "Spark job"
SPARK_CONN = "spark_bad_input"


@dataclass(frozen=True)
class BadInput:
    group: str
    bad_input: str  # what is wrong, in words (the docs' column)
    attempt: Callable[[Scene], Any]
    error: type[BaseException]
    message: str  # a part of the error message (the docs show it); {source}: the source
    stage: str = TASK_START  # where it is refused: DAG parse (__init__), task start, Spark job
    in_progress: str | None = None  # "#12.N in progress": fails until that fix is in main


class Scene:
    """A source table with versions 0..2 (rows 0..4) and a target path, in ``folder``."""

    def __init__(self, folder: Path, monkeypatch: Any, request: Any):
        self.folder, self.monkeypatch, self.request = folder, monkeypatch, request
        self.source, self.target = str(folder / "source"), str(folder / "target")
        for ids in ([0, 1], [2], [3, 4]):
            self.append(ids)

    # -- running the operators -----------------------------------------------------------

    def incremental(self, **kwargs: Any) -> Any:
        from airflow_provider_delta.operators import DeltaIncrementalOperator

        options = {"start_version": 0, "end_version": 2, **kwargs}
        return self._run(DeltaIncrementalOperator, options)

    def from_watermark(self, stored: Any) -> Any:
        """An incremental load whose Variable watermark holds ``stored`` for the source."""
        return self.from_variable({self.source: stored})

    def from_variable(self, value: Any) -> Any:
        """An incremental load from the watermark Variable, which holds ``value``."""
        self.set_variable("wm_bad_input", value)
        return self.incremental(start_version=None, end_version=None,
                                watermark_store="variable", watermark_key="wm_bad_input")

    def time_travel(self, **kwargs: Any) -> Any:
        from airflow_provider_delta.operators import DeltaTimeTravelOperator

        return self._run(DeltaTimeTravelOperator, kwargs)

    def sensor(self, **kwargs: Any) -> Any:
        """A sensor on the source, keeping its watermark in a Variable; it pokes once."""
        from airflow_provider_delta.sensors.delta_version import DeltaVersionSensor

        self.begin()
        options = {"task_id": "wait", "table_uri": self.source, "watermark_store": "variable",
                   "watermark_key": "wm_bad_input", **kwargs}
        sensor = DeltaVersionSensor(**options)
        self.constructed = True
        return sensor.poke({"run_id": "manual__bad_input"})

    def construct(self, operator: type, **kwargs: Any) -> Any:
        options = {"task_id": "load", "table_uri": self.source, "target": self.target,
                   "conn_id": "no_such_spark", **kwargs}
        return operator(**options)

    def linked(self, sensor: dict[str, Any] | None = None, upstream: bool = True,
               **kwargs: Any) -> Any:
        """A load with ``sensor_task_id="wait"`` in a DAG with the sensor ``wait`` (on the
        source, the same watermark; ``sensor`` changes its settings), upstream of it unless
        ``upstream`` is False."""
        from airflow_provider_delta.operators import DeltaIncrementalOperator
        from airflow_provider_delta.sensors.delta_version import DeltaVersionSensor

        watermark = {"watermark_store": "variable", "watermark_key": "wm_bad_input"}
        self.dag = DAG("bad_input_linked", schedule=None)
        DeltaVersionSensor(task_id="wait", dag=self.dag,
                           **{"table_uri": self.source, **watermark, **(sensor or {})})
        self.upstream = "wait" if upstream else None
        options = {"start_version": None, "end_version": None, "sensor_task_id": "wait",
                   "dag": self.dag, **watermark, **kwargs}
        return self._run(DeltaIncrementalOperator, options)

    def _run(self, operator: type, kwargs: dict[str, Any]) -> Any:
        params = kwargs.pop("params", {})
        self.begin()
        task = self.construct(operator, **kwargs)
        if getattr(self, "upstream", None):
            self.dag.task_dict[self.upstream] >> task
        self.constructed = True
        context = {"run_id": "manual__bad_input", "params": params}
        task.render_template_fields(context)
        return task.execute(context)

    def begin(self) -> None:
        """The attempt starts: what the source and target hold now must hold after it."""
        self.constructed = False
        self.files_at_start = self.files()
        self.started = time.perf_counter()

    def files(self) -> dict[str, tuple[int, int] | None]:
        """Every file of the scene, (size, mtime) by path, and every folder (None)."""
        return {str(path): (path.stat().st_size, path.stat().st_mtime_ns) if path.is_file()
                else None for path in self.folder.rglob("*")}

    def with_spark_connection(self) -> str:
        self.monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONN.upper()}",
                                '{"conn_type": "spark", "host": "local[1]"}')
        return SPARK_CONN

    def delta_connection(self, **extra: Any) -> str:
        self.monkeypatch.setenv("AIRFLOW_CONN_DELTA_BAD_INPUT",
                                json.dumps({"conn_type": "delta", "extra": extra}))
        return "delta_bad_input"

    def job(self, **kwargs: Any) -> Any:
        """The driver's ``run_job`` on the test session, for what only the Spark job can see."""
        from airflow_provider_delta.job.driver import run_job
        from airflow_provider_delta.core import LoadStart
        from airflow_provider_delta.job.spec import JobSpec, SinkSpec

        sink = SinkSpec(kind="delta", path=self.target, app_id="bad-input")
        spec = JobSpec(table_uri=self.source, start=LoadStart("changes", 0), end_version=2,
                       sink=sink, context={"task_id": "load"})
        spark = self.request.getfixturevalue("spark")
        self.begin()
        return run_job(spark, replace(spec, **kwargs))

    def set_variable(self, name: str, value: Any) -> None:
        text = value if isinstance(value, str) else json.dumps(value)
        self.monkeypatch.setenv(f"AIRFLOW_VAR_{name.upper()}", text)

    # -- damaging the source ------------------------------------------------------------------

    def append(self, ids: list[int]) -> None:
        from .conftest import append_rows

        append_rows(self.source, ids)

    def log_file(self, name: str) -> Path:
        return Path(self.source) / "_delta_log" / name

    def commit(self, version: int) -> Path:
        return self.log_file(f"{version:020d}.json")

    def checkpointed(self) -> Path:
        """Checkpoint version 2 and clean the commits it replaces; returns the checkpoint."""
        DeltaTable(self.source, version=2).create_checkpoint()
        for version in range(3):
            self.commit(version).unlink()
        return self.log_file(f"{2:020d}.checkpoint.parquet")

    def data_files(self) -> list[Path]:
        return sorted(Path(self.source).glob("*.parquet"))

    def rewrite_commit(self, version: int, edit: Callable[[list[dict]], list[dict]]) -> None:
        path = self.commit(version)
        actions = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps(a) + "\n" for a in edit(actions)))

    def s3_uri(self, name: str) -> str:
        return self.request.getfixturevalue("upload")(self.source, f"bad-input/{name}")

    def s3_options(self, **changes: str) -> dict[str, str]:
        return {**self.request.getfixturevalue("s3_options"), **changes}


def _protocol(actions: list[dict], **protocol: Any) -> list[dict]:
    return [{"protocol": protocol} if "protocol" in a else a for a in actions]


def _truncate(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def _delete_rows(scene: Scene) -> None:
    DeltaTable(scene.source).delete("id = 0")


def _drop_column(scene: Scene) -> None:
    write_deltalake(scene.source, pa.table({"id": pa.array([9], pa.int64())}),
                    mode="overwrite", schema_mode="overwrite")


def _change_feed_table(scene: Scene) -> str:
    """Versions 0..1 of a table that records its change feed."""
    uri = str(scene.folder / "feed")
    rows = pa.table({"id": pa.array([1], pa.int64())})
    write_deltalake(uri, rows, configuration={"delta.enableChangeDataFeed": "true"})
    write_deltalake(uri, rows, mode="append")
    return uri


def _future() -> str:
    return (datetime.now(timezone.utc) + timedelta(days=1)).isoformat()


def _then(*steps: Callable[[], Any]) -> Any:
    """Run ``steps`` in order; the last one's value (lets a lambda prepare, then attempt)."""
    result = None
    for step in steps:
        result = step()
    return result


NOT_A_TABLE = "is not a Delta table"

CASES: list[BadInput] = [
    # -- options --------------------------------------------------------------------------------
    BadInput("options", "`max_files=0`", lambda s: s.incremental(max_files=0),
             InvalidParameterError, "max_files=0 is not a whole number >= 1", DAG_PARSE),
    BadInput("options", "`max_files=-1`", lambda s: s.incremental(max_files=-1),
             InvalidParameterError, "max_files=-1 is not a whole number >= 1", DAG_PARSE),
    BadInput("options", "`max_files=True`", lambda s: s.incremental(max_files=True),
             InvalidParameterError, "max_files=True is not a whole number >= 1", DAG_PARSE),
    BadInput("options", "`max_files=\"10\"` (a string)", lambda s: s.incremental(max_files="10"),
             InvalidParameterError, "max_files='10' is not a whole number >= 1", DAG_PARSE),
    BadInput("options", "`max_bytes=0`", lambda s: s.incremental(max_bytes=0),
             InvalidParameterError, "max_bytes=0 is not a whole number >= 1", DAG_PARSE),
    BadInput("options", "`max_bytes=-5`", lambda s: s.incremental(max_bytes=-5),
             InvalidParameterError, "max_bytes=-5 is not a whole number >= 1", DAG_PARSE),
    BadInput("options", "`start_version=-1`", lambda s: s.incremental(start_version=-1),
             InvalidParameterError, "start_version=-1 is negative", DAG_PARSE),
    BadInput("options", "`start_version=1.5`", lambda s: s.incremental(start_version=1.5),
             InvalidParameterError, "start_version=1.5 is not a table version", DAG_PARSE),
    BadInput("options", "`start_version=\"2\", end_version=\"1\"`",
             lambda s: s.incremental(start_version="2", end_version="1"),
             InvalidParameterError, "start_version=2 is after end_version (1)", DAG_PARSE),
    BadInput("options", "`end_version` without `start_version`",
             lambda s: s.incremental(start_version=None, end_version=1),
             InvalidParameterError, "end_version=1 needs a start_version too", DAG_PARSE),
    BadInput("options", "templated `start_version` that renders to `abc`",
             lambda s: s.incremental(start_version="{{ params.start }}",
                                     params={"start": "abc"}),
             InvalidParameterError, "start_version='abc' is not a table version"),
    BadInput("options", "templated `start_version` that renders above `end_version`",
             lambda s: s.incremental(start_version="{{ params.start }}", end_version=1,
                                     params={"start": 2}),
             InvalidParameterError, "start_version=2 is after end_version (1)"),
    BadInput("options", "`start_version` above the latest version",
             lambda s: s.incremental(start_version=7, end_version=None),
             ValueError, "start_version=7 is after the latest version (2)"),
    BadInput("options", "`end_version` above the latest version",
             lambda s: s.incremental(start_version=1, end_version=5),
             VersionNotAvailableError, "5 is not available; the log can recreate versions 0..2"),
    BadInput("options", "`transform` and `sql` both given",
             lambda s: s.incremental(transform="m:f", sql="select * from changes"),
             InvalidParameterError, "transform='m:f' is given with sql", DAG_PARSE),
    BadInput("options", "`sink=\"parket\"` (unknown)", lambda s: s.incremental(sink="parket"),
             InvalidParameterError, "sink='parket' is not a sink this provider knows", DAG_PARSE),
    BadInput("options", "`sink=\"delta\"` without `target`",
             lambda s: s.incremental(target=None),
             InvalidParameterError, "target=None is needed by sink='delta'", DAG_PARSE),
    BadInput("options", "`watermark_store=\"redis\"`",
             lambda s: s.incremental(watermark_store="redis"),
             InvalidParameterError, "watermark_store='redis' is unknown", DAG_PARSE),
    BadInput("options", "`initial=\"sometime\"`", lambda s: s.incremental(initial="sometime"),
             InvalidParameterError, "load: {source}: initial='sometime' is not a start",
             DAG_PARSE),
    BadInput("options", "`initial=-2`", lambda s: s.incremental(initial=-2),
             InvalidParameterError, "initial=-2 is not a start without a watermark", DAG_PARSE),
    BadInput("options", "a delete in the range without `ignore_deletes`",
             lambda s: _then(lambda: _delete_rows(s),
                             lambda: s.incremental(start_version=1, end_version=3)),
             DataChangeError, "version 3 changes existing data"),
    BadInput("options", "a dropped column in the range",
             lambda s: _then(lambda: _drop_column(s),
                             lambda: s.incremental(start_version=1, end_version=3,
                                                   ignore_changes=True)),
             SchemaChangeError, "version 3 changes the schema in a non-additive way"),
    BadInput("options", "`conn_id` that does not exist",
             lambda s: s.incremental(conn_id="no_such_spark"),
             InvalidParameterError, "conn_id='no_such_spark' is not a defined connection"),
    BadInput("options", "`merge_keys` with `sink=\"delta\"`",
             lambda s: s.incremental(merge_keys=["id"]),
             InvalidParameterError, "merge_keys=['id'] does not fit sink='delta'", DAG_PARSE),
    BadInput("options", "`sink=\"delta-merge\"` without `merge_keys`",
             lambda s: s.incremental(sink="delta-merge", change_feed=True),
             InvalidParameterError, "merge_keys=[] does not fit sink='delta-merge'", DAG_PARSE),
    BadInput("options", "`sink=\"delta-merge\"` without `change_feed`",
             lambda s: s.incremental(sink="delta-merge", merge_keys=["id"]),
             InvalidParameterError, "change_feed=False is off", DAG_PARSE),
    BadInput("options", "`merge_keys` naming a column the source lacks",
             lambda s: s.incremental(table_uri=_change_feed_table(s), end_version=1,
                                     change_feed=True, sink="delta-merge", merge_keys=["nope"]),
             InvalidParameterError, "merge_keys=['nope'] names columns ['nope']"),
    BadInput("options", "`merge_keys=\"id\"` (one bare name) with `sink=\"delta\"`",
             lambda s: s.incremental(merge_keys="id"),
             InvalidParameterError, "merge_keys='id' does not fit sink='delta'", DAG_PARSE),
    BadInput("options", "`partition_by=5`", lambda s: s.incremental(partition_by=5),
             InvalidParameterError, "partition_by=5 is not a list of column names", DAG_PARSE),
    BadInput("options", "`partition_by=[\"day\", \"day\"]`",
             lambda s: s.incremental(partition_by=["day", "day"]),
             InvalidParameterError, "partition_by=['day', 'day'] names ['day'] twice", DAG_PARSE),
    BadInput("options", "`sink_options=\"mergeSchema=true\"` (not a dict)",
             lambda s: s.incremental(sink_options="mergeSchema=true"),
             InvalidParameterError,
             "sink_options='mergeSchema=true' is not a mapping of option names", DAG_PARSE),
    BadInput("options", "`sink_options` with `sink=None`",
             lambda s: s.incremental(sink=None, sink_options={"mergeSchema": "true"}),
             InvalidParameterError, "is given, but sink=None writes nothing", DAG_PARSE),
    BadInput("options", "`storage_options=\"region=eu\"` (not a dict)",
             lambda s: s.incremental(storage_options="region=eu"),
             InvalidParameterError, "storage_options='region=eu' is not a mapping", DAG_PARSE),
    BadInput("options", "`sql=\"\"`", lambda s: s.incremental(sql="  "),
             InvalidParameterError, "sql='  ' is not a query", DAG_PARSE),
    BadInput("options", "`change_feed=\"true\"` (a string)",
             lambda s: s.incremental(change_feed="true"),
             InvalidParameterError, "change_feed='true' is not True or False", DAG_PARSE),
    BadInput("options", "`move_watermark=\"no\"`", lambda s: s.incremental(move_watermark="no"),
             InvalidParameterError, "move_watermark='no' is not True or False", DAG_PARSE),
    BadInput("options", "`deploy_mode=\"clutser\"`", lambda s: s.incremental(deploy_mode="clutser"),
             InvalidParameterError, "deploy_mode='clutser' is not a deploy mode", DAG_PARSE),
    BadInput("options", "`delta_conn_id=\"\"`", lambda s: s.incremental(delta_conn_id=""),
             InvalidParameterError, "delta_conn_id='' is empty", DAG_PARSE),
    BadInput("options", "`sensor_task_id=\"\"`", lambda s: s.incremental(sensor_task_id=""),
             InvalidParameterError, "sensor_task_id='' is empty", DAG_PARSE),
    BadInput("options", "`watermark_asset` with `watermark_store=\"variable\"`",
             lambda s: s.incremental(watermark_store="variable", watermark_asset="orders"),
             InvalidParameterError, "watermark_asset='orders' is given, but watermark_store=",
             DAG_PARSE),
    BadInput("options", "`work_dir=\"\"`", lambda s: s.incremental(work_dir=""),
             InvalidParameterError, "work_dir='' is empty", DAG_PARSE),
    # -- across tasks: the load and its sensor, checked when the load starts ----------------------
    BadInput("across tasks", "a misspelt `sensor_task_id`",
             lambda s: s.linked(sensor_task_id="wiat"), InvalidParameterError,
             "load: {source}: sensor_task_id='wiat' names no task of DAG 'bad_input_linked'"),
    BadInput("across tasks", "a `sensor_task_id` that is not upstream",
             lambda s: s.linked(upstream=False), InvalidParameterError,
             "sensor_task_id='wait' is not upstream of load"),
    BadInput("across tasks", "a `sensor_task_id` naming a task that is no sensor",
             lambda s: s.linked(sensor_task_id="load"), InvalidParameterError,
             "sensor_task_id='load' names a DeltaIncrementalOperator, not a DeltaVersionSensor"),
    BadInput("across tasks", "a sensor on another table",
             lambda s: s.linked(sensor={"table_uri": f"{s.folder}/other"}), InvalidParameterError,
             "sensor_task_id='wait' names a sensor with table_uri='"),
    BadInput("across tasks", "a sensor with another `watermark_key`",
             lambda s: s.linked(sensor={"watermark_key": "wm_other"}), InvalidParameterError,
             "names a sensor with watermark_key='wm_other', but load has "
             "watermark_key='wm_bad_input'"),
    BadInput("across tasks", "a sensor with another `watermark_store`",
             lambda s: s.linked(sensor={"watermark_store": "xcom", "watermark_task_id": "load"}),
             InvalidParameterError, "names a sensor with watermark_store='xcom', but load has "
             "watermark_store='variable'"),
    BadInput("across tasks", "an XCom watermark the sensor reads from another task",
             lambda s: s.linked(watermark_store="xcom", sensor={
                 "watermark_store": "xcom", "watermark_task_id": "other_load"}),
             InvalidParameterError, "names a sensor with watermark_task_id='other_load', but "
             "load has watermark_task_id='load'"),
    BadInput("across tasks", "a sensor whose templated `watermark_key` renders to another",
             lambda s: s.linked(sensor={"watermark_key": "{{ params.key }}"},
                                params={"key": "wm_other"}), InvalidParameterError,
             "names a sensor with watermark_key='wm_other'"),
    # -- time travel -----------------------------------------------------------------------------
    BadInput("time travel", "both `version` and `timestamp`",
             lambda s: s.time_travel(version=1, timestamp="2024-01-01T00:00:00"),
             InvalidParameterError, "version=1 is given with timestamp='2024-01-01T00:00:00'",
             DAG_PARSE),
    BadInput("time travel", "neither `version` nor `timestamp`", lambda s: s.time_travel(),
             InvalidParameterError, "version=None is not given, nor is timestamp", DAG_PARSE),
    BadInput("time travel", "`version=-3`", lambda s: s.time_travel(version=-3),
             InvalidParameterError, "version=-3 is negative", DAG_PARSE),
    BadInput("time travel", "`version` above the latest", lambda s: s.time_travel(version=9),
             VersionNotAvailableError, "9 is not available"),
    BadInput("time travel", "a timestamp in the future",
             lambda s: s.time_travel(timestamp=datetime.now() + timedelta(days=1)),
             InvalidParameterError, "is in the future", DAG_PARSE),
    BadInput("time travel", "a templated timestamp that renders to the future",
             lambda s: s.time_travel(timestamp="{{ params.at }}", params={"at": _future()}),
             InvalidParameterError, "is in the future"),
    BadInput("time travel", "`timestamp=\"yesterday\"`",
             lambda s: s.time_travel(timestamp="yesterday"),
             InvalidParameterError, "timestamp='yesterday' is not a date and time", DAG_PARSE),
    BadInput("time travel", "a timestamp before the first commit",
             lambda s: s.time_travel(timestamp="2001-01-01T00:00:00"),
             VersionNotAvailableError, "timestamp 2001-01-01"),
    BadInput("time travel", "a data file of the version is gone (vacuumed)",
             lambda s: _then(lambda: s.data_files()[0].unlink(), lambda: s.time_travel(version=2)),
             MissingDataFileError, "is gone (vacuumed?)"),
    BadInput("time travel", "`sink=\"parquet\"` and a version that is not available",
             lambda s: s.time_travel(version=9, sink="parquet"),
             VersionNotAvailableError, "9 is not available"),
    # -- sensor -----------------------------------------------------------------------------------
    BadInput("sensor", "`poke_interval=0`", lambda s: s.sensor(poke_interval=0),
             InvalidParameterError, "wait: {source}: poke_interval=0 is not seconds above 0",
             DAG_PARSE),
    BadInput("sensor", "`timeout=-1`", lambda s: s.sensor(timeout=-1),
             InvalidParameterError, "timeout=-1 is not seconds >= 0", DAG_PARSE),
    BadInput("sensor", "`mode=\"pokes\"`", lambda s: s.sensor(mode="pokes"),
             InvalidParameterError, "mode='pokes' is not a sensor mode", DAG_PARSE),
    BadInput("sensor", "`initial=\"sometime\"`", lambda s: s.sensor(initial="sometime"),
             InvalidParameterError, "wait: {source}: initial='sometime' is not a start",
             DAG_PARSE),
    BadInput("sensor", "`table_uri=\"s4://bucket/t\"`",
             lambda s: s.sensor(table_uri="s4://bucket/t"),
             InvalidParameterError, "wait: table_uri='s4://bucket/t' has the scheme s4:",
             DAG_PARSE),
    BadInput("sensor", "`watermark_task_id` with `watermark_store=\"variable\"`",
             lambda s: s.sensor(watermark_task_id="load"),
             InvalidParameterError, "watermark_task_id='load' is given, but watermark_store=",
             DAG_PARSE),
    BadInput("sensor", "`storage_options=\"x\"` (not a dict)",
             lambda s: s.sensor(storage_options="x"),
             InvalidParameterError, "storage_options='x' is not a mapping", DAG_PARSE),
    BadInput("sensor", "`min_new_versions=0`", lambda s: s.sensor(min_new_versions=0),
             InvalidParameterError, "min_new_versions=0 is not an int >= 1", DAG_PARSE),
    # -- URIs -------------------------------------------------------------------------------------
    BadInput("URIs", "a `table_uri` that does not exist",
             lambda s: s.incremental(table_uri=str(s.folder / "absent")),
             TableNotFoundError, NOT_A_TABLE),
    BadInput("URIs", "a `table_uri` that is an empty folder",
             lambda s: _then(lambda: (s.folder / "empty").mkdir(),
                             lambda: s.incremental(table_uri=str(s.folder / "empty"))),
             TableNotFoundError, NOT_A_TABLE),
    BadInput("URIs", "a `table_uri` that is a file",
             lambda s: s.incremental(table_uri=str(s.data_files()[0])),
             TableNotFoundError, NOT_A_TABLE),
    BadInput("URIs", "a `table_uri` of a plain Parquet folder",
             lambda s: _then(lambda: shutil.rmtree(Path(s.source) / "_delta_log"),
                             lambda: s.incremental()),
             TableNotFoundError, NOT_A_TABLE),
    BadInput("URIs", "a `table_uri` pointing at `_delta_log` itself",
             lambda s: s.incremental(table_uri=f"{s.source}/_delta_log"),
             TableNotFoundError, NOT_A_TABLE),
    BadInput("URIs", "an unknown scheme (`s4://`)",
             lambda s: s.incremental(table_uri="s4://bucket/table"),
             InvalidParameterError, "table_uri='s4://bucket/table' has the scheme s4:",
             DAG_PARSE),
    BadInput("URIs", "`table_uri=\"\"`", lambda s: s.incremental(table_uri=""),
             InvalidParameterError, "load: table_uri='' is empty", DAG_PARSE),
    BadInput("URIs", "a `table_uri` with spaces around it",
             lambda s: s.incremental(table_uri=f" {s.source} "),
             InvalidParameterError, "has spaces around it", DAG_PARSE),
    BadInput("URIs", "`s3:/bucket/t` (one slash)", lambda s: s.incremental(table_uri="s3:/b/t"),
             InvalidParameterError, "table_uri='s3:/b/t' lacks the // after s3:", DAG_PARSE),
    BadInput("URIs", "`s3:///t` (no bucket)", lambda s: s.incremental(table_uri="s3:///t"),
             InvalidParameterError, "table_uri='s3:///t' names no bucket", DAG_PARSE),
    BadInput("URIs", "a `target` of an unknown scheme",
             lambda s: s.incremental(target="s4://bucket/t"),
             InvalidParameterError, "target='s4://bucket/t' has the scheme s4:", DAG_PARSE),
    BadInput("URIs", "a templated `table_uri` that renders to an unknown scheme",
             lambda s: s.incremental(table_uri="{{ params.uri }}",
                                     params={"uri": "s4://bucket/t"}),
             InvalidParameterError, "table_uri='s4://bucket/t' has the scheme s4:"),
    BadInput("URIs", "an S3 table that does not exist",
             lambda s: s.incremental(table_uri="s3://lake/absent", storage_options=s.s3_options()),
             TableNotFoundError, NOT_A_TABLE),
    BadInput("URIs", "an S3 bucket that does not exist",
             lambda s: s.incremental(table_uri="s3://no-such-bucket/t",
                                     storage_options=s.s3_options()),
             TableNotFoundError, "NoSuchBucket"),
    # -- credentials ------------------------------------------------------------------------------
    BadInput("credentials", "a misspelt storage option (`AWS_SECRET_ACCES_KEY`)",
             lambda s: s.incremental(table_uri="s3://lake/t", storage_options=s.s3_options(
                 AWS_SECRET_ACCES_KEY="x")),
             StorageLocationError, "'aws_secret_acces_key' is not valid"),
    BadInput("credentials", "an `http://` endpoint without `AWS_ALLOW_HTTP`",
             lambda s: s.incremental(table_uri="s3://lake/t", storage_options=s.s3_options(
                 AWS_ALLOW_HTTP="false")),
             StorageLocationError, "needs AWS_ALLOW_HTTP=true"),
    BadInput("credentials", "a delta connection with `provider=\"s5\"`",
             lambda s: s.incremental(delta_conn_id=s.delta_connection(provider="s5")),
             DeltaProviderError, "provider 's5' is not supported"),
    BadInput("credentials", "a `delta_conn_id` that does not exist",
             lambda s: s.incremental(delta_conn_id="no_such_delta"),
             InvalidParameterError, "delta_conn_id='no_such_delta' is not a defined connection"),
    BadInput("credentials", "a sensor's `delta_conn_id` that does not exist",
             lambda s: s.sensor(delta_conn_id="no_such_delta"), InvalidParameterError,
             "wait: {source}: delta_conn_id='no_such_delta' is not a defined connection"),
    # -- damaged logs and checkpoints ---------------------------------------------------------
    BadInput("damaged logs", "a commit missing inside the range",
             lambda s: _then(lambda: s.commit(1).unlink(), lambda: s.incremental()),
             LogGapError, "commit(s) 1 are missing"),
    BadInput("damaged logs", "a torn last line in a commit",
             lambda s: _then(lambda: _truncate(s.commit(1), -20), lambda: s.incremental()),
             DamagedLogFileError, "_delta_log/00000000000000000001.json (version 1) is damaged"),
    BadInput("damaged logs", "a garbage line in a commit",
             lambda s: _then(lambda: s.commit(1).write_text("not json\n"),
                             lambda: s.incremental()),
             DamagedLogFileError, "_delta_log/00000000000000000001.json (version 1) is damaged"),
    BadInput("damaged logs", "a zero-byte commit",
             lambda s: _then(lambda: s.commit(2).write_bytes(b""), lambda: s.incremental()),
             DamagedLogFileError, "the commit file is empty"),
    BadInput("damaged logs", "no commit 0 and no checkpoint",
             lambda s: _then(lambda: s.commit(0).unlink(), lambda: s.incremental(start_version=1)),
             VersionNotAvailableError, "neither commit 1 nor a checkpoint after it tells"),
    BadInput("damaged logs", "a reader feature this provider does not know",
             lambda s: _then(lambda: s.rewrite_commit(0, lambda a: _protocol(
                 a, protocol=1, minReaderVersion=3, minWriterVersion=7,
                 readerFeatures=["futureFeature"], writerFeatures=["futureFeature"])),
                 lambda: s.incremental()),
             UnsupportedFeatureError, "requires reader feature 'futureFeature'"),
    BadInput("damaged logs", "reader version 4",
             lambda s: _then(lambda: s.rewrite_commit(0, lambda a: _protocol(
                 a, protocol=1, minReaderVersion=4, minWriterVersion=7)),
                 lambda: s.incremental()),
             UnsupportedFeatureError, "requires reader feature"),
    BadInput("damaged logs", "a data file of the range is gone (vacuumed)",
             lambda s: _then(lambda: [f.unlink() for f in s.data_files()],
                             lambda: s.incremental()),
             MissingDataFileError, "is gone (vacuumed?)"),
    BadInput("checkpoints", "a truncated checkpoint, its commits cleaned",
             lambda s: _then(lambda: _truncate(s.checkpointed(), 100), lambda: s.incremental(
                 start_version=2)),
             DamagedLogFileError, "_delta_log/00000000000000000002.checkpoint.parquet"),
    BadInput("checkpoints", "a zero-byte checkpoint, its commits cleaned",
             lambda s: _then(lambda: _truncate(s.checkpointed(), 0), lambda: s.incremental(
                 start_version=2)),
             DamagedLogFileError, "_delta_log/00000000000000000002.checkpoint.parquet"),
    BadInput("checkpoints", "`_last_checkpoint` names a deleted checkpoint",
             lambda s: _then(lambda: s.append([5]), lambda: s.checkpointed().unlink(),
                             lambda: s.incremental(start_version=3, end_version=3)),
             DamagedLogFileError, "_delta_log/_last_checkpoint (version 2)"),
    # -- targets ------------------------------------------------------------------------------------
    BadInput("targets", "`target` equal to the source",
             lambda s: s.incremental(target=s.source),
             InvalidParameterError, "target='{source}' is the source table", DAG_PARSE),
    BadInput("targets", "`target` the source spelt otherwise (`file://`, `/./`)",
             lambda s: s.incremental(target="file://" + s.source.replace("/source", "/./source/")),
             InvalidParameterError, "is the source table", DAG_PARSE),
    BadInput("targets", "a templated `target` that renders to the source",
             lambda s: s.incremental(target="{{ params.to }}", params={"to": s.source}),
             InvalidParameterError, "target='{source}' is the source table"),
    BadInput("targets", "`target` a non-empty plain Parquet folder",
             lambda s: _then(lambda: shutil.copytree(s.source, s.target,
                                                     ignore=shutil.ignore_patterns("_delta_log")),
                             lambda: s.incremental()),
             SinkTargetError, "not a Delta table"),
    BadInput("targets", "`target` that is a file",
             lambda s: _then(lambda: Path(s.target).write_text("a file"), lambda: s.incremental()),
             SinkTargetError, "is a file"),
    BadInput("targets", "a Delta `target` with other columns",
             lambda s: _then(lambda: s.job(end_version=0),
                             lambda: s.job(sql="select id, name, 1 as extra from changes",
                                           sink=replace(_delta_sink(s), app_id="other"))),
             SinkSchemaMismatchError, "do not match the target table", SPARK_JOB),
    BadInput("targets", "`target` below a file (unwritable)",
             lambda s: _then(lambda: (s.folder / "a-file").write_text("x"),
                             lambda: s.job(sink=replace(_delta_sink(s),
                                                        path=str(s.folder / "a-file" / "t")))),
             Exception, "ot a directory", SPARK_JOB),
    # -- transforms ---------------------------------------------------------------------------
    BadInput("transforms", "`transform=\"nocolon\"`", lambda s: s.incremental(transform="nocolon"),
             InvalidParameterError, "transform='nocolon' is not of the form 'module:function'",
             DAG_PARSE),
    BadInput("transforms", "`transform=\"module:\"`", lambda s: s.incremental(transform="mod:"),
             InvalidParameterError, "is not of the form 'module:function'", DAG_PARSE),
    BadInput("transforms", "`transform=\":function\"`", lambda s: s.incremental(transform=":f"),
             InvalidParameterError, "is not of the form 'module:function'", DAG_PARSE),
    BadInput("transforms", "`transform=123`", lambda s: s.incremental(transform=123),
             InvalidParameterError, "transform=123 is not of the form", DAG_PARSE),
    BadInput("transforms", "a `transform` whose module does not import",
             lambda s: s.incremental(conn_id=s.with_spark_connection(),
                                     transform="no_such_module:f"),
             InvalidParameterError, "transform='no_such_module:f' cannot be imported"),
    BadInput("transforms", "a `transform` naming a missing function",
             lambda s: s.incremental(conn_id=s.with_spark_connection(),
                                     transform="operators.transforms:no_such_function"),
             InvalidParameterError, "names no function 'no_such_function'"),
    BadInput("transforms", "a `transform` that raises",
             lambda s: s.job(transform="operators.transforms:raise_error"),
             ValueError, "the transform found bad data", SPARK_JOB),
    BadInput("transforms", "a `transform` that returns None, with a sink",
             lambda s: s.job(transform="operators.transforms:return_none"),
             InvalidParameterError, "returned None for versions 0..2", SPARK_JOB),
    BadInput("transforms", "`sql` with a syntax error",
             lambda s: s.job(sql="selec id from changes"),
             Exception, "PARSE_SYNTAX_ERROR", SPARK_JOB),
    BadInput("transforms", "`sql` naming a missing column",
             lambda s: s.job(sql="select nope from changes"),
             Exception, "UNRESOLVED_COLUMN", SPARK_JOB),
    # -- watermarks -----------------------------------------------------------------------------
    BadInput("watermarks", "a watermark above the latest version",
             lambda s: s.from_watermark({"version": 9}), WatermarkError, "ahead"),
    BadInput("watermarks", "a watermark of another table id",
             lambda s: s.from_watermark({"version": 1, "table_id": "another-table"}),
             WatermarkError, "another-table"),
    BadInput("watermarks", "a watermark that is not a version",
             lambda s: s.from_watermark({"version": "x"}), WatermarkError, "not a table version"),
    BadInput("watermarks", "a negative watermark",
             lambda s: s.from_watermark(-4), WatermarkError, "not a table version"),
    BadInput("watermarks", "a watermark Variable that is not JSON",
             lambda s: s.from_variable("{not json"), WatermarkError, "is not JSON"),
    BadInput("watermarks", "a watermark Variable that is a list",
             lambda s: s.from_variable([1, 2]), WatermarkError, "not an object"),
    BadInput("watermarks", "an empty `watermark_key`",
             lambda s: s.incremental(start_version=None, end_version=None,
                                     watermark_store="variable", watermark_key=""),
             InvalidParameterError, "watermark_key='' is empty", DAG_PARSE),
]


def _delta_sink(scene: Scene) -> Any:
    from airflow_provider_delta.job.spec import SinkSpec

    return SinkSpec(kind="delta", path=scene.target, app_id="bad-input")


def case_id(case: BadInput) -> str:
    return f"{case.group}: {case.bad_input}".replace("`", "")


def rst_table(cases: list[BadInput] = CASES) -> str:
    """The table of ``docs/mistakes.rst``: one row per case."""
    rows = [".. list-table::", "   :header-rows: 1", "   :widths: 4 10 30 10 18 40", "",
            "   * - #", "     - group", "     - bad input", "     - refused at", "     - error",
            "     - message (excerpt)"]
    for number, case in enumerate(cases, start=1):
        status = f" ({case.in_progress})" if case.in_progress else ""
        rows += [f"   * - {number}", f"     - {case.group}",
                 f"     - {_rst_literals(case.bad_input)}", f"     - {case.stage}",
                 f"     - ``{case.error.__name__}``{status}",
                 f"     - ``{case.message.replace('{source}', '<source>')}``"]
    return "\n".join(rows) + "\n"


def _rst_literals(text: str) -> str:
    """Markdown's `code` as reStructuredText's ``code``."""
    return text.replace("`", "``")
