"""Checks of the operators' parameters. What cannot work is refused with an
:class:`~airflow_provider_delta.errors.InvalidParameterError` naming the parameter: at
``__init__`` for values that are not templated, else when the task starts, and always before a
Spark job is submitted.
"""

from __future__ import annotations

import ast
import datetime as dt
import importlib
import json
import re
from collections.abc import Mapping, Sequence

from airflow_provider_delta.errors import InvalidParameterError
from airflow_provider_delta.job.spec import DELTA_SINK_NAMES

DELTA_SINKS = tuple(DELTA_SINK_NAMES)
# The data sources Spark knows by short name without a package of the user's choosing.
SPARK_FORMATS = ("parquet", "orc", "json", "csv", "text", "avro", "xml")
_VERSION = re.compile(r"\s*-?\d+\s*")
_REFERENCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def load_settings(*, transform: str | None, sql: str | None, sink: str | None,
                  target: str | None, partition_by: Sequence[str] | str | None,
                  sink_options: Mapping[str, object] | str | None, merge_keys: Sequence[str],
                  task_id: str | None, table_uri: str
                  ) -> tuple[tuple[str, ...] | str, dict[str, str] | str]:
    """The checks of what both operators share at parse time: transform or sql, the sink and
    its settings. Returns ``partition_by`` and ``sink_options`` as checked."""
    where = {"task_id": task_id, "table_uri": table_uri}
    if transform and sql:
        raise InvalidParameterError(task_id, "transform", transform, "is given with sql",
                                    "give either transform or sql", table_uri)
    transform_reference(transform, **where)
    sink_kind(sink, target, **where)
    checked = (column_names(partition_by, "partition_by", **where),
               string_map(sink_options, "sink_options", **where))
    if (sink == "delta-merge") != bool(merge_keys):
        raise InvalidParameterError(
            task_id, "merge_keys", list(merge_keys), f"does not fit sink={sink!r}",
            "give merge_keys (the key columns it merges by) exactly when sink='delta-merge'",
            table_uri)
    return checked


def is_templated(value: object) -> bool:
    """A value Jinja renders later (so it can only be checked when the task starts)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def version_number(value: int | str | None, parameter: str, *, task_id: str,
                   table_uri: str) -> int | None:
    """A version parameter; templated ones arrive as strings, ``""`` and ``"None"`` mean unset."""
    if value is None or (isinstance(value, str) and value.strip() in ("", "None")):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)) or (
            isinstance(value, str) and not _VERSION.fullmatch(value)):
        raise InvalidParameterError(
            task_id, parameter, value, "is not a table version",
            "give a whole number >= 0 (a template must render to one)", table_uri)
    if int(value) < 0:
        raise InvalidParameterError(task_id, parameter, value, "is negative",
                                    "table versions start at 0", table_uri)
    return int(value)


def column_names(value: Sequence[str] | str | None, parameter: str, *, task_id: str,
                 table_uri: str) -> tuple[str, ...] | str:
    """Column names (``partition_by``): a sequence of names, one name, or the text of a list
    (what a template of a list renders to). A template is kept as it is until the task starts."""
    if is_templated(value):
        return value
    if isinstance(value, str):
        value = _literal(value) if value.lstrip().startswith(("[", "(")) else [value]
    names = value if isinstance(value, (list, tuple)) else None
    if names is None or not all(isinstance(name, str) and name.strip() for name in names):
        raise InvalidParameterError(
            task_id, parameter, value, "is not a list of column names",
            "give column names, e.g. ['day'] (a template must render to names)", table_uri)
    return tuple(name.strip() for name in names)


def string_map(value: Mapping[str, object] | str | None, parameter: str, *, task_id: str,
               table_uri: str) -> dict[str, str] | str:
    """Writer options (``sink_options``): a mapping of option names to values, or the text of
    one (what a template of a dict renders to). A template is kept until the task starts."""
    if is_templated(value):
        return value
    if value is None:
        return {}
    if isinstance(value, str):
        value = _literal(value)
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise InvalidParameterError(
            task_id, parameter, value, "is not a mapping of option names to values",
            "give a dict such as {'mergeSchema': 'true'} (a template must render to one)",
            table_uri)
    return {key: str(option).lower() if isinstance(option, bool) else str(option)
            for key, option in value.items()}


# The settings checked again once their templates rendered, and their checks.
RENDERED_SETTINGS = {"partition_by": column_names, "sink_options": string_map,
                     "conf": string_map}


def rendered_settings(values: Mapping[str, object], *, task_id: str, table_uri: str
                      ) -> dict[str, object]:
    """``values`` (of :data:`RENDERED_SETTINGS`) checked on what their templates rendered."""
    checked = {}
    for name, value in values.items():
        checked[name] = RENDERED_SETTINGS[name](value, name, task_id=task_id,
                                                table_uri=table_uri)
        if is_templated(checked[name]):
            raise InvalidParameterError(task_id, name, value, "was not rendered",
                                        "render the task's templates before running it",
                                        table_uri)
    return checked


def rendered_mapping(value: object) -> Mapping[str, object] | None:
    """A mapping parameter as rendered: the mapping, or the one its text holds (None: neither)."""
    if isinstance(value, str):
        value = _literal(value)
    return value if isinstance(value, Mapping) else None


def _literal(text: str) -> object:
    """A list or dict written as JSON or as Python's text form; None if it is neither."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return None


