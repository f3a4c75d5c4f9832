"""DeltaVersionTrigger: wait, asynchronously, for new versions of a Delta table.

Two uses:

* **Deferred sensor** (``fire_once=True``, what :class:`DeltaVersionSensor` builds): waits
  for versions from ``start_version`` on and fires one event -- ``success`` with the range,
  ``timeout`` at ``timeout_at``, or ``error`` for a permanent problem -- then ends.
* **AssetWatcher event trigger** (the default): fires once per new version range, an edge,
  never "a version exists" (which would start runs forever). Its watermark -- the last
  announced ``end_version`` -- lives in the asset state store (Airflow >= 3.3) under
  ``state_key``, so a restarted triggerer carries on where it stopped; without an asset state
  store it lives in memory and a restart applies ``initial`` again.

Delivery is **at least once**: the event is emitted before the watermark is stored, so a crash
between the two announces the same range again. Consumers deduplicate on ``end_version``.

Triggers of one process that watch the same table (same URI, connection, ``poll_interval`` and
``max_backoff``) share one listing per interval (:mod:`.pollers`), through Airflow's shared
trigger streams where the triggerer has them (``shared_stream_key``, Airflow >= 3.3) and
through the same process-wide poller registry from ``run()`` where it has not. Each trigger
still checks the table once on its own when it starts (its own watermark decides which
commits must exist), then follows the shared polls. Listings run in worker threads, off the
event loop. Transient storage errors are retried with exponential backoff (up to
``max_backoff`` seconds); permanent ones (not a Delta table, unsupported or catalog-managed
table, bad watermark) end a ``fire_once`` trigger with an error event and make a watcher fail
loudly -- except a table that does not exist yet: a watcher waits for it. An idle poll logs at
DEBUG; a trigger logs its progress at INFO at most once a minute.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import astuple
from functools import partial
from typing import Any

from airflow_provider_delta import freshness
from airflow_provider_delta.compat import (
    ASSET_WATCHER,
    BaseEventTrigger,
    TriggerEvent,
    require_airflow,
    trigger_asset_state,
)
from airflow_provider_delta.core.probe import VersionProbe, VersionRange
from airflow_provider_delta.errors import (
    DeltaProviderError, InvalidParameterError, TableNotFoundError,
)
from airflow_provider_delta.hooks.delta import DEFAULT_CONN_ID
from airflow_provider_delta.operators import parameters
from airflow_provider_delta.storage import to_uri
from airflow_provider_delta.triggers.pollers import (
    HEARTBEAT_SECONDS, Poll, PollKey, Subscription, backoff_seconds, closing_polls, registry,
)
from airflow_provider_delta.watermarks import (
    Initial,
    LoadStart,
    encode_watermark,
    parse_watermark,
    resolve_load_start,
    validate_initial,
)

WATCHER_STATE_KEY = "delta_announced_version"
PROGRESS_LOG_SECONDS = 60.0
MIN_NEW_VERSIONS_FIX = "give how many new versions to wait for: 1 or more"
# The trigger's parameters, as serialize() hands them to the triggerer.
_SERIALIZED = ("table_uri", "start_version", "initial", "min_new_versions", "poll_interval",
               "delta_conn_id", "storage_options", "timeout_at", "fire_once", "state_key", "max_backoff",
               "data_changes_only")


class DeltaVersionTrigger(BaseEventTrigger):
    """Fire when ``table_uri`` has at least ``min_new_versions`` versions past the watermark.

    :param table_uri: the table (local path, ``file://``, ``s3://``, ...).
    :param start_version: first version to wait for; ``None`` lets the watermark and
        ``initial`` decide (watchers).
    :param initial: ``"snapshot"``, ``"latest"``, ``"earliest"`` or a version; applies when
        there is no watermark (see :func:`~airflow_provider_delta.watermarks.resolve_load_start`).
        A watcher's ``"snapshot"`` announces the current snapshot first (``mode="snapshot"``).
    :param min_new_versions: how many new versions make an event.
    :param data_changes_only: only versions that change data make an event (as for
        :class:`~airflow_provider_delta.sensors.DeltaVersionSensor`).
    :param poll_interval: seconds between listings.
    :param delta_conn_id: connection with the storage credentials (``delta``, ``aws``,
        ``wasb``, ``adls`` or ``google_cloud_platform``). Default ``delta_default``, used when
        it is defined (else the table is read without a connection); ``None``: no connection.
    :param storage_options: object_store options given directly, instead of
        ``delta_conn_id``'s; no credentials (Airflow stores the trigger's arguments in its
        metadata DB): those go in ``delta_conn_id``.
    :param timeout_at: epoch seconds after which a ``fire_once`` trigger sends ``timeout``.
    :param fire_once: end after the first event (deferred sensors).
    :param state_key: asset state key of a watcher's watermark.
    :param max_backoff: upper bound, in seconds, of the wait after transient errors.
    """

    def __init__(
        self,
        *,
        table_uri: str,
        start_version: int | None = None,
        initial: Initial = "snapshot",
        min_new_versions: int = 1,
        poll_interval: float = 60.0,
        delta_conn_id: str | None = DEFAULT_CONN_ID,
        storage_options: dict[str, str] | None = None,
        timeout_at: float | None = None,
        fire_once: bool = False,
        state_key: str = WATCHER_STATE_KEY,
        max_backoff: float = 600.0,
        data_changes_only: bool = False,
    ):
        super().__init__()
        storage_options = _check_settings(table_uri, min_new_versions, poll_interval, fire_once,
                                          delta_conn_id, storage_options, data_changes_only)
        self.table_uri = table_uri
        self.start_version = start_version
        self.initial = validate_initial(initial, table_uri)
        self.min_new_versions = min_new_versions
        self.poll_interval = poll_interval
        self.delta_conn_id = delta_conn_id
        self.storage_options = storage_options
        self.timeout_at = timeout_at
        self.fire_once = fire_once
        self.state_key = state_key
        self.max_backoff = max_backoff
        self.data_changes_only = data_changes_only
        self._progress_at = float("-inf")  # when its INFO progress line last came
        self._probe: VersionProbe | None = None  # its poller's too (see _probe_of)
        self._shared_by_assets = False  # several assets watch through this one trigger

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {name: getattr(self, name) for name in _SERIALIZED})

    def shared_stream_key(self) -> Hashable | None:
        """Watchers with equal keys share one stream in Airflow's triggerer (Airflow >= 3.3).

        None for a deferred sensor's trigger (``fire_once``): the process-wide poller registry
        shares its polls just the same, while Airflow's stream group (a task and a queue per
        subscriber) doubled the memory of 1,000 deferred sensors on separate tables.
        """
        if self.fire_once:
            return None
        return ("delta-versions", *astuple(self._poll_key()))

    @classmethod
    def open_shared_stream(cls, kwargs: dict[str, Any]) -> AsyncIterator[Poll]:
        """The polls of the table in ``kwargs``, shared by every trigger of the process."""
        trigger = cls(**kwargs)
        return closing_polls(registry().subscribe(trigger._poll_key(), partial(_probe_of, trigger)))

    def run(self) -> AsyncIterator[TriggerEvent]:
        """Where the triggerer does not share streams: the same polls, shared by the registry.

        Not a generator of its own: a waiting trigger keeps one async generator of ours (the
        garbage collector walks those of 30,000 waiting sensors). The registry is the running
        loop's, looked up on the first poll."""
        polls = Subscription(self._poll_key(), partial(_probe_of, self))
        return self._events(polls, owns_polls=True)

    def filter_shared_stream(self, shared_stream: AsyncIterator[Poll]
                             ) -> AsyncIterator[TriggerEvent]:
        """This trigger's events, from its own first check and then the table's shared polls."""
        return self._events(shared_stream, owns_polls=False)

    async def _events(self, polls: AsyncIterator[Poll], owns_polls: bool
                      ) -> AsyncIterator[TriggerEvent]:
        """The events of :meth:`run` and :meth:`filter_shared_stream`; ``polls`` closed at the
        end if ``owns_polls``."""
        try:
            try:
                probe = await _probe_of(self)
                mode, version = await self._start(probe)  # unpacked: no LoadStart kept
                if mode == "snapshot":  # a watcher's first event: the snapshot to load
                    snapshot = await asyncio.to_thread(probe.new_range, version, version)
                    yield await self._success(snapshot, mode, probe)
                    await self._keep_watermark(snapshot, probe)
                    version += 1
            except DeltaProviderError as err:
                if not self.fire_once:
                    raise
                yield _error_event(self.table_uri, err)
                return
            if self.timeout_at is not None and time.time() >= self.timeout_at:
                yield _timeout_event(self, version)
                return
            # Inline, not in a generator or coroutine of its own: a waiting trigger keeps no
            # more frames than this one.
            outcome = await asyncio.to_thread(self._check, probe, version)
            polls = aiter(polls)
            while True:
                if isinstance(outcome, Poll):  # reading new commits blocks: off the loop
                    outcome = (await asyncio.to_thread(self._range_of, outcome, probe, version)
                               if _reads_commits(self, outcome, probe, version)
                               else self._range_of(outcome, probe, version))
                if isinstance(outcome, DeltaProviderError):
                    yield _error_event(self.table_uri, outcome)
                    return
                if outcome is not None:  # a range
                    yield await self._success(outcome, "changes", probe)
                    if self.fire_once:
                        return
                    await self._keep_watermark(outcome, probe)
                    version = outcome["end_version"] + 1
                outcome = await _next_poll(polls, self.timeout_at, _longest_gap(self))
                if outcome is None:
                    yield _timeout_event(self, version)
                    return
        finally:
            if owns_polls:
                await polls.aclose()  # type: ignore[attr-defined]

    async def _start(self, probe: VersionProbe) -> LoadStart:
        """Where to start: ``start_version``, else after the watermark or as ``initial`` says."""
        if self.start_version is not None:
            return LoadStart("changes", self.start_version)
        return await self._retrying(self._start_from_watermark, probe)

    async def _success(self, found: VersionRange, mode: str, probe: VersionProbe) -> TriggerEvent:
        """The event of ``found`` (its lag metrics first, if a metrics backend takes them)."""
        if freshness.metrics_on():
            await _emit_lag(probe, found, mode, self.task_instance)
        return TriggerEvent({"status": "success", **found, "mode": mode})

    async def _keep_watermark(self, found: VersionRange, probe: VersionProbe) -> None:
        """After its event (at least once), a watcher's watermark moves to ``found``'s end."""
        state = None if self.fire_once or self._shared_by_assets else trigger_asset_state(self)
        if state is not None:
            await state.aset(
                self.state_key, encode_watermark(found["end_version"], probe.table_id))

    def _range_of(self, found: Poll, probe: VersionProbe, start_version: int
                  ) -> VersionRange | DeltaProviderError | None:
        """What a poll means to this trigger: a range (logged at DEBUG: the triggerer logs the
        event), nothing yet (at INFO once a minute), or an error to give up on."""
        if found.error is not None:
            return self._unless_retried(found.error, found.failures)
        if found.latest is None:
            return None
        try:
            return probe.new_range(start_version, found.latest, self.min_new_versions,
                                   data_changes_only=self.data_changes_only,
                                   latest_commit_timestamp=found.latest_commit_timestamp,
                                   quiet=found.latest >= start_version or not _progress_due(self))
        except DeltaProviderError as err:  # reading a new commit (data_changes_only) failed
            return self._unless_retried(err, found.failures + 1)

    def _unless_retried(self, err: DeltaProviderError, failures: int) -> DeltaProviderError | None:
        """``err`` if it ends the wait; None (after logging) if the polls carry on."""
        if self._waits_for_table(err):
            level = logging.INFO if _progress_due(self) else logging.DEBUG  # once a minute
            self.log.log(level, "%s (a watcher waits for the table to be created)", err)
            return None
        if err.permanent:
            if not self.fire_once:
                raise err
            return err
        self.log.warning("%s (attempt %d); retrying with backoff", err, failures)
        return None

    async def _retrying(self, step: Callable[[VersionProbe], Awaitable[LoadStart]],
                        probe: VersionProbe) -> LoadStart:
        """``step(probe)``, retried with backoff while it fails with transient errors."""
        failures = 0
        while True:
            try:
                return await step(probe)
            except DeltaProviderError as err:
                waits = self._waits_for_table(err)
                failures += not waits
                if self._unless_retried(err, failures) is not None:
                    raise
                await asyncio.sleep(self.poll_interval if waits else _backoff(self, failures))

    def _waits_for_table(self, err: DeltaProviderError) -> bool:
        """A watcher may be set up before its table: a missing table is then worth waiting for."""
        return not self.fire_once and isinstance(err, TableNotFoundError)

    def _check(self, probe: VersionProbe, start_version: int) -> VersionRange | Poll | None:
        """The trigger's own first check (in a worker thread): a range, nothing yet, or the
        failed poll to go on from."""
        try:
            latest = probe.latest(since=start_version - 1 if start_version > 0 else None)
            return probe.new_range(start_version, latest, self.min_new_versions,
                                   data_changes_only=self.data_changes_only,
                                   quiet=not _progress_due(self))
        except DeltaProviderError as err:
            return Poll(error=err, failures=1)

    def _poll_key(self) -> PollKey:
        return PollKey(to_uri(self.table_uri), self.delta_conn_id, float(self.poll_interval),
                       float(self.max_backoff), tuple(sorted((self.storage_options or {}).items())))

    async def _start_from_watermark(self, probe: VersionProbe) -> LoadStart:
        """A watcher's start: after its stored watermark, else as ``initial`` says."""
        stored = parse_watermark(await self._stored_watermark(), table_uri=self.table_uri,
                                 where=f"asset state {self.state_key!r}")
        latest = await asyncio.to_thread(probe.latest, None if stored is None else stored.version)
        start = resolve_load_start(stored, table_id=probe.table_id, latest=latest,
                                   initial=self.initial, table_uri=self.table_uri)
        self.log.info("%s: watching from version %d, %s (watermark %s)", self.table_uri,
                      start.version, start.mode, stored)
        return start

    async def _stored_watermark(self) -> object:
        """The asset state's watermark; None without one, or when several assets share us."""
        state = trigger_asset_state(self)
        if state is None:
            return None
        try:
            return await state.aget(self.state_key)
        except ValueError:  # the store refuses to choose among several assets
            self._shared_by_assets = True
            self.log.warning(
                "%s: several assets are watched through this one trigger, so its watermark is "
                "kept in memory only (a restarted triggerer applies initial=%r again); give each "
                "asset its own trigger (e.g. its own state_key) to keep one per asset.",
                self.table_uri, self.initial)
            return None


