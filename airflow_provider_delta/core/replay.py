"""Rebuilding a table's state at a version: newest checkpoint at or below it, then commits.

This is our own replay rather than deltalake's because the core must name an unsupported
reader feature or a log gap precisely, read tables deltalake refuses to open (so that it can
refuse them with our errors), and find the metadata in force at an old version cheaply.
It reads classic, multi-part and v2 checkpoints (JSON or Parquet top-level file, with
sidecars) with pyarrow.
"""

from __future__ import annotations

import io
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_delta.core.actions import file_key, parse_commit
from airflow_provider_delta.core.storage import (
    CheckpointFile, LogEntry, TableLocation, commit_name,
)
from airflow_provider_delta.errors import (
    DamagedLogFileError, InvalidLogError, LogGapError, TableNotFoundError,
    VersionNotAvailableError,
)

log = logging.getLogger(__name__)

# How far below a version the local probe looks for a classic checkpoint before listing.
_LOCAL_CHECKPOINT_PROBE = 1000
_PROGRESS_EVERY = 10_000  # commits between progress log lines of a long replay
_REMOTE_READERS = 16
_REMOTE_READ_AHEAD = 256
# Smaller checkpoint files are read faster on the calling thread than through Arrow's pool.
_THREADED_READ_BYTES = 1 << 20


@dataclass
class LogState:
    """Protocol, metadata and (optionally) live AddFiles at ``version``."""

    version: int
    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    files: dict[tuple[str, str | None], dict[str, Any]] | None = None
    # the actions of commit ``version`` when the replay read it (plan_changes reuses them)
    last_commit: list[dict[str, Any]] | None = None

    def apply(self, actions: Iterable[Mapping[str, Any]]) -> None:
        for action in actions:
            if "protocol" in action:
                self.protocol = action["protocol"]
            elif "metaData" in action:
                self.metadata = action["metaData"]
            elif self.files is not None and "add" in action:
                self.files[file_key(action["add"])] = action["add"]
            elif self.files is not None and "remove" in action:
                self.files.pop(file_key(action["remove"]), None)


def read_commit(location: TableLocation, version: int) -> list[dict[str, Any]] | None:
    """The actions of commit ``version``, None if the commit file does not exist."""
    raw = location.read_log_file(commit_name(version))
    return None if raw is None else commit_actions(location, version, raw)


def commit_actions(location: TableLocation, version: int, raw: bytes) -> list[dict[str, Any]]:
    """The actions in the bytes of commit ``version``; DamagedLogFileError if they are damaged.

    An empty file is damage too: every commit holds at least one action, and treating it as
    an empty commit would move a watermark past versions whose actions are lost.
    """
    if not raw.strip():
        raise DamagedLogFileError(location.table_uri, version, commit_name(version),
                                  "the commit file is empty, its actions are lost")
    try:
        actions = list(parse_commit(raw))
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        actions = None
    if actions is None or not all(isinstance(a, dict) for a in actions):
        raise DamagedLogFileError(location.table_uri, version, commit_name(version),
                                  f"{_first_bad_line(raw)} is not a JSON action (torn or garbage)")
    return actions


def _first_bad_line(raw: bytes) -> str:
    for number, line in enumerate(raw.splitlines(), 1):
        try:
            if not line.strip() or isinstance(json.loads(line), dict):
                continue
        except ValueError:
            pass
        return f"line {number}"
    return "a line"


def read_commits(location: TableLocation, versions: range
                 ) -> Iterator[tuple[int, list[dict[str, Any]] | None]]:
    """``(version, actions or None)`` in version order.

    Object stores answer each GET in tens of milliseconds, so remote commits are fetched
    ``_REMOTE_READ_AHEAD`` at a time on threads; local files are read one after another.
    """
    if location.is_local:
        for version in versions:
            yield version, read_commit(location, version)
        return
    with ThreadPoolExecutor(max_workers=_REMOTE_READERS) as pool:
        for low in range(versions.start, versions.stop, _REMOTE_READ_AHEAD):
            window = range(low, min(low + _REMOTE_READ_AHEAD, versions.stop))
            yield from zip(window, pool.map(lambda v: read_commit(location, v), window))