def batch_limit(value: object, parameter: str, *, task_id: str, table_uri: str) -> int | None:
    """``max_files``/``max_bytes``: unset, or a whole number >= 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidParameterError(
            task_id, parameter, value, "is not a whole number >= 1",
            f"give {parameter} >= 1, or leave it unset to load the range in one batch", table_uri)
    return value


def ordered_range(start: int | None, end: int | None, *, task_id: str, table_uri: str) -> None:
    """An explicit range needs its start, and a start not after its end."""
    if start is None and end is not None:
        raise InvalidParameterError(task_id, "end_version", end, "needs a start_version too",
                                    "give start_version, or neither", table_uri)
    if start is not None and end is not None and start > end:
        raise InvalidParameterError(
            task_id, "start_version", start, f"is after end_version ({end})",
            "give a range with start_version <= end_version", table_uri)


def past_timestamp(value: dt.datetime | str, *, task_id: str, table_uri: str) -> dt.datetime:
    """A time-travel ``timestamp``: a datetime or ISO-8601 string (naive means UTC), not later
    than now."""
    moment = _datetime_of(value)
    if moment is None:
        raise InvalidParameterError(
            task_id, "timestamp", value, "is not a date and time",
            "give a datetime or an ISO-8601 string such as '2025-01-31T12:00:00Z'", table_uri)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    now = dt.datetime.now(dt.timezone.utc)
    if moment > now:
        raise InvalidParameterError(
            task_id, "timestamp", value, f"is in the future (now is {now:%Y-%m-%dT%H:%M:%SZ})",
            "give a past time, or version= for a version number", table_uri)
    return moment


def _datetime_of(value: object) -> dt.datetime | None:
    """A datetime, or the one an ISO-8601 string holds ("Z" for UTC too); None: neither."""
    if isinstance(value, str):
        try:
            return dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    return value if isinstance(value, dt.datetime) else None


def transform_reference(value: str | None, *, task_id: str, table_uri: str) -> None:
    """``transform`` has the form ``"package.module:function"``."""
    if value is not None and not (isinstance(value, str) and _REFERENCE.fullmatch(value)):
        raise InvalidParameterError(
            task_id, "transform", value, "is not of the form 'module:function'",
            "name the function as 'package.module:function' (called as f(spark, df, context)), "
            "or use sql=", table_uri)


def check_importable(reference: str, *, task_id: str, table_uri: str) -> None:
    """The transform's module imports here, and has the function (the driver imports it the
    same way when it runs where the task runs)."""
    module_name, _, function = reference.partition(":")
    fix = ("install its module where the task and the Spark driver run, or ship it with "
           "py_files")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise InvalidParameterError(task_id, "transform", reference,
                                    f"cannot be imported ({error})", fix, table_uri) from error
    if not callable(getattr(module, function, None)):
        raise InvalidParameterError(task_id, "transform", reference,
                                    f"names no function {function!r} in {module_name}", fix,
                                    table_uri)


def sink_kind(sink: str | None, target: str | None, *, task_id: str, table_uri: str) -> None:
    """``sink`` is a Delta sink, a Spark format (short name or class name) or None; a sink
    needs a ``target``."""
    if sink is not None and not (isinstance(sink, str) and (
            sink in DELTA_SINKS or sink in SPARK_FORMATS or "." in sink)):
        raise InvalidParameterError(
            task_id, "sink", sink, "is not a sink this provider knows",
            f"use one of {', '.join(DELTA_SINKS + SPARK_FORMATS)}, a data source's fully "
            "qualified class name, or None (the transform writes)", table_uri)
    if sink is not None and not target:
        raise InvalidParameterError(task_id, "target", target, f"is needed by sink={sink!r}",
                                    "give the path or URI to write to, or sink=None", table_uri)


def check_connection(conn_id: str, parameter: str, conn_type: str, *, task_id: str,
                     table_uri: str) -> None:
    """The connection named by ``parameter`` exists (a missing Spark connection would make
    the Spark provider fall back to YARN)."""
    from airflow_provider_delta.compat import AirflowNotFoundException, BaseHook

    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException as error:
        example = {"spark": '"host": "local[2]"', "delta": '"host": "https://s3.example.com"'}
        raise InvalidParameterError(
            task_id, parameter, conn_id, "is not a defined connection",
            f"create it (e.g. AIRFLOW_CONN_{conn_id.upper()}='{{\"conn_type\": "
            f"\"{conn_type}\", {example[conn_type]}}}'), or name an existing one",
            table_uri) from error


# range_from= values, and the start_timestamp/end_timestamp templates each stands for.
RANGE_SOURCES = {"data_interval": ("{{ data_interval_start }}", "{{ data_interval_end }}")}
ASSET_PARTITIONS = ("interval", "versions")


def range_source(value: str | None, start: object, end: object, *, task_id: str,
                 table_uri: str) -> tuple[object, object]:
    """``start_timestamp``/``end_timestamp`` as given, or the templates ``range_from`` names."""
    if value is None:
        return start, end
    if value not in RANGE_SOURCES:
        raise InvalidParameterError(
            task_id, "range_from", value, "is not a range source",
            f"use range_from={next(iter(RANGE_SOURCES))!r}, or give start_timestamp and "
            "end_timestamp", table_uri)
    if start is not None or end is not None:
        raise InvalidParameterError(
            task_id, "range_from", value, "is given with start_timestamp/end_timestamp",
            "give range_from, or the timestamps, not both", table_uri)
    return RANGE_SOURCES[value]


def alone_with_time_range(others: Mapping[str, object], *, task_id: str,
                          table_uri: str) -> None:
    """A time range chooses the versions itself: ``others`` (the other ways to choose them,
    name -> value; None or False: unset) must be unset."""
    for name, value in others.items():
        if value is not None and value is not False:
            raise InvalidParameterError(
                task_id, name, value, "is given with a time range (start_timestamp/"
                "end_timestamp or range_from)",
                f"choose the versions one way: drop {name}, or the time range", table_uri)


def time_range(start: object, end: object, *, task_id: str, table_uri: str,
               range_from: str | None = None) -> tuple[dt.datetime, dt.datetime] | None:
    """``start_timestamp``/``end_timestamp`` as aware datetimes, start before end (None: no
    time range)."""
    unset = [value is None or (isinstance(value, str) and value.strip() in ("", "None"))
             for value in (start, end)]
    if all(unset) and range_from is None:
        return None
    if any(unset) and range_from is None:
        given, missing = ("end_timestamp", "start_timestamp") if unset[0] else (
            "start_timestamp", "end_timestamp")
        raise InvalidParameterError(task_id, given, end if unset[0] else start,
                                    f"needs {missing} too",
                                    "give both: the interval is [start, end)", table_uri)
    where = {"task_id": task_id, "table_uri": table_uri}
    low = _interval_bound(start, "start_timestamp", range_from, **where)
    high = _interval_bound(end, "end_timestamp", range_from, **where)
    if low >= high:
        fix = ("give the DAG a timetable with data intervals (a timedelta schedule, "
               "CronDataIntervalTimetable, DeltaDataIntervalTimetable); a manual run or "
               "CronTriggerTimetable gives runs an empty one" if range_from
               else "give start_timestamp < end_timestamp")
        raise InvalidParameterError(task_id, "start_timestamp", start,
                                    f"is not before end_timestamp ({end!s})", fix, table_uri)
    return low, high


def _interval_bound(value: object, parameter: str, range_from: str | None, *, task_id: str,
                    table_uri: str) -> dt.datetime:
    """One bound: an aware datetime, or an ISO-8601 string with an offset."""
    moment = _datetime_of(value)
    if moment is None:
        fix = ("run it in a DAG run with a data interval (a scheduled run, a catch-up or a "
               "backfill)" if range_from else
               "give an aware datetime or an ISO-8601 string such as '2026-01-31T00:00:00Z'")
        raise InvalidParameterError(task_id, parameter, value, "is not a date and time", fix,
                                    table_uri)
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise InvalidParameterError(
            task_id, parameter, value, "has no time zone (naive)",
            "give an aware datetime or an ISO-8601 string with an offset, e.g. "
            "'2026-01-31T00:00:00Z'", table_uri)
    return moment


def asset_partition(value: str | None, *, target: str | None, has_time_range: bool,
                    task_id: str, table_uri: str) -> str | None:
    """``asset_partition``: None, ``"interval"`` (time ranges only) or ``"versions"``, for a
    target that is the task's outlet."""
    if value is None:
        return None
    if value not in ASSET_PARTITIONS:
        raise InvalidParameterError(task_id, "asset_partition", value,
                                    "is not a partition key kind",
                                    f"use one of {ASSET_PARTITIONS}, or None", table_uri)
    if value == "interval" and not has_time_range:
        raise InvalidParameterError(
            task_id, "asset_partition", value, "needs a time range",
            "give start_timestamp/end_timestamp or range_from, or use 'versions'", table_uri)
    if not target or is_templated(target):
        raise InvalidParameterError(
            task_id, "asset_partition", value, f"needs a target asset (target={target!r})",
            "give a target that is not templated (the task's outlet), or drop asset_partition",
            table_uri)
    return value