def _check_settings(table_uri: str, min_new_versions: int, poll_interval: float,
                    fire_once: bool, delta_conn_id: str | None,
                    storage_options: dict[str, str] | None,
                    data_changes_only: bool) -> dict[str, str] | None:
    """Refuse, at construction, settings a trigger cannot run with; returns
    ``storage_options`` as checked."""
    if not fire_once:  # only a deferred sensor's trigger runs on Airflow 2
        require_airflow(ASSET_WATCHER, "poll with DeltaVersionSensor (deferrable=True) on a "
                        "schedule instead", table_uri=table_uri)
    parameters.table_location(table_uri, "table_uri", task_id=None)
    parameters.identifier(delta_conn_id, "delta_conn_id", task_id=None, table_uri=table_uri,
                          what="a connection id, or None")
    parameters.flag(data_changes_only, "data_changes_only", task_id=None, table_uri=table_uri)
    if isinstance(min_new_versions, bool) or not isinstance(min_new_versions, int) or (
            min_new_versions < 1):
        raise InvalidParameterError(None, "min_new_versions", min_new_versions, "is below 1",
                                    MIN_NEW_VERSIONS_FIX, table_uri)
    if isinstance(poll_interval, bool) or not isinstance(poll_interval, (int, float)) or (
            poll_interval <= 0):
        raise InvalidParameterError(None, "poll_interval", poll_interval,
                                    "is not above 0 seconds",
                                    "give the seconds between two looks at the log", table_uri)
    return parameters.stored_storage_map(storage_options, task_id=None, table_uri=table_uri)


