"""Access to a table's ``_delta_log``: naming rules, listing, reading and path resolution.

Object stores (S3, GCS, Azure) are listed with obstore's start-after listing, so a listing
from a hint costs what lies after the hint. The local file system has no such listing
(object_store emulates it by walking the whole folder), so local tables are probed name by
name from a hint with ``os.stat`` and listed with one ``os.scandir`` only when there is no hint.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import unquote, urlparse

import obstore
from obstore.store import ObjectStore

from airflow_provider_delta.errors import DeltaProviderError, TableNotFoundError
from airflow_provider_delta.storage import (
    STORE_ERRORS, RangedObject, local_path, open_store, read_object_tail, storage_error,
)

log = logging.getLogger(__name__)

LOG_DIR = "_delta_log"
COMMIT_RE = re.compile(r"^(\d{20})\.json$")
CHECKPOINT_RE = re.compile(
    r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10})|\.([0-9A-Za-z-]+))?\.(parquet|json)$"
)
# Newest version named in a local _delta_log, by folder: (folder mtime in ns, version). A folder
# gets a new mtime whenever an entry is added, removed or renamed, so an unchanged mtime means an
# unchanged answer -- unless the listing ran within the same clock tick as the last change, so
# only folders unchanged for a while are remembered.
_NEWEST_LOCAL: dict[str, tuple[int, int | None]] = {}
_SETTLED_NS = 2_000_000_000


@dataclass(frozen=True)
class LogEntry:
    """One commit or checkpoint file directly inside ``_delta_log/``."""

    name: str
    version: int
    mtime_ms: int | None = None  # filled when listed with_mtime (always for object stores)

    @property
    def is_commit(self) -> bool:
        return COMMIT_RE.match(self.name) is not None


@dataclass(frozen=True)
class CheckpointFile:
    """A checkpoint file name, parsed: classic, one part of a multi-part one, or v2."""

    name: str
    version: int
    part: int | None = None
    parts: int | None = None
    v2_id: str | None = None

    @classmethod
    def parse(cls, name: str) -> CheckpointFile | None:
        match = CHECKPOINT_RE.match(name)
        if match is None:
            return None
        version, part, parts, v2_id, suffix = match.groups()
        if v2_id is None and suffix == "json":
            return None  # only v2 checkpoints may be JSON
        return cls(name, int(version), int(part) if part else None,
                   int(parts) if parts else None, v2_id)


def commit_name(version: int) -> str:
    return f"{version:020d}.json"


class TableLocation:
    """A Delta table's root: reads and lists its log, resolves its data file paths."""

    def __init__(self, table_uri: str, storage_options: dict[str, str] | None = None):
        self.table_uri = table_uri
        self.local_root = local_path(table_uri)
        self.root_uri = (
            "file://" + self.local_root.rstrip("/") if self.local_root else table_uri.rstrip("/")
        )
        self.storage_options = storage_options

    @cached_property
    def store(self) -> ObjectStore:
        """The obstore store rooted at the table (local tables are read with plain file I/O)."""
        return open_store(self.root_uri, self.storage_options, self.table_uri)

    def storage_error(self, exc: Exception) -> DeltaProviderError:
        """A failed store request as a permanent or transient error of this table."""
        return storage_error(self.table_uri, exc, self.storage_options)

    @property
    def is_local(self) -> bool:
        return self.local_root is not None

    # -- reading -------------------------------------------------------------------------

    def read_log_file(self, name: str) -> bytes | None:
        """Bytes of ``_delta_log/<name>``, None if it does not exist."""
        if self.local_root is not None:
            try:
                with open(os.path.join(self.local_root, LOG_DIR, name), "rb") as handle:
                    return handle.read()
            except (FileNotFoundError, NotADirectoryError):
                return None
        try:
            return bytes(obstore.get(self.store, f"{LOG_DIR}/{name}").bytes())
        except FileNotFoundError:
            return None
        except STORE_ERRORS as exc:
            raise self.storage_error(exc) from exc

    def log_file_source(self, name: str) -> str | bytes | RangedObject | None:
        """What pyarrow can open for ``_delta_log/<name>``, so that large checkpoints are read in
        pieces, never copied whole: the local path; in an object store the bytes of a small
        file, else a file read by range requests (:func:`read_object_tail`, one request
        either way to start). None if it does not exist."""
        if self.local_root is None:
            return read_object_tail(self.store, f"{LOG_DIR}/{name}", self.storage_error)
        path = os.path.join(self.local_root, LOG_DIR, name)
        return path if os.path.isfile(path) else None

    def log_file_mtime_ms(self, name: str) -> int | None:
        """Modification time of ``_delta_log/<name>`` in epoch ms, None if it does not exist."""
        if self.local_root is not None:
            try:
                return os.stat(os.path.join(self.local_root, LOG_DIR, name)).st_mtime_ns // 1_000_000
            except FileNotFoundError:
                return None
        try:
            meta = obstore.head(self.store, f"{LOG_DIR}/{name}")
        except FileNotFoundError:
            return None
        except STORE_ERRORS as exc:
            raise self.storage_error(exc) from exc
        return int(meta["last_modified"].timestamp() * 1000)

    def commit_mtime_ms(self, version: int) -> int | None:
        """Modification time of commit ``version`` in epoch ms, None if it does not exist."""
        return self.log_file_mtime_ms(commit_name(version))

    def log_file_exists(self, name: str) -> bool:
        if self.local_root is not None:  # one stat: the probe that replaces listing locally
            return os.path.isfile(os.path.join(self.local_root, LOG_DIR, name))
        return self.log_file_mtime_ms(name) is not None

    def read_commit_with_mtime(self, version: int) -> tuple[bytes, int] | None:
        """Bytes and modification time (epoch ms) of commit ``version``, None if it is missing.

        One GET on object stores: the response carries the object's metadata.
        """
        if self.local_root is not None:
            raw, mtime = self.read_log_file(commit_name(version)), self.commit_mtime_ms(version)
            return None if raw is None or mtime is None else (raw, mtime)
        try:
            result = obstore.get(self.store, f"{LOG_DIR}/{commit_name(version)}")
            return bytes(result.bytes()), int(result.meta["last_modified"].timestamp() * 1000)
        except FileNotFoundError:
            return None
        except STORE_ERRORS as exc:
            raise self.storage_error(exc) from exc

    def commit_exists(self, version: int) -> bool:
        return self.log_file_exists(commit_name(version))

    def last_checkpoint_hint(self) -> dict | None:
        """``_last_checkpoint`` parsed, or None if it is missing or corrupt (Delta ignores it then)."""
        raw = self.read_log_file("_last_checkpoint")
        if not raw:
            return None
        try:
            hint = json.loads(raw)
            int(hint["version"])
        except (ValueError, KeyError, TypeError):
            log.warning("%s: ignoring unreadable _delta_log/_last_checkpoint", self.table_uri)
            return None
        return hint

    # -- listing -------------------------------------------------------------------------

    def newest_listed_version(self) -> int | None:
        """The highest commit or checkpoint version in a local ``_delta_log/``, None if none.

        Lists the folder only when it changed since the last listing in this process, so
        repeated calls on an idle table cost one ``stat``.
        """
        folder = os.path.join(self.local_root, LOG_DIR)
        try:
            changed_ns = os.stat(folder).st_mtime_ns
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise TableNotFoundError(self.table_uri, f"{folder} does not exist") from exc
        remembered = _NEWEST_LOCAL.get(folder)
        if remembered is not None and remembered[0] == changed_ns:
            return remembered[1]
        listed_at_ns = time.time_ns()
        newest = _newest_version_named(os.listdir(folder))
        if listed_at_ns - changed_ns > _SETTLED_NS:
            _NEWEST_LOCAL[folder] = (changed_ns, newest)
        return newest


    def list_log(self, from_version: int = 0, *, with_mtime: bool = False,
                 until_version: int | None = None, commits_only: bool = False
                 ) -> list[LogEntry]:
        """Commits and checkpoints (``commits_only``: commits) with version >=
        ``from_version``, sorted by name.

        Remote stores list from ``from_version`` (start-after); a local folder is scanned once.
        Raises TableNotFoundError when ``_delta_log`` does not exist.
        """
        if self.local_root is not None:
            entries = self._scan_local(from_version, with_mtime, until_version, commits_only)
        else:
            entries = self._list_remote(from_version, until_version)
            entries = [e for e in entries if e.is_commit] if commits_only else entries
        if until_version is not None:
            entries = [e for e in entries if e.version <= until_version]
        return sorted(entries, key=lambda e: e.name)

    def _scan_local(self, from_version: int, with_mtime: bool, until_version: int | None,
                    commits_only: bool) -> list[LogEntry]:
        folder = os.path.join(self.local_root, LOG_DIR)
        try:
            scan = os.scandir(folder)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise TableNotFoundError(self.table_uri, f"{folder} does not exist") from exc
        entries = []
        with scan:
            for item in scan:
                version = _commit_version(item.name) if commits_only else _version_of(item.name)
                if version is None or version < from_version or not item.is_file():
                    continue
                if until_version is not None and version > until_version:
                    continue  # before the stat: the newest part of a long log is skipped free
                mtime = item.stat().st_mtime_ns // 1_000_000 if with_mtime else None
                entries.append(LogEntry(item.name, version, mtime))
        return entries

    def _list_remote(self, from_version: int, until_version: int | None) -> list[LogEntry]:
        prefix = f"{LOG_DIR}/"
        offset = f"{prefix}{from_version:020d}" if from_version > 0 else None
        entries = []
        try:
            for chunk in obstore.list(self.store, prefix=LOG_DIR, offset=offset, chunk_size=1000):
                for meta in chunk:
                    name = meta["path"][len(prefix):]
                    if name[:1] > "9":  # "_sidecars/", "_staged_commits/": after every version
                        return entries
                    version = _version_of(name)
                    if version is None or version < from_version:
                        continue
                    if until_version is not None and version > until_version:
                        return entries
                    entries.append(LogEntry(name, version,
                                            int(meta["last_modified"].timestamp() * 1000)))
        except STORE_ERRORS as exc:
            raise self.storage_error(exc) from exc
        return entries

    # -- data file paths -----------------------------------------------------------------

    def resolve(self, path: str) -> str:
        """An AddFile/DV path (URI-encoded, relative or absolute) as an absolute decoded URI."""
        decoded = unquote(path)
        if ":" in path:  # may carry a scheme; urlparse is costly, so only then
            parsed = urlparse(path)
            if parsed.scheme == "file":
                return "file://" + unquote(parsed.path)
            if parsed.scheme:
                return decoded
        if decoded.startswith("/"):
            return "file://" + decoded
        return f"{self.root_uri}/{decoded}"


def _newest_version_named(names: list[str]) -> int | None:
    """The highest version among commit and checkpoint names (names sort by version)."""
    numbered = [n for n in names if n[:1].isdigit()]
    newest = _version_of(max(numbered)) if numbered else None
    if newest is not None or not numbered:
        return newest
    # the greatest name is something else (e.g. a stray temp file): look at each in turn
    return next((v for v in map(_version_of, sorted(numbered, reverse=True)) if v is not None),
                None)


def _commit_version(name: str) -> int | None:
    """The version of a commit file name; None for anything else."""
    match = COMMIT_RE.match(name)
    return int(match.group(1)) if match else None


def _version_of(name: str) -> int | None:
    """The version of a commit or checkpoint file name; None for anything else."""
    version = _commit_version(name)
    if version is not None:
        return version
    checkpoint = CheckpointFile.parse(name)
    return checkpoint.version if checkpoint else None
