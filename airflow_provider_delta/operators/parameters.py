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

from airflow_provider_delta.credential_keys import credential_key_names
from airflow_provider_delta.errors import InvalidParameterError
from airflow_provider_delta.job.spec import DELTA_SINK_NAMES
from airflow_provider_delta.storage import STORE_SCHEMES, location_problem, normalised_location

DELTA_SINKS = tuple(DELTA_SINK_NAMES)
# The data sources Spark knows by short name without a package of the user's choosing.
SPARK_FORMATS = ("parquet", "orc", "json", "csv", "text", "avro", "xml")
_VERSION = re.compile(r"\s*-?\d+\s*")
_REFERENCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def load_settings(*, transform: str | None, sql: str | None, sink: str | None,
                  target: str | None, partition_by: Sequence[str] | str | None,
                  sink_options: Mapping[str, object] | str | None,
                  merge_keys: Sequence[str] | str, task_id: str | None, table_uri: str
                  ) -> tuple[tuple[str, ...] | str, dict[str, str] | str, tuple[str, ...]]:
    """The checks of what both operators share at parse time: the source and target, transform
    or sql, the sink and its settings. Returns ``partition_by``, ``sink_options`` and
    ``merge_keys`` as checked (one bare name is one column)."""
    where = {"task_id": task_id, "table_uri": table_uri}
    table_location(table_uri, "table_uri", task_id=task_id)
    if transform and sql:
        raise InvalidParameterError(task_id, "transform", transform, "is given with sql",
                                    "give either transform or sql", table_uri)
    if sql is not None and not (isinstance(sql, str) and sql.strip()):
        raise InvalidParameterError(task_id, "sql", sql, "is not a query",
                                    "give a query over the view changes, or leave sql unset",
                                    table_uri)
    transform_reference(transform, **where)
    sink_kind(sink, target, **where)
    sink_target(sink, target, **where)
    checked = (column_names(partition_by, "partition_by", **where),
               string_map(sink_options, "sink_options", **where),
               column_names(merge_keys, "merge_keys", templated=False, **where))
    if (sink == "delta-merge") != bool(checked[2]):
        shown = list(merge_keys) if isinstance(merge_keys, tuple) else merge_keys
        raise InvalidParameterError(
            task_id, "merge_keys", shown, f"does not fit sink={sink!r}",
            "give merge_keys (the key columns it merges by) exactly when sink='delta-merge'",
            table_uri)
    for name, value in (("partition_by", partition_by), ("sink_options", sink_options)):
        if sink is None and value:
            raise InvalidParameterError(
                task_id, name, value, "is given, but sink=None writes nothing",
                f"give a sink, or drop {name} (the transform writes by itself)", table_uri)
    return checked


LOCATION_FIX = ("give a local path or a URI such as s3://bucket/path (schemes: "
                + ", ".join(STORE_SCHEMES) + "; a template must render to one)")


def table_location(value: object, parameter: str, *, task_id: str | None,
                   table_uri: str | None = None) -> None:
    """``table_uri``, ``target`` or ``work_dir``: a path or a URI of a store this provider
    reads (see :func:`~airflow_provider_delta.storage.location_problem`). A template is
    checked once it rendered."""
    if is_templated(value):
        return
    problem = location_problem(value)
    if problem is not None:
        raise InvalidParameterError(task_id, parameter, value, problem, LOCATION_FIX,
                                    None if parameter == "table_uri" else table_uri)


def sink_target(sink: str | None, target: str | None, *, task_id: str | None,
                table_uri: str) -> None:
    """A sink's ``target``: a location, and not the source table under another spelling."""
    if sink is None or target is None:
        return
    table_location(target, "target", task_id=task_id, table_uri=table_uri)
    if not (is_templated(target) or is_templated(table_uri)) and (
            normalised_location(target) == normalised_location(table_uri)):
        raise InvalidParameterError(
            task_id, "target", target, "is the source table: every row would be appended to "
            "the table it was read from", "give a target path other than the source table's",
            table_uri)


def flag(value: object, parameter: str, *, task_id: str | None, table_uri: str,
         unset: bool = False) -> None:
    """A switch: True or False (or None where ``unset`` says None has a meaning)."""
    if isinstance(value, bool) or (unset and value is None):
        return
    raise InvalidParameterError(task_id, parameter, value, "is not True or False",
                                f"give {parameter}=True or {parameter}=False"
                                + (", or None for the default" if unset else ""), table_uri)


def identifier(value: object, parameter: str, *, task_id: str | None, table_uri: str,
               what: str) -> None:
    """A non-empty name (a connection or task id, a watermark key), or None where unset;
    templated names are checked when they rendered."""
    if value is None or is_templated(value) or (
            isinstance(value, str) and value.strip() == value and value):
        return
    problem = ("is not a string" if not isinstance(value, str) else
               "is empty" if not value.strip() else "has spaces around it")
    raise InvalidParameterError(task_id, parameter, value, problem, f"give {what}", table_uri)


def storage_map(value: object, *, task_id: str | None, table_uri: str
                ) -> dict[str, str] | None:
    """``storage_options``: None (the connection's), or object_store options as strings."""
    return None if value is None else string_map(
        value, "storage_options", task_id=task_id, table_uri=table_uri,
        example="{'AWS_REGION': 'eu-west-1'}")


