"""DeltaIntervalSensor: wait until a Delta table's time interval is complete."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_provider_delta.compat import BaseSensorOperator, PokeReturnValue, conf
from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.core.interval_end import IntervalCheck, IntervalEnd
from airflow_provider_delta.hooks.delta import DEFAULT_CONN_ID
from airflow_provider_delta.operators import parameters
from airflow_provider_delta.sensors.delta_version import sensor_storage_options
from airflow_provider_delta.sensors.outcomes import poke_outcome, sensor_event_result
from airflow_provider_delta.triggers.delta_interval import DeltaIntervalTrigger

if TYPE_CHECKING:
    from airflow_provider_delta.compat import Context


class DeltaIntervalSensor(BaseSensorOperator):
    """Succeed once a Delta table's time interval is complete: put it in front of a time-range
    load (``DeltaIncrementalOperator(range_from="data_interval")``).

    The interval ending at ``interval_end`` is complete once a commit timed at or after the
    end exists (commit times by Delta's rules: in-commit timestamps where the table has them,
    else commit file times made increasing; see
    :mod:`~airflow_provider_delta.core.commit_times`), or once the end lies ``interval_grace``
    in the past: a quiet table's interval is then taken as complete, since a commit gets its
    time when it is written. A first poke finds the newest version, replays the table's
    configuration at it (checkpoint and later commits), then reads the newest commit's
    in-commit timestamp, or, without them, lists the file times of every commit in the log;
    later pokes of the same sensor (``mode="poke"``) read again only when a new version came.
    On success the XCom return value is ``{"table_uri", "interval_end", "complete_by",
    "newest_version", "newest_commit_timestamp"}``, ``complete_by`` being ``"commit"`` or
    ``"grace"``.

    :param table_uri: the table (templated).
    :param interval_end: the interval's end (templated; default ``"{{ data_interval_end }}"``):
        an aware datetime or an ISO-8601 string with an offset.
    :param interval_grace: how long after the end a table without a later commit is taken
        as complete (default one minute, as the load's ``interval_grace``).
    :param delta_conn_id: a connection holding object-store credentials (as for
        :class:`~airflow_provider_delta.sensors.DeltaVersionSensor`; default
        ``delta_default``, used when it is defined).
    :param storage_options: object_store options given directly, instead of
        ``delta_conn_id``'s; with ``deferrable=True`` no credentials (the trigger's arguments
        are stored in Airflow's metadata DB): those go in ``delta_conn_id``.
    :param deferrable: wait in the triggerer instead of a worker slot.
    """

    template_fields = ("table_uri", "interval_end")
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        table_uri: str,
        interval_end: datetime | str = "{{ data_interval_end }}",
        interval_grace: timedelta = timedelta(minutes=1),
        delta_conn_id: str | None = DEFAULT_CONN_ID,
        storage_options: dict[str, str] | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ):
        parameters.sensor_timing(kwargs, task_id=kwargs.get("task_id"), table_uri=table_uri)
        super().__init__(**kwargs)
        where = {"task_id": self.task_id, "table_uri": table_uri}
        parameters.table_location(table_uri, "table_uri", task_id=self.task_id)
        parameters.identifier(delta_conn_id, "delta_conn_id", what="a connection id, or None",
                              **where)
        parameters.flag(deferrable, "deferrable", **where)
        check_options = parameters.stored_storage_map if deferrable else parameters.storage_map
        self.explicit_storage_options = check_options(storage_options, **where)
        parameters.interval_grace(interval_grace, **where)
        self.table_uri = table_uri
        self.interval_end = interval_end
        self.interval_grace = interval_grace
        self.delta_conn_id = delta_conn_id
        self.deferrable = deferrable

    def poke(self, context: Context) -> bool | PokeReturnValue:
        return poke_outcome(self._check, self.log)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        found = self._check()
        if found:
            return found
        self.defer(
            trigger=DeltaIntervalTrigger(
                table_uri=self.table_uri, interval_end=self.end.isoformat(),
                grace_seconds=self.interval_grace.total_seconds(),
                poll_interval=self.poke_interval, delta_conn_id=self.delta_conn_id,
                storage_options=self.explicit_storage_options, timeout_at=time.time() + self.timeout,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Turn the trigger's event into the sensor's result, or its error."""
        return sensor_event_result(event, self.table_uri)

    def _check(self) -> IntervalEnd | None:
        found = self._interval_check.reached(self.end, self.interval_grace,
                                             datetime.now(timezone.utc))
        if found is None:
            self.log.info("%s: no commit at or after %s yet; waiting until one comes, or until "
                          "%s (interval_grace)", self.table_uri, self.end,
                          self.end + self.interval_grace)
        else:
            self.log.info("%s: the interval ending at %s is complete (by %s; newest version %d)",
                          self.table_uri, self.end, found["complete_by"],
                          found["newest_version"])
        return found

    @cached_property
    def end(self) -> datetime:
        """``interval_end`` as an aware datetime (after templates are rendered)."""
        return parameters.interval_end(self.interval_end, task_id=self.task_id,
                                       table_uri=self.table_uri)

    @cached_property
    def _interval_check(self) -> IntervalCheck:
        """This sensor's checks: one commit clock kept across pokes while the table is idle."""
        return IntervalCheck(self.location)

    @cached_property
    def location(self) -> TableLocation:
        """The table's log, with the ``storage_options`` given, else ``delta_conn_id``'s (at run
        time only)."""
        return TableLocation(self.table_uri, sensor_storage_options(
            self.explicit_storage_options, self.delta_conn_id, task_id=self.task_id,
            table_uri=self.table_uri))