def replay(location: TableLocation, version: int, *, with_files: bool = False) -> LogState:
    """The state at ``version``: checkpoint at or below it plus the commits after it.

    Raises VersionNotAvailableError if the log cannot recreate ``version`` (log cleaned
    below it, or beyond the latest commit), LogGapError if a commit after the checkpoint is
    missing, InvalidLogError if no protocol or metadata is found.
    """
    state, checkpoint, damaged = _checkpoint_state(location, version, with_files)
    first_commit = checkpoint[0].version + 1 if checkpoint else 0
    for commit_version, actions in read_commits(location, range(first_commit, version + 1)):
        if actions is None and damaged is not None:
            raise _without_fallback(damaged, version, commit_version)
        if actions is None:
            raise_unreadable(location, version, commit_version, from_checkpoint=bool(checkpoint))
        state.last_commit = actions
        state.apply(actions)
        if (commit_version - first_commit) % _PROGRESS_EVERY == _PROGRESS_EVERY - 1:
            log.info("%s: replayed commits %d..%d towards version %d", location.table_uri,
                     first_commit, commit_version, version)
    if state.protocol is None or state.metadata is None:
        absent = "protocol" if state.protocol is None else "metaData"
        raise InvalidLogError(location.table_uri, version, f"no {absent} action at or before it")
    return state


def _checkpoint_state(location: TableLocation, version: int, with_files: bool
                      ) -> tuple[LogState, list[CheckpointFile] | None, DamagedLogFileError | None]:
    """The state of the newest readable checkpoint at or below ``version`` (None: start at 0).

    A damaged checkpoint is passed over for an older one, or for the commits from 0, as
    Delta does; the damage is returned so that it can be reported if those are gone too.
    """
    damaged = None
    below = version
    while below >= 0 and (checkpoint := find_checkpoint(location, below)):
        state = LogState(version, files={} if with_files else None)
        try:
            log.debug("%s: replaying from checkpoint %s", location.table_uri, checkpoint[0].name)
            state.apply(read_checkpoint(location, checkpoint, with_files=with_files))
            return state, checkpoint, damaged
        except DamagedLogFileError as err:
            log.warning("%s Replaying from an older checkpoint or from the commits instead.", err)
            damaged = damaged or err
            below = checkpoint[0].version - 1
    return LogState(version, files={} if with_files else None), None, damaged


def _without_fallback(damaged: DamagedLogFileError, version: int, first_missing: int
                      ) -> DamagedLogFileError:
    return DamagedLogFileError(
        damaged.table_uri, damaged.version, damaged.file_name, damaged.damage,
        remedy=f"No older checkpoint can replace it and commit {first_missing} is gone, so "
               f"version {version} cannot be rebuilt: restore the file from a backup or from "
               "the writer, or read a later version that a newer checkpoint covers.",
    )


def raise_unreadable(location: TableLocation, version: int, first_missing: int, *,
                     from_checkpoint: bool) -> NoReturn:
    """Explain why commit ``first_missing`` (needed for ``version``) cannot be read."""
    entries = location.list_log()
    if not entries:
        raise TableNotFoundError(location.table_uri)
    commits = {e.version for e in entries if e.is_commit}
    newest = max(e.version for e in entries)
    if version > newest:
        raise VersionNotAvailableError(location.table_uri, version,
                                       earliest_recreatable(entries), newest)
    if from_checkpoint or (commits and first_missing > min(commits)):
        later = [v for v in commits if v > first_missing]
        gap_end = min(later) if later else version + 1
        raise LogGapError(location.table_uri, range(first_missing, min(gap_end, version + 1)))
    _raise_if_hint_is_stale(location, first_missing)
    raise VersionNotAvailableError(
        location.table_uri, version, earliest_recreatable(entries), newest,
        hint="The log was cleaned below that version; choose a later one.",
    )