def _timeout_event(trigger: DeltaVersionTrigger, start_version: int) -> TriggerEvent:
    kind = "version(s) changing data" if trigger.data_changes_only else "version(s)"
    return TriggerEvent({"status": "timeout", "table_uri": trigger.table_uri, "message": (
        f"{trigger.table_uri}: no {trigger.min_new_versions} new {kind} from version "
        f"{start_version} before the sensor's timeout.")})


def _error_event(table_uri: str, err: DeltaProviderError) -> TriggerEvent:
    return TriggerEvent({"status": "error", "table_uri": table_uri, "message": str(err)})


def _reads_commits(trigger: DeltaVersionTrigger, found: Poll, probe: VersionProbe,
                   start_version: int) -> bool:
    """Whether the trigger's ``_range_of`` reads commits for this poll: with
    ``data_changes_only``, when enough versions are new and some are not read yet (idle polls
    read none)."""
    return (trigger.data_changes_only and found.error is None and found.latest is not None
            and found.latest - start_version + 1 >= trigger.min_new_versions
            and probe.has_unread(start_version, found.latest))


def _backoff(trigger: DeltaVersionTrigger, failures: int) -> float:
    """The backoff after ``failures`` failures, ending no later than the trigger's timeout."""
    wait = backoff_seconds(trigger.poll_interval, trigger.max_backoff, failures)
    if trigger.timeout_at is None:
        return wait
    return min(wait, max(trigger.timeout_at - time.time(), 0.0))


