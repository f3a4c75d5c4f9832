"""Transforms the driver imports by name (``operators.transforms:...``) in the tests."""

from __future__ import annotations

import logging
from functools import partial

from pyspark.sql import functions as F
from pyspark.sql.types import LongType


def add_batch_end(spark, df, context):
    """Tag rows with the batch's last source version (and check the context arrives)."""
    return df.withColumn("batch_end", F.lit(context["end_version"]).cast("long"))


def fail_inside_write(spark, df, context):
    """Rows of id 6 make the Spark tasks fail while the sink writes (a job killed mid-write)."""

    def explode(value):
        if value == 6:
            raise RuntimeError("injected failure during the Spark write")
        return value

    return add_batch_end(spark, df, context).withColumn("id", F.udf(explode, LongType())("id"))


def raise_error(spark, df, context):
    raise ValueError("the transform found bad data")


KILL_MARKER_ENV = "DELTA_TEST_KILL_MARKER"


def kill_during_write(spark, df, context):
    """For batch ``end_version == 2``, SIGKILL the Spark JVM while the sink writes its rows.

    Only while the marker file named by ``$DELTA_TEST_KILL_MARKER`` is missing: the transform
    creates it first, so a re-run of the same DAG writes the batch normally.
    """
    return _killing_at_batch_2(add_batch_end(spark, df, context), context)


def kill_during_feed_write(spark, df, context):
    """:func:`kill_during_write` for change feed rows, passed on unchanged (a merge target
    keeps the source's columns)."""
    return _killing_at_batch_2(df, context)


def _killing_at_batch_2(out, context):
    import os

    marker = os.environ[KILL_MARKER_ENV]
    if context["end_version"] != 2 or os.path.exists(marker):
        return out
    open(marker, "w").close()
    return out.mapInArrow(partial(_kill_jvm_after_first_batch, f"{marker}.killed"), out.schema)


def _kill_jvm_after_first_batch(report, batches):
    """Runs in a Python worker: hand Spark's writer some rows, then SIGKILL the JVM (the
    spark-submit process: the worker's daemon's parent), recording its pid in ``report``."""
    import time

    for batch in batches:
        yield batch
        break
    time.sleep(1)  # the writer has opened its staged Parquet file and taken the rows
    _kill_jvm(report)


def _ancestor_named(name):
    """The nearest ancestor process whose command is ``name`` (the worker's daemon's JVM)."""
    import os

    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/comm") as comm:
            if comm.read().strip() == name:
                return pid
        pid = int(_stat(pid)[1])
    raise RuntimeError(f"no {name} process above the Python worker {os.getpid()}")