def _raise_if_hint_is_stale(location: TableLocation, first_missing: int) -> None:
    """``_last_checkpoint`` names a checkpoint that is gone, and commits that could replace
    it are gone too: that is damage, not a cleaned log."""
    hint = location.last_checkpoint_hint()
    if hint is None or find_checkpoint(location, int(hint["version"])):
        return
    hinted = int(hint["version"])
    raise DamagedLogFileError(
        location.table_uri, hinted, "_last_checkpoint",
        f"it names the checkpoint of version {hinted}, which is not in the log, and commit "
        f"{first_missing} that would rebuild the table without it is gone too",
        remedy=f"Restore the checkpoint of version {hinted} from a backup, or read a version "
               "that another checkpoint covers.",
    )


def earliest_recreatable(entries: list[LogEntry]) -> int | None:
    """The first version whose state the log can rebuild: 0, or the oldest complete checkpoint;
    None if there is neither."""
    if any(e.is_commit and e.version == 0 for e in entries):
        return 0
    for group in _complete_checkpoints(entries):
        return group[0].version
    return None


def find_checkpoint(location: TableLocation, version: int) -> list[CheckpointFile] | None:
    """The parts of the newest complete checkpoint at or below ``version``, None if none.

    ``_last_checkpoint`` answers at once when it is at or below ``version``. Otherwise a local
    table probes classic checkpoint names downward (one stat each) before scanning the
    folder; a remote one lists from a window below ``version``, widening it until found.
    """
    hint = location.last_checkpoint_hint()
    if hint is not None and int(hint["version"]) <= version:
        found = _checkpoint_from_hint(location, hint)
        if found:
            return found
    if location.is_local:
        found = _probe_classic_checkpoint(location, version)
        if found:
            return found
        return _newest_complete(location.list_log(until_version=version))
    window = 1000
    while True:
        low = max(0, version - window)
        found = _newest_complete(location.list_log(low, until_version=version))
        if found or low == 0:
            return found
        window *= 10


def _checkpoint_from_hint(location: TableLocation, hint: Mapping[str, Any]
                          ) -> list[CheckpointFile] | None:
    version = int(hint["version"])
    v2_path = (hint.get("v2Checkpoint") or {}).get("path")
    parts = hint.get("parts")
    if v2_path:
        names = [v2_path]
    elif parts:
        names = [f"{version:020d}.checkpoint.{i:010d}.{int(parts):010d}.parquet"
                 for i in range(1, int(parts) + 1)]
    else:
        names = [f"{version:020d}.checkpoint.parquet"]
    files = [CheckpointFile.parse(name) for name in names]
    if all(f is not None and location.log_file_exists(f.name) for f in files):
        return files
    return None  # stale or odd hint: fall back to looking


def _probe_classic_checkpoint(location: TableLocation, version: int) -> list[CheckpointFile] | None:
    for candidate in range(version, max(-1, version - _LOCAL_CHECKPOINT_PROBE), -1):
        name = f"{candidate:020d}.checkpoint.parquet"
        if location.log_file_exists(name):
            return [CheckpointFile.parse(name)]
    return None


def _newest_complete(entries: list[LogEntry]) -> list[CheckpointFile] | None:
    groups = list(_complete_checkpoints(entries))
    return groups[-1] if groups else None


def _complete_checkpoints(entries: list[LogEntry]) -> Iterator[list[CheckpointFile]]:
    """Complete checkpoints in ascending version: classic, all parts of a multi-part, or v2."""
    by_version: dict[int, list[CheckpointFile]] = {}
    for entry in entries:
        parsed = CheckpointFile.parse(entry.name)
        if parsed:
            by_version.setdefault(parsed.version, []).append(parsed)
    for version in sorted(by_version):
        candidates = by_version[version]
        single = [c for c in candidates if c.parts is None]
        if single:
            yield [sorted(single, key=lambda c: c.v2_id is None)[0]]
            continue
        for parts in sorted({c.parts for c in candidates}):
            group = sorted({c.part: c for c in candidates if c.parts == parts}.values(),
                           key=lambda c: c.part)
            if len(group) == parts:
                yield group
                break


