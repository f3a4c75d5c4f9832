"""DeltaVersionSensor: wait for versions of a Delta table newer than the pipeline's watermark."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_provider_delta import freshness
from airflow_provider_delta.compat import (
    BaseSensorOperator,
    PokeReturnValue,
    conf,
    first_reschedule_date,
)
from airflow_provider_delta.core.probe import VersionProbe, VersionRange
from airflow_provider_delta.errors import (
    InvalidParameterError, VersionNotAvailableError,
)
from airflow_provider_delta.hooks.delta import (
    DEFAULT_CONN_ID,
    DeltaHook,
    connection_storage_options,
    mask_credentials,
)
from airflow_provider_delta.operators import parameters
from airflow_provider_delta.sensors.outcomes import poke_outcome, sensor_event_result
from airflow_provider_delta.triggers.delta_version import MIN_NEW_VERSIONS_FIX, DeltaVersionTrigger
from airflow_provider_delta.watermarks import (
    Initial,
    LoadStart,
    WatermarkStore,
    make_watermark_store,
    resolve_load_start,
    validate_initial,
    validate_store_kind,
)

if TYPE_CHECKING:
    from airflow_provider_delta.compat import Asset, Context


class DeltaVersionSensor(BaseSensorOperator):
    """Succeed once a Delta table has new versions past the watermark; return their range.

    Each poke reads the watermark (the last fully processed version) from the chosen store and
    lists ``_delta_log`` from there on -- one listing; only the first poke of a task run also
    replays the head's protocol and metadata, and fails if the table id differs from the one
    the watermark was written for (see ``reset_if_ahead``). On success the XCom return value
    is ``{"table_uri", "start_version", "end_version", "latest_commit_timestamp", "mode"}``
    with ``mode="changes"``, ``start_version = watermark + 1`` and ``end_version`` the latest
    version at that poke; the load task processes that range and then writes ``end_version``
    as the new watermark.

    Without a watermark, ``initial`` decides, by the same policy as the operator's
    (:func:`~airflow_provider_delta.watermarks.resolve_load_start`): ``"snapshot"`` (the
    default, as Delta's streaming source) succeeds at once with ``mode="snapshot"`` and
    ``start_version = end_version`` = the latest version, the snapshot to load; ``"latest"``
    (Delta's ``startingVersion=latest``) waits for commits after the version that was latest
    when the sensor first poked (in reschedule mode: the latest version at the first poke's
    time, so pokes stay stateless); ``"earliest"`` starts at version 0; an int starts there.

    :param table_uri: the table (templated): a local path, ``file://``, ``s3://``, ``az://``,
        ``gs://`` URI.
    :param delta_conn_id: a connection holding object-store credentials: of type ``delta``,
        or an existing ``aws``, ``wasb``, ``adls`` or ``google_cloud_platform`` one. Default
        ``delta_default``, used when it is defined (else the table is read without a
        connection); ``None``: no connection.
    :param storage_options: object_store options given directly, instead of
        ``delta_conn_id``'s (as the operators take them). A deferred sensor hands them to its
        trigger, which Airflow stores in its metadata DB: with ``deferrable=True`` credentials
        (keys such as ``AWS_SECRET_ACCESS_KEY``) are refused; give them in ``delta_conn_id``.
    :param watermark_store: ``"xcom"``, ``"variable"`` or ``"asset_state"``.
    :param watermark_key: XCom key, Variable name or asset-state key of the watermark (templated).
    :param watermark_task_id: for ``"xcom"``: the task that writes the watermark (the load task).
    :param watermark_asset: for ``"asset_state"``: the asset (or its name) holding the
        watermark; default: the sensor's only inlet/outlet.
    :param initial: where to start without a watermark (see above).
    :param reset_if_ahead: a watermark above the latest version, or written for another table
        id (the table was dropped and recreated, or replaced, at the same path), restarts with
        ``initial`` instead of failing with :class:`~airflow_provider_delta.errors.WatermarkError`.
    :param min_new_versions: how many new versions it takes to succeed (default 1).
    :param data_changes_only: succeed only for versions that change data (an ``add`` or
        ``remove`` with ``dataChange=true``, or ``cdc`` files); OPTIMIZE, VACUUM and property
        changes alone keep the sensor waiting, and ``min_new_versions`` counts data changes.
        The range found still starts after the watermark and ends at the latest version: the
        load plans no file of the commits that change no data. A poke reads the commits after
        the watermark (in poke mode and deferred, each only once).
    :param deferrable: wait in the triggerer instead of a worker slot. ``timeout`` and
        ``soft_fail`` behave as in poke and reschedule mode.
    """

    template_fields = ("table_uri", "watermark_key")
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        table_uri: str,
        delta_conn_id: str | None = DEFAULT_CONN_ID,
        storage_options: dict[str, str] | None = None,
        watermark_store: str = "xcom",
        watermark_key: str = "delta_watermark",
        watermark_task_id: str | None = None,
        watermark_asset: Asset | str | None = None,
        initial: Initial = "snapshot",
        reset_if_ahead: bool = False,
        min_new_versions: int = 1,
        data_changes_only: bool = False,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ):
        parameters.sensor_timing(kwargs, task_id=kwargs.get("task_id"), table_uri=table_uri)
        super().__init__(**kwargs)
        storage_options = _check_sensor_settings(
            task_id=self.task_id, table_uri=table_uri, delta_conn_id=delta_conn_id,
            storage_options=storage_options, watermark_store=watermark_store,
            watermark_key=watermark_key, watermark_task_id=watermark_task_id,
            watermark_asset=watermark_asset, reset_if_ahead=reset_if_ahead,
            data_changes_only=data_changes_only, deferrable=deferrable)
        if isinstance(min_new_versions, bool) or not isinstance(min_new_versions, int) or min_new_versions < 1:
            raise InvalidParameterError(self.task_id, "min_new_versions", min_new_versions,
                                        "is not an int >= 1", MIN_NEW_VERSIONS_FIX, table_uri)
        self.table_uri = table_uri
        self.delta_conn_id = delta_conn_id
        self.explicit_storage_options = storage_options
        self.watermark_store = watermark_store
        self.watermark_key = watermark_key
        self.watermark_task_id = watermark_task_id
        self.watermark_asset = watermark_asset
        self.initial = validate_initial(initial, table_uri, self.task_id)
        self.reset_if_ahead = reset_if_ahead
        self.min_new_versions = min_new_versions
        self.data_changes_only = data_changes_only
        self.deferrable = deferrable
        self._latest_at_first_poke: int | None = None
        self._found: dict[str, Any] | None = None  # the range returned, for OpenLineage

    @cached_property
    def hook(self) -> DeltaHook | None:
        """The hook of ``delta_conn_id``, or ``None`` for tables needing no credentials."""
        return DeltaHook(self.delta_conn_id) if self.delta_conn_id else None

    @cached_property
    def store(self) -> WatermarkStore:
        """The watermark store, built after templates are rendered."""
        return make_watermark_store(
            self.watermark_store,
            key=self.watermark_key,
            table_uri=self.table_uri,
            task_id=self.watermark_task_id,
            asset=self.watermark_asset,
        )

    def poke(self, context: Context) -> bool | PokeReturnValue:
        return poke_outcome(lambda: self._find_new_versions(context)[1], self.log)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        start_version, found = self._find_new_versions(context)
        if found:
            return found
        self._defer(start_version)

    def _defer(self, start_version: int) -> None:
        self.defer(
            trigger=DeltaVersionTrigger(
                table_uri=self.table_uri,
                start_version=start_version,
                min_new_versions=self.min_new_versions,
                data_changes_only=self.data_changes_only,
                poll_interval=self.poke_interval,
                delta_conn_id=self.delta_conn_id,
                storage_options=self.explicit_storage_options,
                timeout_at=time.time() + self.timeout,
                fire_once=True,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Turn the trigger's event into the sensor's result, or its error."""
        found = sensor_event_result(event, self.table_uri)
        self.log.info("New versions %s..%s", found["start_version"], found["end_version"])
        self._found = {**found, "mode": "changes"}
        return self._found

    def _find_new_versions(self, context: Context) -> tuple[int, dict[str, Any] | None]:
        """The first version to wait for, and what to load if there is something already:
        the sensor's XCom, ``VersionRange`` plus ``mode`` (``"snapshot"`` or ``"changes"``)."""
        stored = self.store.read_watermark(context)
        latest = self.probe.latest(since=None if stored is None else stored.version)
        # The probe's first listing replayed the head, so its table id is known here.
        start = resolve_load_start(
            stored, table_id=self.probe.table_id, latest=latest, initial=self.initial,
            table_uri=self.table_uri, reset_if_ahead=self.reset_if_ahead,
            # "latest" must mean the same version on every poke, or the sensor would chase
            # the head of the table forever.
            latest_for_initial=lambda latest_now: self._latest_when_waiting_began(context,
                                                                                 latest_now),
        )
        if start.mode == "snapshot":
            self.log.info("No watermark yet; initial='snapshot': the snapshot at version %d "
                          "is there to load", start.version)
            found = self.probe.new_range(start.version, start.version)
        else:
            found = self.probe.new_range(start.version, latest, self.min_new_versions,
                                         data_changes_only=self.data_changes_only)
        self._found = found and _found(found, start)
        freshness.emit_lag(self.probe, stored and stored.version, latest, context.get("ti"))
        return start.version, self._found

    def _latest_when_waiting_began(self, context: Context, latest_now: int) -> int:
        if self._latest_at_first_poke is None:
            first_poke = first_reschedule_date(context) if self.reschedule else None
            self._latest_at_first_poke = (
                latest_now if first_poke is None else self._version_at(first_poke)
            )
            self.log.info(
                "No watermark yet; initial='latest' starts after version %d, the latest when "
                "the sensor began waiting (%s)", self._latest_at_first_poke, first_poke or "now",
            )
        return self._latest_at_first_poke

    def _version_at(self, moment: datetime) -> int:
        """The latest version at ``moment``; -1 if the table's first commit came later."""
        from airflow_provider_delta.core import version_at

        try:
            return version_at(self.table_uri, moment, storage_options=self.storage_options)
        except VersionNotAvailableError as err:
            # Time travel refuses moments after the head commit; for a sensor that is the head.
            head = err.latest
            if head is not None and moment.timestamp() * 1000 >= self.probe.commit_timestamp(head):
                return head
            return -1 if err.earliest is None else err.earliest - 1

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage (called by its provider): the table at the end of the range found."""
        from airflow_provider_delta.openlineage import sensor_lineage

        return sensor_lineage(self.table_uri, self._found)

    @cached_property
    def storage_options(self) -> dict[str, str] | None:
        """The ``storage_options`` given, else those of ``delta_conn_id`` (at run time only;
        never templated)."""
        return sensor_storage_options(self.explicit_storage_options, self.delta_conn_id,
                                      task_id=self.task_id, table_uri=self.table_uri)

    @cached_property
    def probe(self) -> VersionProbe:
        """The table's log, opened once and reused by every poke of this task run."""
        return VersionProbe(self.table_uri, self.storage_options)


def sensor_storage_options(given: dict[str, str] | None, delta_conn_id: str | None, *,
                           task_id: str, table_uri: str) -> dict[str, str] | None:
    """A sensor's storage options: those given (masked in logs), else ``delta_conn_id``'s."""
    if given is not None or not delta_conn_id:
        mask_credentials(given)
        return given
    if delta_conn_id != DEFAULT_CONN_ID:
        parameters.check_connection(delta_conn_id, "delta_conn_id", "delta",
                                    task_id=task_id, table_uri=table_uri)
    return connection_storage_options(delta_conn_id)


def _check_sensor_settings(*, task_id: str, table_uri: str, delta_conn_id: object,
                           storage_options: object, watermark_store: str, watermark_key: object,
                           watermark_task_id: object, watermark_asset: object,
                           reset_if_ahead: object, data_changes_only: object,
                           deferrable: object) -> dict[str, str] | None:
    """Parse-time checks of the sensor's settings; returns ``storage_options`` as checked."""
    where = {"task_id": task_id, "table_uri": table_uri}
    parameters.table_location(table_uri, "table_uri", task_id=task_id)
    validate_store_kind(watermark_store, task_id, table_uri)
    parameters.identifier(delta_conn_id, "delta_conn_id", what="a connection id, or None",
                          **where)
    parameters.identifier(watermark_key, "watermark_key", what="a non-empty key", **where)
    parameters.identifier(watermark_task_id, "watermark_task_id",
                          what="the task id of the load that writes the watermark", **where)
    if watermark_store == "xcom" and not watermark_task_id:
        raise InvalidParameterError(
            task_id, "watermark_task_id", watermark_task_id,
            "is not set: watermark_store='xcom' needs watermark_task_id",
            "name the task that writes the watermark after a load (e.g. the incremental "
            "load task)", table_uri)
    if watermark_store != "xcom" and watermark_task_id is not None:
        raise InvalidParameterError(
            task_id, "watermark_task_id", watermark_task_id,
            f"is given, but watermark_store={watermark_store!r} keeps no XCom",
            "drop watermark_task_id, or give watermark_store='xcom'", table_uri)
    parameters.watermark_asset_store(watermark_asset, watermark_store, **where)
    parameters.flag(reset_if_ahead, "reset_if_ahead", **where)
    parameters.flag(data_changes_only, "data_changes_only", **where)
    parameters.flag(deferrable, "deferrable", **where)
    if deferrable:  # the trigger keeps them in the metadata DB
        return parameters.stored_storage_map(storage_options, **where)
    return parameters.storage_map(storage_options, **where)


def _found(found: VersionRange, start: LoadStart) -> dict[str, Any]:
    """The sensor's XCom: the range, and whether it is a snapshot or the changes in it."""
    return {**found, "mode": start.mode}