def _longest_gap(trigger: DeltaVersionTrigger) -> float:
    """The longest wait for a published poll: a heartbeat after the longest backoff."""
    interval = trigger.poll_interval
    return HEARTBEAT_SECONDS + max(trigger.max_backoff, interval) + 2 * interval


def _next_poll(polls: AsyncIterator[Poll], timeout_at: float | None,
               longest_gap: float) -> Awaitable[Poll | None]:
    """The next shared poll; None once the timeout (epoch seconds) has passed.

    A timeout further away than ``longest_gap`` (the longest time between two published
    polls) needs no timer: a poll comes first, and the next call looks again. So thousands
    of deferred sensors with days-long timeouts keep no timer each, and no coroutine: the
    awaitable of the polls is handed on as it is.
    """
    if timeout_at is None or timeout_at - time.time() > longest_gap:
        return anext(polls)
    return _poll_before(polls, timeout_at)


async def _poll_before(polls: AsyncIterator[Poll], timeout_at: float) -> Poll | None:
    try:
        return await asyncio.wait_for(anext(polls), max(timeout_at - time.time(), 0.0))
    except asyncio.TimeoutError:  # TimeoutError's alias from Python 3.11 on
        return None


async def _emit_lag(probe: VersionProbe, found: VersionRange, mode: str, ti: Any) -> None:
    """The range's lag metrics; off the loop only if that reads a commit (it rarely does)."""
    if freshness.range_lag_reads(found, mode):
        await asyncio.to_thread(freshness.emit_range_lag, probe, found, mode, ti)
    else:
        freshness.emit_range_lag(probe, found, mode, ti)