def read_checkpoint(location: TableLocation, parts: list[CheckpointFile], *,
                    with_files: bool) -> Iterator[dict[str, Any]]:
    """The actions of a checkpoint (every part; for v2, its sidecars too)."""
    columns = ["protocol", "metaData"] + (["add", "remove", "sidecar"] if with_files else ["sidecar"])
    for part in parts:
        raw = location.read_log_file(part.name)
        if raw is None:
            raise LogGapError(location.table_uri, [part.version])
        actions = (_v2_json_actions(location, part, raw) if part.name.endswith(".json")
                   else _parquet_actions(location, part.version, part.name, raw, columns))
        for action in actions:
            if "sidecar" in action:
                if with_files:
                    yield from _sidecar_actions(location, action["sidecar"], part.version)
            else:
                yield action


def _sidecar_actions(location: TableLocation, sidecar: Mapping[str, Any], version: int
                     ) -> Iterator[dict[str, Any]]:
    path = unquote(sidecar["path"])
    # relative to _delta_log/_sidecars/, or an absolute URI that lies under _delta_log/
    name = path.rpartition("/_delta_log/")[2] if "/" in path else f"_sidecars/{path}"
    raw = location.read_log_file(name)
    if raw is None:
        raise InvalidLogError(location.table_uri, version, f"checkpoint sidecar {name} is missing")
    yield from _parquet_actions(location, version, name, raw, ["add", "remove"])


def _v2_json_actions(location: TableLocation, part: CheckpointFile, raw: bytes
                     ) -> list[dict[str, Any]]:
    try:
        actions = list(parse_commit(raw)) if raw.strip() else None
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        actions = None
    if actions is None:
        raise DamagedLogFileError(location.table_uri, part.version, part.name,
                                  "the checkpoint is empty or not JSON (truncated or garbage)")
    return actions


def _parquet_actions(location: TableLocation, version: int, name: str, raw: bytes,
                     columns: list[str]) -> Iterator[dict[str, Any]]:
    """The non-null actions of the given columns of a checkpoint Parquet file.

    Struct columns are turned into Python column by column (one list per field, then zipped
    into dicts): for checkpoints of many files this is several times faster than converting
    row by row.
    """
    try:
        parquet = pq.ParquetFile(io.BytesIO(raw))
        present = [c for c in columns if c in parquet.schema_arrow.names]
        table = parquet.read(columns=present, use_threads=len(raw) > _THREADED_READ_BYTES)
    except (pa.ArrowException, OSError) as exc:
        raise DamagedLogFileError(
            location.table_uri, version, name,
            f"it is not a readable Parquet file ({len(raw)} bytes, truncated or garbage: {exc})",
        ) from exc
    for name in present:
        column = table.column(name).combine_chunks()
        actions = column.filter(column.is_valid())
        if not len(actions):
            continue
        names = [field.name for field in actions.type]
        values = [_python_values(actions.field(i)) for i in range(len(names))]
        for row in zip(*values):
            yield {name: dict(zip(names, row))}


def _python_values(array: pa.Array) -> list[Any]:
    """A field of a checkpoint action as Python values, Parquet maps as dicts (as in JSON)."""
    values = array.to_pylist()
    if pa.types.is_map(array.type):
        return [dict(v) if v is not None else None for v in values]
    if pa.types.is_struct(array.type) and any(pa.types.is_map(f.type) for f in array.type):
        maps = {f.name for f in array.type if pa.types.is_map(f.type)}
        return [None if v is None else {k: dict(x) if k in maps and x is not None else x
                                        for k, x in v.items()} for v in values]
    return values