def stored_storage_map(value: object, *, task_id: str | None, table_uri: str
                       ) -> dict[str, str] | None:
    """``storage_options`` a trigger keeps in the metadata DB: without credentials, which
    would be stored there unmasked (a connection keeps them in the secrets backend)."""
    options = storage_map(value, task_id=task_id, table_uri=table_uri)
    secrets = credential_key_names(options)
    if secrets:
        shown = {key: "***" if key in secrets else option for key, option in options.items()}
        raise InvalidParameterError(
            task_id, "storage_options", shown,
            f"holds credentials ({', '.join(secrets)}), which a trigger stores unmasked in "
            "Airflow's metadata DB",
            "put them in a connection and give delta_conn_id (storage_options may keep the "
            "other settings)", table_uri)
    return options


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


def column_names(value: Sequence[str] | str | None, parameter: str, *, task_id: str | None,
                 table_uri: str, templated: bool = True) -> tuple[str, ...] | str:
    """Column names (``partition_by``, ``merge_keys``): a sequence of names, one bare name (one
    column), or the text of a list (what a template of a list renders to). A template is kept
    as it is until the task starts."""
    if templated and is_templated(value):
        return value
    names = value
    if isinstance(value, str):
        names = _literal(value) if value.lstrip().startswith(("[", "(")) else [value]
    if not isinstance(names, (list, tuple)) or not all(
            isinstance(column, str) and column.strip() for column in names):
        raise InvalidParameterError(
            task_id, parameter, value if names is None else names,
            "is not a list of column names",
            "give column names, e.g. ['day'] (a template must render to names)", table_uri)
    columns = tuple(column.strip() for column in names)
    twice = sorted({column for column in columns if columns.count(column) > 1})
    if twice:
        raise InvalidParameterError(task_id, parameter, value, f"names {twice} twice",
                                    "name each column once", table_uri)
    return columns


def string_map(value: Mapping[str, object] | str | None, parameter: str, *, task_id: str | None,
               table_uri: str, example: str = "{'mergeSchema': 'true'}"
               ) -> dict[str, str] | str:
    """Writer options (``sink_options``): a mapping of option names to values, or the text of
    one (what a template of a dict renders to). A template is kept until the task starts."""
    if is_templated(value):
        return value
    if value is None:
        return {}
    given = value
    if isinstance(value, str):
        value = _literal(value)
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise InvalidParameterError(
            task_id, parameter, given if value is None else value,
            "is not a mapping of option names to values",
            f"give a dict such as {example} (a template must render to one)",
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
ASSET_PARTITION_KINDS = ("interval", "versions")


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
        fix = ("give the DAG a timetable with data intervals, "
               "DeltaDataIntervalTimetable(timedelta(...)) or CronDataIntervalTimetable(cron, "
               "timezone) (on Airflow 3 a timedelta or cron schedule gives scheduled runs and "
               "backfills an empty one)" if range_from
               else "give start_timestamp < end_timestamp")
        raise InvalidParameterError(task_id, "start_timestamp", start,
                                    f"is not before end_timestamp ({end!s})", fix, table_uri)
    return low, high


def interval_end(value: object, *, task_id: str, table_uri: str) -> dt.datetime:
    """A sensor's ``interval_end`` (``{{ data_interval_end }}`` by default) as an aware
    datetime."""
    return _interval_bound(value, "interval_end", "data_interval", task_id=task_id,
                           table_uri=table_uri)


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
    if value not in ASSET_PARTITION_KINDS:
        raise InvalidParameterError(task_id, "asset_partition", value,
                                    "is not a partition key kind",
                                    f"use one of {ASSET_PARTITION_KINDS}, or None", table_uri)
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


def interval_grace(value: object, *, task_id: str | None, table_uri: str) -> dt.timedelta:
    """``interval_grace``: a ``timedelta`` of zero or more."""
    if not isinstance(value, dt.timedelta) or value < dt.timedelta(0):
        raise InvalidParameterError(task_id, "interval_grace", value, "is not a duration >= 0",
                                    "give a timedelta, e.g. timedelta(minutes=1)", table_uri)
    return value


def watermark_asset_store(asset: object, store: str, *, task_id: str | None,
                          table_uri: str) -> None:
    """``watermark_asset`` only means something to the ``"asset_state"`` store."""
    from airflow_provider_delta.compat import Asset

    if asset is not None and store != "asset_state":
        raise InvalidParameterError(
            task_id, "watermark_asset", asset, f"is given, but watermark_store={store!r} "
            "does not keep the watermark in an asset",
            "give watermark_store='asset_state', or drop watermark_asset", table_uri)
    if asset is not None and not (isinstance(asset, Asset) or (
            isinstance(asset, str) and asset.strip())):
        raise InvalidParameterError(task_id, "watermark_asset", asset, "is not an asset",
                                    "give an Asset or an asset's name", table_uri)


def sensor_timing(settings: Mapping[str, object], *, task_id: str | None,
                  table_uri: str) -> None:
    """A sensor's ``poke_interval`` (above 0: each poke lists the log), ``timeout`` and
    ``mode``, given in ``settings`` (its keyword arguments), as Airflow would refuse them but
    in this provider's form."""
    for setting, least in (("poke_interval", "above 0"), ("timeout", ">= 0")):
        value = settings.get(setting)
        seconds = value.total_seconds() if isinstance(value, dt.timedelta) else value
        if setting not in settings or seconds is None and setting == "timeout":
            continue
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or (
                seconds <= 0 if setting == "poke_interval" else seconds < 0):
            raise InvalidParameterError(task_id, setting, value, f"is not seconds {least}",
                                        f"give a number of seconds {least} or a timedelta",
                                        table_uri)
    if settings.get("mode", "poke") not in ("poke", "reschedule"):
        raise InvalidParameterError(task_id, "mode", settings["mode"], "is not a sensor mode",
                                    "give mode='poke' or mode='reschedule' (or deferrable=True)",
                                    table_uri)
