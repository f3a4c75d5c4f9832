"""Wall time of a Spark Connect client's RPCs, by kind, to split a task into Spark's and ours.

While :func:`rpc_clock` is active, every ``ExecutePlan``, ``AnalyzePlan`` and ``Config`` call
of pyspark's Connect client is timed (the whole call, the server's reply streamed to the end).
An ``ExecutePlan`` that runs a query (a root relation) or a write command is **Spark's work**:
the action the job asks for. Every other RPC (analysis such as a schema, ``spark.sql`` and
view commands, confs, releasing the session) is a round trip of ours, and so is all the time
between RPCs (the Airflow skin, planning, reading the target's log, the commit).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# ExecutePlan commands that are the job's action (a query's root relation counts too)
SPARK_ACTIONS = frozenset({"root", "write_operation", "write_operation_v2"})


@dataclass
class RpcTimes:
    """Seconds and calls per RPC kind (``execute:<command>``, ``analyze:<method>``,
    ``config:<operation>``, ``release``, ``interrupt``)."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, kind: str, seconds: float) -> None:
        self.seconds[kind] += seconds
        self.calls[kind] += 1

    def spark(self) -> float:
        """Seconds of the RPCs that run the job's actions."""
        return sum(s for kind, s in self.seconds.items() if _is_action(kind))

    def round_trip_seconds(self) -> float:
        """Seconds of the RPCs that are not actions."""
        return sum(s for kind, s in self.seconds.items() if not _is_action(kind))

    def round_trips(self) -> dict[str, int]:
        """Calls of the RPCs that are not actions."""
        return {kind: n for kind, n in self.calls.items() if not _is_action(kind)}


def _is_action(kind: str) -> bool:
    return kind.startswith("execute:") and kind.split(":", 1)[1] in SPARK_ACTIONS


def _execute_kind(req) -> str:
    plan = req.plan
    if plan.WhichOneof("op_type") == "root":
        return "execute:root"
    return f"execute:{plan.command.WhichOneof('command_type')}"


@contextmanager
def rpc_clock() -> Iterator[RpcTimes]:
    """Time the Connect client's RPCs until the block ends."""
    from pyspark.sql.connect.client.core import SparkConnectClient as Client

    times = RpcTimes()
    originals = {name: getattr(Client, name) for name in
                 ("_execute_and_fetch_as_iterator", "_execute", "_analyze", "config",
                  "release_session", "interrupt_all")}

    def fetch(self, req, *args, **kwargs):
        started = time.perf_counter()
        try:
            yield from originals["_execute_and_fetch_as_iterator"](self, req, *args, **kwargs)
        finally:
            times.add(_execute_kind(req), time.perf_counter() - started)

    def timed(name, kind_of):
        def call(self, *args, **kwargs):
            started = time.perf_counter()
            try:
                return originals[name](self, *args, **kwargs)
            finally:
                times.add(kind_of(*args, **kwargs), time.perf_counter() - started)
        return call

    Client._execute_and_fetch_as_iterator = fetch
    Client._execute = timed("_execute", lambda req, **_: _execute_kind(req))
    Client._analyze = timed("_analyze", lambda method, **_: f"analyze:{method}")
    Client.config = timed("config", lambda op, **_: f"config:{op.WhichOneof('op_type')}")
    Client.release_session = timed("release_session", lambda *_, **__: "release")
    Client.interrupt_all = timed("interrupt_all", lambda *_, **__: "interrupt")
    try:
        yield times
    finally:
        for name, original in originals.items():
            setattr(Client, name, original)
