"""The one check that the sensor and the trigger share: are there new versions, and which?"""

from __future__ import annotations

import logging
from typing import TypedDict

from airflow_provider_delta.core.actions import changes_data, table_metadata
from airflow_provider_delta.core.protocol import check_protocol
from airflow_provider_delta.core.replay import read_commits, replay
from airflow_provider_delta.core.delta_log import TableLocation
from airflow_provider_delta.core.commit_times import in_commit_timestamp_of
from airflow_provider_delta.core.versions import newest_version
from airflow_provider_delta.errors import VersionNotAvailableError

log = logging.getLogger(__name__)


class VersionRange(TypedDict):
    """What the sensor returns as its XCom and the trigger carries in its events."""

    table_uri: str
    start_version: int
    end_version: int
    latest_commit_timestamp: int  # epoch milliseconds of ``end_version``'s commit


class VersionProbe:
    """Cheap questions about a table's head, on one open store (reused from poke to poke).

    A poke costs one listing from the watermark on (``core.newest_version``'s rule: on a local
    folder, a ``stat`` per new commit, and a listing of the folder only after it changed) and
    one read of the head commit: never a log replay. A commit missing after the watermark
    raises LogGapError rather than passing for the head. Only the
    first poke of a probe also replays the head's protocol and metadata (from the newest
    checkpoint), to refuse tables this provider cannot read -- above all catalog-managed ones,
    whose newest commits are not in ``_delta_log`` at all, so a sensor would wait for them
    forever -- and to learn the table id (:attr:`table_id`), which tells a recreated table
    from the one a watermark was written for.
    """

    def __init__(self, table_uri: str, storage_options: dict[str, str] | None = None):
        self.table_uri = table_uri
        # Not copied: options from a connection name it in access errors.
        self.location = TableLocation(table_uri, storage_options or None)
        self.table_id: str | None = None  # of the head at the first `latest`
        self.last_latest: int | None = None  # what `latest` last found
        # Whether each commit read by `data_versions` changes data: a later poke reads only
        # the commits made since (only versions at or after the last start asked are kept).
        self._changes_data: dict[int, bool] = {}

    def latest(self, since: int | None) -> int:
        """The latest version, listing ``_delta_log`` only from ``since`` (a known version) on."""
        version = newest_version(self.location, since)
        if self.table_id is None:
            self.table_id = self.table_id_at(version)
        self.last_latest = version
        return version

    def table_id_at(self, version: int) -> str:
        """The table id (``metaData.id``) at ``version``, refusing tables we cannot read."""
        state = replay(self.location, version)
        protocol = state.protocol or {}
        check_protocol(self.table_uri, protocol, version)
        return table_metadata(state.metadata or {}, protocol).table_id

    def new_range(self, start_version: int, latest: int, min_new_versions: int = 1, *,
                  data_changes_only: bool = False, latest_commit_timestamp: int | None = None,
                  quiet: bool = False) -> VersionRange | None:
        """The range ``start_version..latest`` if it holds at least ``min_new_versions`` commits
        (with ``data_changes_only``: commits that change data, see :meth:`data_versions`).

        The range always ends at ``latest``: commits that change no data ride along with the
        next data change (a load plans no file of theirs). ``latest_commit_timestamp``, when a
        shared poll read it already, spares the read of the head commit; ``quiet`` logs at
        DEBUG (a trigger logs at INFO once a minute at most).
        """
        level = logging.DEBUG if quiet else logging.INFO
        new_versions = latest - start_version + 1
        kind = "new version(s)"
        if data_changes_only and new_versions >= min_new_versions:
            new_versions, kind = len(self.data_versions(start_version, latest)), "data change(s)"
        if new_versions < min_new_versions:
            log.log(
                level, "%s: %d %s from %d (latest %d), waiting for %d",
                self.table_uri, max(new_versions, 0), kind, start_version, latest,
                min_new_versions,
            )
            return None
        log.log(level, "%s: new versions %d..%d", self.table_uri, start_version, latest)
        if latest_commit_timestamp is None:
            latest_commit_timestamp = self.commit_timestamp(latest)
        return VersionRange(
            table_uri=self.table_uri,
            start_version=start_version,
            end_version=latest,
            latest_commit_timestamp=latest_commit_timestamp,
        )

    def data_versions(self, start_version: int, end_version: int) -> list[int]:
        """The versions in ``start_version..end_version`` whose commits change data.

        Reads only the commits this probe has not classified yet, so a sensor that keeps
        seeing OPTIMIZE or VACUUM commits reads each once, whatever the table's history.
        """
        known = {v: c for v, c in self._changes_data.items() if v >= start_version}
        first_unread = start_version
        while first_unread in known:
            first_unread += 1
        for version, actions in read_commits(self.location, range(first_unread, end_version + 1)):
            if actions is None:
                raise self._vanished(version)
            known[version] = changes_data(actions)
        self._changes_data = known
        return [v for v in range(start_version, end_version + 1) if known[v]]

    def has_unread(self, start_version: int, end_version: int) -> bool:
        """Whether :meth:`data_versions` over the range would read a commit."""
        return any(v not in self._changes_data for v in range(start_version, end_version + 1))

    def commit_timestamp(self, version: int) -> int:
        """Epoch ms of a commit, from that commit alone: its in-commit timestamp, else its file time.

        ``core.commit_timestamp`` replays the table's metadata and lists the whole log to apply
        Delta's "strictly increasing" adjustment to file times; a poke must cost what is new
        only. Where in-commit timestamps are on, Delta writes ``commitInfo`` (carrying
        ``inCommitTimestamp``) as the commit's first line, so one read settles it.
        """
        commit = self.location.read_commit_with_mtime(version)
        if commit is None:
            raise self._vanished(version)
        raw, file_time_ms = commit
        in_commit = in_commit_timestamp_of(self.location, version, raw)
        return in_commit if in_commit is not None else file_time_ms

    def _vanished(self, version: int) -> VersionNotAvailableError:
        return VersionNotAvailableError(
            self.table_uri, version, None, None,
            hint="The commit vanished while sensing (log cleanup?); poke again.",
        )