def _stat(pid):
    """(state, ppid) from /proc/<pid>/stat (the command may hold spaces and parentheses)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[:2]


def _state(pid):
    try:
        return _stat(pid)[0]
    except FileNotFoundError:
        return "X"


JOB_FILES_LOG_ENV = "DELTA_TEST_JOB_FILES_LOG"


# A Spark conf key that holds a credential (Spark's own redaction would not hide its value).
CREDENTIAL_CONF = "spark.hadoop.fs.azure.account.key.lake.dfs.core.windows.net"


def record_job_files(spark, df, context):
    """Record, while the job runs, its spec path (the driver's first argument), the permission
    bits of the spec and its folder, the spec's text, and the length of the ``CREDENTIAL_CONF``
    the driver's Spark got, one JSON line in ``$DELTA_TEST_JOB_FILES_LOG``."""
    import json
    import os
    import sys

    spec = sys.argv[1].removeprefix("file://")
    with open(spec) as text:
        spec_text = text.read()
    seen = {"spec": spec, "spec_mode": os.stat(spec).st_mode & 0o777,
            "folder_mode": os.stat(os.path.dirname(spec)).st_mode & 0o777, "spec_text": spec_text,
            "credential_conf_length": len(spark.sparkContext.getConf().get(CREDENTIAL_CONF, ""))}
    with open(os.environ[JOB_FILES_LOG_ENV], "a") as out:
        out.write(json.dumps(seen) + "\n")
    return df


def return_none(spark, df, context):
    """Forgets to return the rows."""
    return None


STARTED_MARKER_ENV = "DELTA_TEST_STARTED_MARKER"


def wait_until_killed(spark, df, context):
    """Create the marker file ``$DELTA_TEST_STARTED_MARKER``, then wait for the spark-submit
    JVM (this driver's parent) to die, and exit with it."""
    import os
    import time

    open(os.environ[STARTED_MARKER_ENV], "w").close()
    parent, deadline = os.getppid(), time.monotonic() + 300
    while os.getppid() == parent and time.monotonic() < deadline:
        time.sleep(0.2)
    os._exit(1)


KILL_POINT_ENV = "DELTA_TEST_KILL_POINT"  # "<point>:<batch end version>:<marker file>"


def kill_at_point(spark, df, context):
    """SIGKILL the Spark JVM once, at batch ``end_version``: ``before_write`` (the batch's rows
    are not written), ``during_write`` (from a Python worker, once the sink's Spark write has
    taken some rows) or ``after_commit`` (right after the sink logs the batch's commit).

    The marker file makes it fire once; its ``.killed`` twin receives the JVM's pid.
    """
    import os

    out = add_batch_end(spark, df, context)
    point, version, marker = os.environ[KILL_POINT_ENV].split(":", 2)
    if int(version) != context["end_version"] or os.path.exists(marker):
        return out
    open(marker, "w").close()
    if point == "before_write":
        _kill_jvm(f"{marker}.killed")
    if point == "during_write":
        return out.mapInArrow(partial(_kill_jvm_after_first_batch, f"{marker}.killed"),
                              out.schema)
    logging.getLogger("airflow_provider_delta.job.sinks").addHandler(
        _KillOnCommit(f"{marker}.killed"))
    return out


def _kill_jvm(report):
    """SIGKILL the nearest JVM above this Python process (spark-submit), recording its pid in
    ``report``, then exit: nothing reads this process any more."""
    import os
    import signal
    import time

    jvm = _ancestor_named("java")
    with open(report, "w") as out:
        out.write(str(jvm))
    os.kill(jvm, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while _state(jvm) not in ("Z", "X") and time.monotonic() < deadline:
        time.sleep(0.1)
    os._exit(1)


class _KillOnCommit(logging.Handler):
    """Kills the JVM as soon as the sink logs a commit (before the driver goes on)."""

    def __init__(self, report):
        super().__init__()
        self.report = report

    def emit(self, record):
        if record.getMessage().startswith("committed "):
            _kill_jvm(self.report)


SESSION_COLUMNS = ("session_id", "time_zone", "shuffle_partitions")


def record_session(spark, df, context):
    """One row per batch: the Spark Connect session that ran it and the confs it ran with."""
    values = (spark.session_id, spark.conf.get("spark.sql.session.timeZone"),
              spark.conf.get("spark.sql.shuffle.partitions"))
    return df.limit(1).select(*[F.lit(v).alias(c) for c, v in zip(SESSION_COLUMNS, values)])


def run_for_hours(spark, df, context):
    """Rows that take an hour each to write: the job is still running when the test kills it.
    Each row creates the marker file ``$DELTA_TEST_STARTED_MARKER`` first: the job's Spark
    write is running.

    A Python UDF: a cancelled task ends its Python worker, so the server's cores are free
    again (a JVM-only tight loop would keep running after the cancel).
    """
    import os

    marker = os.environ[STARTED_MARKER_ENV]  # read by the task; the rows run on the server

    def slow(value):
        import time

        open(marker, "w").close()
        time.sleep(3600)
        return value

    return df.withColumn("id", F.udf(slow, LongType())("id"))


PROBE_ENV = "DELTA_TEST_PROBE"


def probe_while_running(spark, df, context):
    """While the job runs, look where a person or another process could: the Spark UI's REST
    API (and its Environment page), every process's command line, and every file under the
    folders named in ``$DELTA_TEST_PROBE`` (a JSON file: ``secrets``, ``folders``, ``ui_url``
    when the session cannot tell it, ``out``); append what was seen as a JSON line to ``out``.
    Task ``failing`` then fails."""
    import json
    import os
    import urllib.request

    with open(os.environ[PROBE_ENV]) as instructions:
        probe = json.load(instructions)
    context_ui = getattr(spark, "sparkContext", None)
    ui_url = probe.get("ui_url") or (context_ui.uiWebUrl if context_ui is not None else None)
    seen = {"task_id": context["task_id"], "ui": _spark_ui_texts(ui_url, urllib.request),
            "command_lines": _command_lines(), "files": {}}
    for folder in probe["folders"]:
        for parent, _, names in os.walk(folder):
            for name in names:
                path = os.path.join(parent, name)
                if (path in (probe["out"], os.environ[PROBE_ENV]) or not os.path.isfile(path)
                        or name.startswith(probe["db_file"])):  # searched table by table
                    continue
                with open(path, "rb") as file:
                    content = file.read()
                seen["files"][path] = [s for s in probe["secrets"] if s.encode() in content]
    with open(probe["out"], "a") as out:
        out.write(json.dumps(seen) + "\n")
    if context["task_id"].startswith("failing"):
        raise RuntimeError(f"probe: task {context['task_id']} fails as planned")
    return df


def _spark_ui_texts(ui_url, request):
    """The REST API's environment and SQL answers of every application, and the HTML
    Environment page, by address."""
    import json

    if not ui_url:
        return {}
    api = f"{ui_url.rstrip('/')}/api/v1/applications"
    texts = {}
    for app in json.loads(request.urlopen(api, timeout=60).read()):
        for page in ("environment", "sql?details=true&planDescription=true"):
            texts[f"{api}/{app['id']}/{page}"] = request.urlopen(
                f"{api}/{app['id']}/{page}", timeout=60).read().decode()
    texts["environment/"] = request.urlopen(f"{ui_url.rstrip('/')}/environment/",
                                            timeout=60).read().decode()
    return texts


def _command_lines():
    """Every process's command line, as ``ps`` shows it to any user."""
    import os

    lines = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                lines.append(cmdline.read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return lines