def _progress_due(trigger: DeltaVersionTrigger) -> bool:
    """True when the trigger's INFO progress line's turn has come (and it is taken): once per
    :data:`PROGRESS_LOG_SECONDS`. A float on the trigger, not an object of its own each."""
    now = time.monotonic()
    if now - trigger._progress_at < PROGRESS_LOG_SECONDS:
        return False
    trigger._progress_at = now
    return True


async def _probe_of(trigger: DeltaVersionTrigger) -> VersionProbe:
    """The trigger's probe: opened once, then shared with its table's poller."""
    if trigger._probe is None:
        trigger._probe = await open_probe(trigger.table_uri, trigger.delta_conn_id,
                                          trigger.storage_options)
    return trigger._probe


async def open_probe(table_uri: str, delta_conn_id: str | None,
                     storage_options: dict[str, str] | None = None) -> VersionProbe:
    """A probe of the table, with ``storage_options`` if given, else those of
    ``delta_conn_id`` (if any)."""
    from airflow_provider_delta.hooks.delta import amask_credentials

    if storage_options is not None:
        await amask_credentials(storage_options)
        return VersionProbe(table_uri, storage_options)
    return VersionProbe(table_uri, await _connection_options(delta_conn_id))


_LOOKUPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str | None, asyncio.Future]] = (
    weakref.WeakKeyDictionary())


async def _connection_options(conn_id: str | None) -> dict[str, str] | None:
    """The storage options of ``conn_id``. Triggers that start while a lookup of the same
    connection is under way share it: a triggerer starting thousands at once makes one lookup,
    not one each. A trigger that starts later looks again, so a changed connection is seen."""
    from airflow_provider_delta.hooks.delta import aconnection_storage_options

    lookups = _LOOKUPS.setdefault(asyncio.get_running_loop(), {})
    lookup = lookups.get(conn_id)
    if lookup is None:
        lookup = lookups[conn_id] = asyncio.ensure_future(aconnection_storage_options(conn_id))
        lookup.add_done_callback(lambda _: lookups.pop(conn_id, None))
    return await asyncio.shield(lookup)
