"""Operators that load Delta table versions with a submitted Spark job, exactly once.

Both operators are :class:`SparkSubmitOperator` subclasses: the Spark connection, cluster
tracking, ``durable`` reconnect and ``on_kill`` are the Spark provider's. What they add:

1. Decide what to read, before any Spark starts: where the load starts and its last version
   (:mod:`.version_range`: explicit, from the sensor's XCom, or from the watermark; or
   :mod:`.time_range`: by commit times), planned and
   checked by the job's own plan path (:mod:`airflow_provider_delta.job.plan`), so a request
   that cannot succeed fails with the error the driver would raise and no JVM is started.
2. Write a small JSON job spec and submit this package's driver program
   (:mod:`airflow_provider_delta.job.driver`) with it; read back its JSON result. The job's
   files, environment and cleanup are :mod:`airflow_provider_delta.job.submit`'s.
3. After the sink committed, move the watermark, push the result to XCom and emit an asset
   event for the target.

Getting the package to the Spark driver: in client and local mode the driver runs where the
task runs, so the installed package is used. In cluster mode either install the wheel on the
cluster's Python, or set ``ship_package=True`` to send a zip of the package with ``py_files``
(its dependencies -- deltalake, pyarrow, obstore -- must still be installed there), and give a
``work_dir`` on shared storage (e.g. ``s3://bucket/airflow-delta-jobs``) for the spec and result.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_provider_delta.compat import (
    asset, get_current_context,
)
from airflow_provider_delta.errors import MissingSparkExtraError

# First: without the spark or connect extra, the imports below would fail on pyspark.
try:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
except ModuleNotFoundError as missing:
    raise MissingSparkExtraError("DeltaIncrementalOperator and DeltaTimeTravelOperator") from missing

from airflow_provider_delta import core, freshness
from airflow_provider_delta.core.model import LoadStart
from airflow_provider_delta.core.probe import VersionProbe
from airflow_provider_delta.errors import InvalidParameterError
from airflow_provider_delta.hooks.delta import (
    DEFAULT_CONN_ID,
    connection_storage_options,
    mask_credentials,
)
from airflow_provider_delta.job import driver
from airflow_provider_delta.job.connect import ConnectJob
from airflow_provider_delta.job.plan import plan_load
from airflow_provider_delta.job.spec import JobResult, JobSpec, LoadResult, SinkSpec
from airflow_provider_delta.credential_keys import with_redaction
from airflow_provider_delta.job.submit import (
    JobFolder,
    SubmitTarget,
    driver_env,
    job_folder_name,
    make_sink_spec,
    submitted_folder,
)
from airflow_provider_delta.operators import parameters, time_range, version_range
from airflow_provider_delta.operators.links import SparkUILink
from airflow_provider_delta.operators.transport import (
    connect_job,
    refuse_spark_submit_options,
    resolve_submit_target,
)
from airflow_provider_delta.operators.upstream_sensor import check_upstream_sensor
from airflow_provider_delta.storage import to_uri
from airflow_provider_delta.watermarks import (
    Initial,
    WatermarkStore,
    make_watermark_store,
    validate_initial,
    validate_store_kind,
)

if TYPE_CHECKING:
    from airflow_provider_delta.compat import Asset, Context

class _DeltaSparkJobOperator(SparkSubmitOperator):
    """What both operators share: the sink, the transform, the spec, the submit, the result."""

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields, "table_uri", "target", "partition_by",
        "sink_options", "sql",
    )
    # sql="transform.sql" renders that file (DAG folder or template_searchpath), as SQL operators do.
    template_ext: Sequence[str] = (".sql",)
    template_fields_renderers = {"sql": "sql", "sink_options": "json"}
    operator_extra_links = (SparkUILink(),)
    _job_folder: JobFolder | None = None  # this try's job files while its job runs
    _connect_job: ConnectJob | None = None  # the running Spark Connect job, for on_kill
    # What this run read and wrote, kept for OpenLineage (its listener calls after execute).
    _source_metadata: core.TableMetadata | None = None
    _job_result: JobResult | None = None

    def __init__(
        self,
        *,
        table_uri: str,
        target: str | None = None,
        sink: str | None = "delta",
        partition_by: Sequence[str] = (),
        sink_options: dict[str, str] | None = None,
        merge_keys: Sequence[str] = (),
        transform: str | None = None,
        sql: str | None = None,
        delta_conn_id: str | None = DEFAULT_CONN_ID,
        storage_options: dict[str, str] | None = None,
        ship_package: bool = False,
        work_dir: str | None = None,
        conn_id: str = "spark_default",
        deploy_mode: str | None = None,
        archives: str | None = None,
        allow_overlapping_writers: bool = False,
        **kwargs: Any,
    ):
        partition_by, sink_options, merge_keys = parameters.load_settings(
            transform=transform, sql=sql, sink=sink, target=target, partition_by=partition_by,
            sink_options=sink_options, merge_keys=merge_keys, task_id=kwargs.get("task_id"),
            table_uri=table_uri)
        storage_options = _check_job_settings(
            task_id=kwargs.get("task_id"), table_uri=table_uri, delta_conn_id=delta_conn_id,
            storage_options=storage_options, ship_package=ship_package, work_dir=work_dir,
            deploy_mode=deploy_mode, allow_overlapping_writers=allow_overlapping_writers)
        # A templated target is known only at run time, too late to declare it an outlet.
        if target and "outlets" not in kwargs and not parameters.is_templated(target):
            kwargs["outlets"] = [asset(to_uri(target))]
        kwargs.setdefault("name", f"delta-load-{kwargs.get('task_id', 'job')}")
        super().__init__(application=driver.__file__, conn_id=conn_id, deploy_mode=deploy_mode,
                         archives=archives, **kwargs)
        # Ours, public: the provider keeps these in private attributes that may change.
        self.conn_id = conn_id
        self.deploy_mode = deploy_mode
        self.archives = archives
        self.table_uri = table_uri
        self.target = target
        self.sink = sink
        self.partition_by = partition_by
        self.sink_options = sink_options
        self.merge_keys = merge_keys
        self.transform = transform
        self.sql = sql
        self.delta_conn_id = delta_conn_id
        self.storage_options = storage_options
        self.ship_package = ship_package
        self.work_dir = work_dir
        self.allow_overlapping_writers = allow_overlapping_writers

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        """Render, then mask the credentials among the rendered options before Airflow stores
        the rendered fields or anything is logged."""
        super().render_template_fields(context, jinja_env)
        self.mask_credentials()

    def mask_credentials(self) -> None:
        """Register the credentials of ``conf``, ``sink_options`` and ``storage_options`` with
        Airflow's secrets masker (those of ``delta_conn_id`` are masked by the hook); a
        template that rendered to the text of a dict is read as that dict first."""
        mask_credentials(*(parameters.rendered_mapping(options) for options in
                           (self.conf, self.sink_options, self.storage_options)))

    def check_rendered(self) -> None:
        """Check the templated parameters again on their rendered values, at task start."""
        where = {"task_id": self.task_id, "table_uri": self.table_uri}
        parameters.table_location(self.table_uri, "table_uri", task_id=self.task_id)
        parameters.sink_kind(self.sink, self.target, **where)
        parameters.sink_target(self.sink, self.target, **where)
        rendered = {name: getattr(self, name) for name in parameters.RENDERED_SETTINGS}
        for name, value in parameters.rendered_settings(rendered, **where).items():
            setattr(self, name, value)

    @cached_property
    def source_storage_options(self) -> dict[str, str] | None:
        """Explicit ``storage_options``, else those of ``delta_conn_id`` (resolved at run time;
        none when it is the default connection and that is not defined)."""
        if self.storage_options is not None or not self.delta_conn_id:
            return self.storage_options
        if self.delta_conn_id != DEFAULT_CONN_ID:
            parameters.check_connection(self.delta_conn_id, "delta_conn_id", "delta",
                                        task_id=self.task_id, table_uri=self.table_uri)
        return connection_storage_options(self.delta_conn_id)

    def sink_spec(self) -> SinkSpec:
        """The sink as the driver sees it (see :func:`~.job.submit.make_sink_spec`)."""
        return make_sink_spec(
            self.sink, self.target, self.table_uri, dag_id=self.dag_id, task_id=self.task_id,
            map_index=_map_index(), merge_keys=self.merge_keys, partition_by=self.partition_by,
            options=self.sink_options, storage_options=self.source_storage_options,
            allow_overlapping_writers=self.allow_overlapping_writers)

    def job_spec(self, context: Context, start: LoadStart, end_version: int) -> JobSpec:
        """The spec of one run; subclasses add their read options."""
        return JobSpec(
            table_uri=self.table_uri, start=start, end_version=end_version, sink=self.sink_spec(),
            transform=self.transform, sql=self.sql,
            storage_options=self.source_storage_options,
            context={"dag_id": self.dag_id, "task_id": self.task_id,
                     "run_id": context["run_id"]},
            **self.read_options(),
        )

    def read_options(self) -> dict[str, Any]:
        return {}

    def run_request(self, context: Context, start: LoadStart, end_version: int) -> JobResult:
        """Plan and check the request through the job's own plan path, then submit.
        Everything before ``submit`` runs without Spark."""
        spec = self.job_spec(context, start, end_version)
        plan = plan_load(spec, check_files=True).plan
        self._source_metadata = plan and plan.metadata
        if plan is None or (spec.mode == "changes" and not len(plan)):
            self.log.info("%s: versions %s..%s: nothing to submit (%s)", self.table_uri,
                          start.version, spec.end_version, f"{self.target} holds them already"
                          if plan is None else "they add no data files")
            return JobResult(self.table_uri, spec.mode, start.version, spec.end_version)
        self.log.info("%s: submitting %s of versions %s..%s (%d file(s), %d bytes)",
                      self.table_uri, spec.mode, plan.start_version, plan.end_version,
                      len(plan), plan.total_bytes)
        return self.submit(context, spec)

    def submit(self, context: Context, spec: JobSpec) -> JobResult:
        """Run the job: on the task's Spark Connect session, or through spark-submit."""
        job = connect_job(self.conn_id)
        result = (self.run_on_connect(job, spec) if job is not None
                  else self._spark_submit(context, spec))
        self.log.info("job done: %d batch(es), %s row(s) written, sink version %s",
                      len(result.batches), result.rows, result.sink_version)
        return result

    def _spark_submit(self, context: Context, spec: JobSpec) -> JobResult:
        """Check what would fail only once spark-submit runs (the Spark connection, a transform
        the driver cannot import where it runs like this task), then run the driver with its
        files in a :class:`JobFolder`, deleted however the task ends."""
        where = {"task_id": self.task_id, "table_uri": self.table_uri}
        parameters.check_connection(self.conn_id, "conn_id", "spark", **where)
        if self.transform and not self.py_files and self.submit_target.driver_runs_here:
            parameters.check_importable(self.transform, **where)
        ti = context["ti"] if self.work_dir else None
        self._job_folder = JobFolder(self.work_dir, ti and job_folder_name(
            self.dag_id, self.task_id, context["run_id"], ti.map_index, ti.try_number))
        try:
            return self._run_driver(context, spec)
        finally:
            self._remove_job_files(context)

    @cached_property
    def submit_target(self) -> SubmitTarget:
        """Where spark-submit puts the driver, from the Spark connection (read once a run)."""
        return resolve_submit_target(self.conn_id, self.deploy_mode)

    def _run_driver(self, context: Context, spec: JobSpec) -> JobResult:
        folder = self._job_folder
        self.application_args = folder.write_spec(spec)
        if self.ship_package:
            self.py_files = ",".join(filter(None, [self.py_files, folder.package_zip()]))
        submitted_env, submitted_conf = self.env_vars, self.conf
        # Set for this submission only: the credentials never reach a rendered field, and
        # those of conf go through the environment, not the command line.
        self.env_vars, withheld = driver_env(self.submit_target, self.env_vars, spec, self.conf)
        if withheld:
            self.log.warning("%s: the credentials %s are not sent to a driver on %s; give the "
                             "cluster its own credentials for the table and the target",
                             self.table_uri, withheld, self.submit_target.master)
        self.conf = with_redaction(self.conf)
        try:
            super().execute(context)
        finally:
            self.env_vars, self.conf = submitted_env, submitted_conf
        return folder.read_result(submitted_folder(context.get("task_state_store")))

    def run_on_connect(self, job: ConnectJob, spec: JobSpec) -> JobResult:
        """Run the job module in this process on the task's own Spark Connect session."""
        refuse_spark_submit_options(self, self.conn_id, spec)
        self._connect_job = job
        try:
            return job.run(spec, self.conf)
        finally:
            self._connect_job = None

    def submit_job(self, context: Context) -> str | None:
        """A fresh submission in a resumable (cluster) mode: record its folder, where a durable
        retry that reconnects to this job finds the result."""
        external_id = super().submit_job(context)
        self._job_folder.record(context.get("task_state_store"))
        return external_id

    def _remove_job_files(self, context: Context | None = None) -> None:
        """Delete this try's job files (and the reconnected job's folder)."""
        folder, self._job_folder = self._job_folder, None
        if folder is not None:
            folder.remove(submitted_folder(context and context.get("task_state_store")))

    def on_kill(self) -> None:
        if self._connect_job is not None:
            self._connect_job.interrupt()
            return
        try:
            super().on_kill()
        finally:
            self._remove_job_files()

    def finish(self, context: Context, result: JobResult,
               partition_key: str | None = None) -> LoadResult:
        """Emit the asset event (with ``partition_key``, if any) and return what goes to XCom."""
        self._job_result = result
        freshness.record_load(self, context, result)
        if self.target:
            event = context["outlet_events"][asset(to_uri(self.target))]
            event.extra = {
                "source_table": self.table_uri, "source_start_version": result.start_version,
                "source_end_version": result.end_version, "sink_version": result.sink_version,
            }
            if partition_key is not None:
                event.add_partitions(partition_key)
        return result.to_dict()

    @property
    def spark_ui_url(self) -> str | None:
        """The web UI of the Spark driver that ran this task's job (see SparkUILink)."""
        return self._job_result.spark_ui_url if self._job_result else None

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage (called by its provider): the source at the last version read, the
        target at the version committed, and the range in the ``airflowProviderDelta`` facet."""
        from airflow_provider_delta.openlineage import load_lineage

        return load_lineage(self.table_uri, self.target if self.sink else None,
                            self._job_result, self._source_metadata)


class DeltaIncrementalOperator(_DeltaSparkJobOperator):
    """Load the versions of a Delta table that were not loaded yet, with Spark, exactly once.

    The range is, in this order: ``start_version``/``end_version`` (a backfill), the XCom of
    ``sensor_task_id``, or the watermark store; without a watermark ``initial`` decides, as
    for the sensor and the trigger (README, "Where a load starts"). Without an explicit range
    the task defaults to ``max_active_tis_per_dag=1``: two runs at once would read the same
    watermark. Rows go through ``transform`` or ``sql``, then into the sink, batch by batch
    (``max_files``/``max_bytes``; a commit is never split); the watermark moves only after the
    sink committed.

    :param table_uri: the source table (templated).
    :param target: where the sink writes (templated; a templated target is not declared as
        an outlet asset, since it is known only when the task runs).
    :param partition_by: the new target's partition columns (templated: each name, or one
        template rendering to a list); one bare name is one column.
    :param sink_options: the sink's writer options, e.g. ``{"mergeSchema": "true"}``
        (templated: each value, or one template rendering to a dict).
    :param sink: ``"delta"`` (default), ``"delta-merge"``, ``"delta-spark"``, another Spark
        format, or ``None`` (the transform writes).
    :param transform: ``"module:function"``, called as ``function(spark, df, context)`` and
        returning the DataFrame to write (not with ``sql``).
    :param sql: a query over the view ``changes``, or a ``.sql`` file found in the DAG folder or
        ``template_searchpath`` (templated, file contents too).
    :param delta_conn_id: the connection with the source's (and target's) storage credentials:
        of type ``delta``, or an existing ``aws``, ``wasb``, ``adls`` or
        ``google_cloud_platform`` one (see :class:`~airflow_provider_delta.hooks.DeltaHook`).
        Default ``delta_default``, used when it is defined (else the table is read without a
        connection); ``None``: no connection.
    :param storage_options: object_store options given directly, instead of ``delta_conn_id``.
    :param start_version: first version of an explicit range (templated; e.g. from params).
    :param end_version: last version of an explicit range (templated; default: latest).
    :param sensor_task_id: the sensor whose XCom holds the range: a
        :class:`~airflow_provider_delta.sensors.DeltaVersionSensor` upstream of this task, on
        the same table, with the same ``watermark_store`` and ``watermark_key`` (for
        ``"xcom"``: ``watermark_task_id`` naming this task); checked when the task starts.
    :param watermark_store: ``"xcom"`` (default; an XCom of this task), ``"variable"`` or
        ``"asset_state"``.
    :param watermark_key: XCom key, Variable name or asset-state key of the watermark
        (templated).
    :param watermark_asset: for ``"asset_state"``: the asset (or its name) holding the
        watermark; default: the task's only inlet/outlet.
    :param initial: where to start without a watermark (see above).
    :param reset_if_ahead: a watermark above the latest version, or written for another table
        id (the table was dropped and recreated, or replaced, at the same path), restarts with
        ``initial`` instead of failing with :class:`~airflow_provider_delta.errors.WatermarkError`;
        it is also the explicit reset that lets this task move a watermark back.
    :param move_watermark: whether this run moves the watermark; default: yes, except for an
        explicit range.
    :param ignore_deletes: as Delta's streaming option ``ignoreDeletes``: the removes of
        commits that only remove files are ignored; a commit that removes and adds still fails.
    :param ignore_changes: as ``ignoreChanges``: files rewritten by UPDATE/MERGE/DELETE are read
        again whole (their unchanged rows come again: duplicates downstream).
    :param skip_change_commits: as ``skipChangeCommits``: every commit that removes data is
        skipped, its added files too.
    :param max_files: at most this many files per batch (at least one commit each).
    :param max_bytes: at most this many bytes per batch (at least one commit each).
    :param start_timestamp: with ``end_timestamp``, an aware datetime or ISO-8601 string with
        an offset (templated): load the versions committed in ``[start_timestamp,
        end_timestamp)`` by Delta's commit times, instead of a version range; the watermark is
        neither read nor moved. An interval not over yet is refused with
        :class:`~airflow_provider_delta.errors.IntervalNotOverError` (see the "Loading by
        time" page and :mod:`~airflow_provider_delta.operators.time_range`); with
        ``sink="delta-merge"`` an interval older than what the target holds is refused with
        :class:`~airflow_provider_delta.errors.MergeOrderError`.
    :param end_timestamp: the interval's end (excluded); see ``start_timestamp``.
    :param range_from: ``"data_interval"``: the run's data interval is the time range.
    :param interval_grace: how long after an interval's end a commit timed before it may
        still show up; a task started within it waits until it passed (default one minute;
        only with a time range).
    :param asset_partition: Airflow >= 3.3: the target's asset event gets a partition key,
        ``"interval"`` (its start, UTC, ``%Y-%m-%dT%H:%M:%S``) or ``"versions"``.
    :param change_feed: load the row changes of the range (inserts, deletes, update images,
        with ``_change_type``, ``_commit_version``, ``_commit_timestamp``; see
        :func:`~airflow_provider_delta.spark.read_change_feed`) instead of the added files;
        a first load from a snapshot gives its rows as inserts. Pair it with
        ``sink="delta-merge"`` and ``merge_keys`` to keep a target equal to the source.
    :param merge_keys: the key columns of ``sink="delta-merge"`` (required with it, refused
        without it); one bare name is one column.
    :param ship_package: send a zip of this package with ``py_files`` (cluster mode).
    :param work_dir: where the job spec and result live; shared storage in cluster mode. Each
        try writes ``<work_dir>/<dag>.<task>.<run id>.<map index>.<try>/{spec,result}.json`` (no
        credentials: they reach a driver started by spark-submit through its environment;
        in cluster deploy mode the cluster needs its own) and deletes it when the task ends;
        without ``work_dir`` they live in a private temp folder, deleted alike.
    :param conn_id: the Spark connection: a ``spark`` one (spark-submit; default
        ``spark_default``) or a ``spark_connect`` one (the job runs on a Spark Connect session).
    :param deploy_mode: ``client`` or ``cluster``; wins over the connection's extra
        ``deploy-mode``.
    :param archives: archives for spark-submit's ``--archives`` (not with Spark Connect).
    :param allow_overlapping_writers: let this task write source versions that another task
        (a backfill, another DAG) already committed from the same source into the same Delta
        target; only for tasks that each write different rows (e.g. filtered subsets). By
        default such an overlap is refused with
        :class:`~airflow_provider_delta.errors.SinkWriterOverlapError`: it would duplicate rows.

    Every other keyword goes to :class:`SparkSubmitOperator` (``conf``, ``executor_memory``, ...).
    Returns (XCom ``return_value``) a :class:`~airflow_provider_delta.job.spec.LoadResult`.
    Mistakes are refused when the DAG is parsed, or at the latest when the task starts (see
    the "Mistakes caught early" page).
    """

    template_fields: Sequence[str] = (
        *_DeltaSparkJobOperator.template_fields, "start_version", "end_version", "watermark_key",
        "start_timestamp", "end_timestamp",
    )
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        table_uri: str,
        start_version: int | str | None = None,
        end_version: int | str | None = None,
        sensor_task_id: str | None = None,
        watermark_store: str = "xcom",
        watermark_key: str = "delta_watermark",
        watermark_asset: Asset | str | None = None,
        initial: Initial = "snapshot",
        reset_if_ahead: bool = False,
        move_watermark: bool | None = None,
        ignore_deletes: bool = False,
        ignore_changes: bool = False,
        skip_change_commits: bool = False,
        max_files: int | None = None,
        max_bytes: int | None = None,
        change_feed: bool = False,
        start_timestamp: datetime | str | None = None,
        end_timestamp: datetime | str | None = None,
        range_from: str | None = None,
        interval_grace: timedelta | None = None,
        asset_partition: str | None = None,
        **kwargs: Any,
    ):
        if start_version is None and end_version is None:
            # Two tries at once would read one watermark and load the same range (Variables
            # have no compare-and-set): the scheduler runs them one after the other.
            kwargs.setdefault("max_active_tis_per_dag", 1)
        super().__init__(table_uri=table_uri, **kwargs)
        _check_incremental_settings(
            task_id=self.task_id, table_uri=table_uri, sensor_task_id=sensor_task_id,
            watermark_store=watermark_store, watermark_key=watermark_key,
            watermark_asset=watermark_asset, reset_if_ahead=reset_if_ahead,
            move_watermark=move_watermark, ignore_deletes=ignore_deletes,
            ignore_changes=ignore_changes, skip_change_commits=skip_change_commits,
            change_feed=change_feed)
        if self.sink == "delta-merge" and not change_feed:
            raise InvalidParameterError(
                self.task_id, "change_feed", change_feed, "is off, but sink='delta-merge' "
                "applies a change feed", "set change_feed=True", table_uri)
        self.start_version = start_version
        self.end_version = end_version
        self.sensor_task_id = sensor_task_id
        self.watermark_store = watermark_store
        self.watermark_key = watermark_key
        self.watermark_asset = watermark_asset
        self.initial = validate_initial(initial, table_uri, self.task_id)
        self.reset_if_ahead = reset_if_ahead
        self.move_watermark = move_watermark
        self.ignore_deletes = ignore_deletes
        self.ignore_changes = ignore_changes
        self.skip_change_commits = skip_change_commits
        self.max_files = parameters.batch_limit(max_files, "max_files", task_id=self.task_id,
                                                table_uri=table_uri)
        self.max_bytes = parameters.batch_limit(max_bytes, "max_bytes", task_id=self.task_id,
                                                table_uri=table_uri)
        if not (parameters.is_templated(start_version) or parameters.is_templated(end_version)):
            version_range.explicit(self)
        self.change_feed = change_feed
        time_range.setup(self, start_timestamp, end_timestamp, range_from, interval_grace,
                         asset_partition)

    @cached_property
    def store(self) -> WatermarkStore:
        """The watermark store, built after templates are rendered."""
        return make_watermark_store(
            self.watermark_store, key=self.watermark_key, table_uri=self.table_uri,
            task_id=self.task_id, asset=self.watermark_asset,
        )

    def check_rendered(self) -> None:
        super().check_rendered()
        parameters.identifier(self.watermark_key, "watermark_key", what="a non-empty key",
                              task_id=self.task_id, table_uri=self.table_uri)

    def read_options(self) -> dict[str, Any]:
        return {
            "ignore_deletes": self.ignore_deletes, "ignore_changes": self.ignore_changes,
            "skip_change_commits": self.skip_change_commits,
            "max_files": self.max_files, "max_bytes": self.max_bytes,
            "change_feed": self.change_feed,
        }

    def execute(self, context: Context) -> LoadResult:
        self.check_rendered()
        check_upstream_sensor(self, context)
        interval = time_range.interval(self)
        if interval is not None:
            return time_range.load_interval(self, context, *interval)
        found = version_range.resolve(self, context)
        if found is None:
            self.log.info("%s: no new versions to load", self.table_uri)
            return self.finish(context, JobResult(self.table_uri, "changes", None, None))
        result = self.run_request(context, *found)
        if self.moves_watermark:
            self.advance_watermark(context, found[1])
        return self.finish(context, result)

    def finish(self, context: Context, result: JobResult) -> LoadResult:
        return super().finish(context, result, time_range.partition_key(self, result))

    @cached_property
    def probe(self) -> VersionProbe:
        """The source's head: its latest version and table id."""
        return VersionProbe(self.table_uri, self.source_storage_options)

    def advance_watermark(self, context: Context, version: int) -> None:
        """Record ``version`` as fully processed; called only after the sink committed."""
        # The id at `version` itself: the head may already belong to a table recreated since.
        self.store.write(context, version, table_id=self.probe.table_id_at(version),
                         reset=self.reset_if_ahead)

    @property
    def moves_watermark(self) -> bool:
        """An explicit range moves the watermark only when asked, the others unless told not;
        a time range never."""
        if time_range.interval(self) is not None:
            return False
        if version_range.explicit(self)[0] is not None:
            return bool(self.move_watermark)
        return self.move_watermark is not False


class DeltaTimeTravelOperator(_DeltaSparkJobOperator):
    """Load the snapshot of a Delta table at ``version`` or ``timestamp`` (exactly one), with Spark.

    The version is resolved and the snapshot planned before submitting, so a version outside the
    log's window, a timestamp before the first commit or vacuumed files fail with the core's
    error and no Spark job. Transform and sink work as in :class:`DeltaIncrementalOperator`; with
    a ``"delta"`` sink the snapshot is written once (its ``txn`` version is the snapshot version).

    Returns (XCom ``return_value``) a :class:`~airflow_provider_delta.job.spec.LoadResult`
    with ``mode="snapshot"`` and ``start_version == end_version``, the version read.

    :param table_uri: the table (templated).
    :param version: the table version (templated); not with ``timestamp``.
    :param timestamp: a ``datetime`` (naive means UTC) or ISO-8601 string (templated); the latest
        commit at or before it is read; not with ``version``.
    :param target: where the sink writes (templated), as in :class:`DeltaIncrementalOperator`.
    :param sink: ``"delta"`` (default), ``"delta-merge"``, ``"delta-spark"``, another Spark
        format, or ``None`` (the transform writes).
    :param partition_by: the new target's partition columns (templated); one bare name is one
        column.
    :param sink_options: the sink's writer options, a dict (templated).
    :param merge_keys: the key columns of ``sink="delta-merge"``; one bare name is one column.
    :param transform: ``"module:function"``, called as ``function(spark, df, context)``.
    :param sql: a query over the view ``changes``, or a ``.sql`` file (templated).
    :param delta_conn_id: the connection with the storage credentials (default
        ``delta_default``, used when it is defined; ``None``: no connection).
    :param storage_options: object_store options given directly, instead of ``delta_conn_id``.
    :param ship_package: send a zip of this package with ``py_files`` (cluster mode).
    :param work_dir: where the job spec and result live; shared storage in cluster mode.
    :param conn_id: the Spark connection (``spark`` or ``spark_connect``; default
        ``spark_default``).
    :param deploy_mode: ``client`` or ``cluster``; wins over the connection's.
    :param archives: archives for spark-submit's ``--archives``.
    :param allow_overlapping_writers: let this task write source versions another task already
        committed to the same Delta target (see :class:`DeltaIncrementalOperator`).
    """

    template_fields: Sequence[str] = (*_DeltaSparkJobOperator.template_fields, "version",
                                      "timestamp")
    ui_color = "#4a9fd8"

    def __init__(self, *, table_uri: str, version: int | str | None = None,
                 timestamp: datetime | str | None = None, **kwargs: Any):
        super().__init__(table_uri=table_uri, **kwargs)
        self.version = version
        self.timestamp = timestamp
        if not (parameters.is_templated(version) or parameters.is_templated(timestamp)):
            self.requested_point()

    def execute(self, context: Context) -> LoadResult:
        self.check_rendered()
        version = self.resolve_version()
        result = self.run_request(context, LoadStart("snapshot", version), version)
        return self.finish(context, result)

    def resolve_version(self) -> int:
        """``version`` as an int, or the version in force at ``timestamp``."""
        version, timestamp = self.requested_point()
        if version is not None:
            return version
        return core.version_at(self.table_uri, timestamp,
                               storage_options=self.source_storage_options)

    def requested_point(self) -> tuple[int | None, datetime | None]:
        """``version`` or ``timestamp`` (exactly one), checked; a timestamp may not be future."""
        where = {"task_id": self.task_id, "table_uri": self.table_uri}
        version = parameters.version_number(self.version, "version", **where)
        given = self.timestamp not in (None, "", "None")
        if version is not None and given:
            raise InvalidParameterError(
                self.task_id, "version", self.version,
                f"is given with timestamp={self.timestamp!r}",
                "give exactly one of version and timestamp: drop one", self.table_uri)
        if version is None and not given:
            raise InvalidParameterError(
                self.task_id, "version", self.version, "is not given, nor is timestamp",
                "give exactly one of version and timestamp: which snapshot to load",
                self.table_uri)
        return version, parameters.past_timestamp(self.timestamp, **where) if given else None


def _check_job_settings(*, task_id: str | None, table_uri: str, delta_conn_id: object,
                        storage_options: object, ship_package: object, work_dir: object,
                        deploy_mode: object, allow_overlapping_writers: object
                        ) -> dict[str, str] | None:
    """Parse-time checks of the settings both operators share beyond the sink; returns
    ``storage_options`` as checked."""
    where = {"task_id": task_id, "table_uri": table_uri}
    parameters.identifier(delta_conn_id, "delta_conn_id", what="a connection id, or None",
                          **where)
    parameters.flag(ship_package, "ship_package", **where)
    parameters.flag(allow_overlapping_writers, "allow_overlapping_writers", **where)
    if work_dir is not None:
        parameters.table_location(work_dir, "work_dir", **where)
    if deploy_mode not in (None, "client", "cluster"):
        raise InvalidParameterError(task_id, "deploy_mode", deploy_mode, "is not a deploy mode",
                                    "give 'client', 'cluster' or None (the connection's)",
                                    table_uri)
    return parameters.storage_map(storage_options, **where)


def _check_incremental_settings(*, task_id: str, table_uri: str, sensor_task_id: object,
                                watermark_store: str, watermark_key: object,
                                watermark_asset: object, change_feed: object,
                                move_watermark: object, **switches: object) -> None:
    """Parse-time checks of :class:`DeltaIncrementalOperator`'s own settings."""
    where = {"task_id": task_id, "table_uri": table_uri}
    validate_store_kind(watermark_store, task_id, table_uri)
    parameters.identifier(sensor_task_id, "sensor_task_id",
                          what="the task id of the DeltaVersionSensor upstream, or None", **where)
    parameters.identifier(watermark_key, "watermark_key", what="a non-empty key", **where)
    if watermark_key is None:
        raise InvalidParameterError(task_id, "watermark_key", None, "is not set",
                                    "give a non-empty key", table_uri)
    parameters.watermark_asset_store(watermark_asset, watermark_store, **where)
    for switch, value in {**switches, "change_feed": change_feed}.items():
        parameters.flag(value, switch, **where)
    parameters.flag(move_watermark, "move_watermark", unset=True, **where)


def _map_index() -> int:
    """The running task instance's map index (-1: not mapped, or not running)."""
    try:
        return get_current_context()["ti"].map_index
    except RuntimeError:  # outside a task run, e.g. a spec built in a test
        return -1

