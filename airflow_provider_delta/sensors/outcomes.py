"""What a sensor's poke, or its trigger's last event, makes of the task: done, waiting, failed."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_delta.compat import AirflowSensorTimeout, PokeReturnValue
from airflow_provider_delta.errors import DeltaProviderError


def poke_outcome(check: Callable[[], Mapping[str, Any] | None], log: logging.Logger
                 ) -> bool | PokeReturnValue:
    """Done with ``check()``'s result as the XCom, or False to poke again: when it found
    nothing, or failed with a transient error (logged); permanent errors are raised."""
    try:
        found = check()
    except DeltaProviderError as err:
        if err.permanent:
            raise
        log.warning("%s; will poke again", err)
        return False
    return PokeReturnValue(is_done=True, xcom_value=found) if found else False


def sensor_event_result(event: dict[str, Any], table_uri: str) -> dict[str, Any]:
    """The event's fields on ``success``; ``timeout`` raises AirflowSensorTimeout (so that
    ``soft_fail`` applies), anything else DeltaProviderError with the trigger's message."""
    status = event.get("status")
    if status == "success":
        return {name: value for name, value in event.items() if name != "status"}
    if status == "timeout":
        raise AirflowSensorTimeout(event["message"])
    raise DeltaProviderError(
        event.get("message", f"{table_uri}: unexpected trigger event {event!r}"),
        table_uri=table_uri,
    )
