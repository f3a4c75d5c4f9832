"""DeltaIntervalTrigger: wait, asynchronously, until a table's time interval is complete.

What :class:`~airflow_provider_delta.sensors.DeltaIntervalSensor` defers to. One check every
``poll_interval`` seconds (in a worker thread), and one at the moment the grace ends, so that a
quiet table's interval completes on time; then one event: ``success`` with the
:class:`~airflow_provider_delta.core.interval_end.IntervalEnd`, ``timeout`` at ``timeout_at``,
or ``error`` for a permanent problem. Transient storage errors are logged and checked again.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow_provider_delta.compat import BaseTrigger, TriggerEvent
from airflow_provider_delta.core.interval_end import IntervalCheck
from airflow_provider_delta.errors import DeltaProviderError
from airflow_provider_delta.hooks.delta import DEFAULT_CONN_ID
from airflow_provider_delta.operators import parameters
from airflow_provider_delta.triggers.delta_version import open_probe


class DeltaIntervalTrigger(BaseTrigger):
    """Fire once the interval ending at ``interval_end`` is complete in ``table_uri``.

    :param table_uri: the table (local path, ``file://``, ``s3://``, ...).
    :param interval_end: the interval's end, ISO-8601 with an offset.
    :param grace_seconds: how long after the end a quiet table's interval counts as complete.
    :param poll_interval: seconds between checks.
    :param delta_conn_id: connection with the storage credentials (default ``delta_default``,
        used when it is defined; ``None``: no connection).
    :param storage_options: object_store options given directly, instead of
        ``delta_conn_id``'s; no credentials (Airflow stores the trigger's arguments in its
        metadata DB): those go in ``delta_conn_id``.
    :param timeout_at: epoch seconds after which the trigger sends ``timeout``.
    """

    def __init__(self, *, table_uri: str, interval_end: str, grace_seconds: float,
                 poll_interval: float = 60.0, delta_conn_id: str | None = DEFAULT_CONN_ID,
                 storage_options: dict[str, str] | None = None,
                 timeout_at: float | None = None):
        super().__init__()
        self.storage_options = parameters.stored_storage_map(storage_options, task_id=None,
                                                             table_uri=table_uri)
        self.table_uri = table_uri
        self.interval_end = interval_end
        self.grace_seconds = grace_seconds
        self.poll_interval = poll_interval
        self.delta_conn_id = delta_conn_id
        self.timeout_at = timeout_at

    def serialize(self) -> tuple[str, dict[str, Any]]:
        names = ("table_uri", "interval_end", "grace_seconds", "poll_interval", "delta_conn_id",
                 "storage_options", "timeout_at")
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {name: getattr(self, name) for name in names})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        end = dt.datetime.fromisoformat(self.interval_end)
        grace = dt.timedelta(seconds=self.grace_seconds)
        try:
            location = (await open_probe(self.table_uri, self.delta_conn_id,
                                         self.storage_options)).location
        except DeltaProviderError as err:
            yield self._event("error", message=str(err))
            return
        check = IntervalCheck(location)
        while True:
            try:
                found = await asyncio.to_thread(check.reached, end, grace,
                                                dt.datetime.now(dt.timezone.utc))
            except DeltaProviderError as err:
                if err.permanent:
                    yield self._event("error", message=str(err))
                    return
                self.log.warning("%s; checking again", err)
                found = None
            if found is not None:
                yield TriggerEvent({"status": "success", **found})
                return
            if self.timeout_at is not None and time.time() >= self.timeout_at:
                yield self._event("timeout", message=(
                    f"{self.table_uri}: the interval ending at {self.interval_end} was not "
                    "complete before the sensor's timeout."))
                return
            await asyncio.sleep(self._next_wait(end + grace))

    def _next_wait(self, grace_ends: dt.datetime) -> float:
        """Seconds to the next check: the poll interval, or less to the grace's end or the
        timeout."""
        waits = [self.poll_interval]
        until_grace_ends = (grace_ends - dt.datetime.now(dt.timezone.utc)).total_seconds()
        if until_grace_ends >= 0:
            waits.append(until_grace_ends + 0.01)
        if self.timeout_at is not None:
            waits.append(max(self.timeout_at - time.time(), 0.0))
        return min(waits)

    def _event(self, status: str, **fields: Any) -> TriggerEvent:
        return TriggerEvent({"status": status, "table_uri": self.table_uri, **fields})
