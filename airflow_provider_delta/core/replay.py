"""Rebuilding a table's state at a version: newest checkpoint at or below it, then commits.

This is our own replay rather than deltalake's because the core must name an unsupported
reader feature or a log gap precisely, read tables deltalake refuses to open (so that it can
refuse them with our errors), and find the metadata in force at an old version cheaply.
It reads classic, multi-part and v2 checkpoints (JSON or Parquet top-level file, with
sidecars) with pyarrow.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import re
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_provider_delta.core.actions import parse_commit, partition_keys, table_metadata
from airflow_provider_delta.core.arrow import combined, to_numpy
from airflow_provider_delta.core.file_table import (
    CHUNK_ROWS, blank, checkpoint_add_columns, empty_raw_actions, json_file_actions, live_adds,
    raw_checkpoint_adds,
)
from airflow_provider_delta.core.model import TableMetadata
from airflow_provider_delta.core.delta_log import (
    CheckpointFile, LogEntry, TableLocation, commit_name,
)
from airflow_provider_delta.errors import (
    DamagedLogFileError, InvalidLogError, LogGapError, TableNotFoundError,
    VersionNotAvailableError,
)
from airflow_provider_delta.storage import RangedObject

log = logging.getLogger(__name__)

# How far below a version the local probe looks for a classic checkpoint before listing.
_LOCAL_CHECKPOINT_PROBE = 1000
FILE_ACTIONS = ("add", "remove")
_PARSE_EVERY = 1 << 23  # bytes of commits whose file actions Arrow parses at a time (and holds)
_PROGRESS_EVERY = 10_000  # commits between progress log lines of a long replay
_REMOTE_READERS = 16
_REMOTE_READ_AHEAD = 256
_CHECKPOINT_READERS = min(4, os.cpu_count() or 1)  # row groups of a checkpoint read at once
_PARQUET_BUFFER = 1 << 20  # bytes of a checkpoint column read at a time


@dataclass
class LogState:
    """Protocol and metadata at ``version``; with ``files``, the file actions too."""

    version: int
    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    # the checkpoint's AddFiles as raw actions; the later commits' adds and removes as lines
    files: FileActions | None = None
    checkpoint_adds: list[pa.Table] = field(default_factory=list)
    # the actions of commit ``version`` when the replay read it (plan_changes reuses them),
    # split (see read_commit) when the replay was asked to
    last_commit: list[dict[str, Any]] | SplitCommit | None = None

    @property
    def with_files(self) -> bool:
        return self.files is not None

    def apply(self, actions: Iterable[Mapping[str, Any]], version: int) -> None:
        for action in actions:
            if "protocol" in action:
                self.protocol = action["protocol"]
            elif "metaData" in action:
                self.metadata = action["metaData"]
                if self.files is not None:
                    self.files.note(table_metadata(self.metadata, self.protocol or {}))
            elif self.files is not None and _is_file_action(action, FILE_ACTIONS):
                self.files.extend(version, json.dumps(action).encode())

    def apply_split(self, commit: SplitCommit, version: int) -> None:
        """Apply a commit read with its file actions left in its text."""
        self.apply(commit.actions, version)
        if self.files is not None:
            self.files.extend(version, commit.text)

    def live_files(self) -> Iterator[pa.Table]:
        """The live AddFiles as raw actions (see :mod:`~airflow_provider_delta.core.file_table`),
        a chunk at a time; the checkpoint's chunks leave the state as they are yielded."""
        return live_adds(self.checkpoint_adds, self.files.table())


class FileActions:
    """The AddFile and RemoveFile actions of many commits, in log order, parsed by Arrow's JSON
    reader from the commits' text, a few MiB of commits at a time: per-file work stays in
    Arrow, and one call per commit would cost more than the parsing on ranges of small
    commits."""

    def __init__(self, location: TableLocation, kinds: tuple[str, ...] = FILE_ACTIONS,
                 long_fields: tuple[str, ...] = (), vectors: bool = True):
        self.location = location
        self.kinds = kinds
        self.long_fields = long_fields  # integer fields kept as columns (json_file_actions)
        # False: deletion vectors are read in full once a noted protocol allows them (a
        # cheaper field finds any before that)
        self.vectors = vectors
        self.partition_names: dict[str, None] = {}  # of every metadata seen, in order
        self._commits: list[tuple[int, bytes]] = []
        self._bytes = 0
        self._tables: list[pa.Table] = []

    def note(self, metadata: TableMetadata) -> None:
        """Read the partition values of ``metadata``'s partition columns from now on."""
        for logical, physical, _ in partition_keys(metadata):
            self.partition_names.update({physical: None, logical: None})
        self.vectors = self.vectors or "deletionVectors" in metadata.reader_features

    def extend(self, version: int, text: bytes) -> None:
        """Take the file actions in ``text``, newline-delimited actions of commit ``version``
        (other actions in it are skipped)."""
        if not text:
            return
        self._commits.append((version, text))
        self._bytes += len(text)
        if self._bytes >= _PARSE_EVERY:
            self._parse()

    def table(self) -> pa.Table:
        """Every file action so far as raw actions."""
        self._parse()
        return (pa.concat_tables(self._tables) if self._tables
                else empty_raw_actions(self.long_fields))

    def _parse(self) -> None:
        if not self._commits:
            return
        try:
            parsed = json_file_actions(self._commits, self.partition_names, self.kinds,
                                       self.long_fields, self.vectors)
        except pa.ArrowException:  # find the commit, parsing them one by one
            parsed = pa.concat_tables([self._one_commit(*commit) for commit in self._commits])
        self._tables.append(parsed)
        self._commits, self._bytes = [], 0

    def _one_commit(self, version: int, text: bytes) -> pa.Table:
        try:
            return json_file_actions([(version, text)], self.partition_names, self.kinds,
                                     self.long_fields, self.vectors)
        except pa.ArrowException:
            actions = commit_actions(self.location, version, text)  # raises on a damaged line
            lines = [_normalized_line(a, self.kinds, self.long_fields) for a in actions
                     if _is_file_action(a, self.kinds)]
            return json_file_actions([(version, b"\n".join(lines))], self.partition_names,
                                     self.kinds, self.long_fields)


def _normalized_line(action: Mapping[str, Any], kinds: tuple[str, ...],
                     long_fields: tuple[str, ...] = ()) -> bytes:
    """A file action as a line with the fields planning reads, typed as Arrow's reader
    expects them."""
    kind = next(kind for kind in kinds if kind in action)
    values = action[kind] or {}
    kept = {"path": values.get("path"), "dataChange": values.get("dataChange", True),
            "size": int(values.get("size") or 0), "stats": values.get("stats"),
            "partitionValues": values.get("partitionValues") or {},
            "deletionVector": values.get("deletionVector") or None,
            **{name: _integer(values.get(name)) for name in long_fields}}
    return json.dumps({kind: kept}).encode()


def _integer(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass
class SplitCommit:
    """A commit whose file actions are left in its text, for :class:`FileActions`."""

    actions: list[dict[str, Any]]  # the other actions, parsed
    text: bytes  # newline-delimited actions holding the file actions

    @classmethod
    def of_actions(cls, actions: Iterable[dict[str, Any]], kinds: tuple[str, ...]) -> SplitCommit:
        """Parsed actions split so (their file actions written back as text)."""
        actions = list(actions)
        files = [json.dumps(a).encode() for a in actions if _is_file_action(a, kinds)]
        return cls([a for a in actions if not _is_file_action(a, kinds)], b"\n".join(files))


def _is_file_action(action: Mapping[str, Any], kinds: tuple[str, ...]) -> bool:
    return any(kind in action for kind in kinds)


def split_commit(location: TableLocation, version: int, raw: bytes, kinds: tuple[str, ...]
                 ) -> SplitCommit:
    """Commit ``version``'s bytes with every action but its ``kinds`` file actions (``add``,
    ``remove``) parsed; lines written as ``{"add": ...`` (or the other kinds) are not even
    parsed here. DamagedLogFileError (naming the line) if a parsed line is damaged."""
    try:
        actions = _other_actions(raw, kinds)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        actions = None
    if actions is None or not all(isinstance(a, dict) for a in actions) or blank(raw):
        commit_actions(location, version, raw)  # raises, naming the line
    return SplitCommit([a for a in actions if not _is_file_action(a, kinds)], raw)


def _other_actions(raw: bytes, kinds: tuple[str, ...]) -> list[Any]:
    """The parsed lines of ``raw`` that do not start as a ``kinds`` file action. A regular
    expression finds them, so the (many) file action lines are never split out one by one;
    text with ``\\r`` is split into lines."""
    prefixes = _file_action_prefixes(kinds)
    if b"\r" in raw:
        return [json.loads(line) for line in raw.splitlines()
                if line.strip() and not line.startswith(prefixes)]
    end = raw.find(b"\n")
    first = raw if end < 0 else raw[:end]
    lines = [] if first.startswith(prefixes) else [first]
    lines.extend(match.group(1) for match in _other_lines_pattern(kinds).finditer(raw))
    return [json.loads(line) for line in lines if line.strip()]


@functools.cache
def _file_action_prefixes(kinds: tuple[str, ...]) -> tuple[bytes, ...]:
    """How a line of each of the ``kinds`` file actions starts."""
    return tuple(b'{"%s":' % kind.encode() for kind in kinds)


@functools.cache
def _other_lines_pattern(kinds: tuple[str, ...]) -> re.Pattern[bytes]:
    """A newline, then a line that does not start as one of the ``kinds`` file actions."""
    starts = b"|".join(re.escape(prefix) for prefix in _file_action_prefixes(kinds))
    return re.compile(rb"\n(?!%s)([^\n]*)" % starts)


def read_commit(location: TableLocation, version: int, *, split: tuple[str, ...] = ()
                ) -> list[dict[str, Any]] | SplitCommit | None:
    """The actions of commit ``version`` (with ``split`` kinds of file actions: as a
    :class:`SplitCommit`), None if the commit file does not exist."""
    raw = location.read_log_file(commit_name(version))
    if raw is None:
        return None
    if split:
        return split_commit(location, version, raw, split)
    return commit_actions(location, version, raw)


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


def read_commits(location: TableLocation, versions: range, *, split: tuple[str, ...] = ()
                 ) -> Iterator[tuple[int, list[dict[str, Any]] | SplitCommit | None]]:
    """``(version, actions or None)`` in version order (``split``: see :func:`read_commit`).

    Object stores answer each GET in tens of milliseconds, so remote commits are fetched
    ``_REMOTE_READ_AHEAD`` at a time on threads; local files are read one after another.
    """
    if location.is_local:
        for version in versions:
            yield version, read_commit(location, version, split=split)
        return
    with ThreadPoolExecutor(max_workers=_REMOTE_READERS) as pool:
        for low in range(versions.start, versions.stop, _REMOTE_READ_AHEAD):
            window = range(low, min(low + _REMOTE_READ_AHEAD, versions.stop))
            yield from zip(window, pool.map(lambda v: read_commit(location, v, split=split),
                                            window))


def replay(location: TableLocation, version: int, *, with_files: bool = False,
           split_last: tuple[str, ...] = ()) -> LogState:
    """The state at ``version``: checkpoint at or below it plus the commits after it.
    ``split_last`` (without ``with_files``) keeps commit ``version`` as a
    :class:`SplitCommit` of those kinds, its file actions unparsed, for a plan that reads on.

    Raises VersionNotAvailableError if the log cannot recreate ``version`` (log cleaned
    below it, or beyond the latest commit), LogGapError if a commit after the checkpoint is
    missing, InvalidLogError if no protocol or metadata is found.
    """
    state, checkpoint, damaged = _checkpoint_state(location, version, with_files)
    first_commit = checkpoint[0].version + 1 if checkpoint else 0
    split = FILE_ACTIONS if with_files else ()
    commits = itertools.chain(
        read_commits(location, range(first_commit, version), split=split),
        read_commits(location, range(max(first_commit, version), version + 1),
                     split=split or split_last))
    for commit_version, actions in commits:
        if actions is None and damaged is not None:
            raise _without_fallback(damaged, version, commit_version)
        if actions is None:
            raise_unreadable(location, version, commit_version, from_checkpoint=bool(checkpoint))
        if with_files:
            state.apply_split(actions, commit_version)
        else:
            state.last_commit = actions
            state.apply(actions.actions if isinstance(actions, SplitCommit) else actions,
                        commit_version)
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
        state = _empty_state(location, version, with_files)
        try:
            log.debug("%s: replaying from checkpoint %s", location.table_uri, checkpoint[0].name)
            read_checkpoint(location, checkpoint, state)
            return state, checkpoint, damaged
        except DamagedLogFileError as err:
            log.warning("%s Replaying from an older checkpoint or from the commits instead.", err)
            damaged = damaged or err
            below = checkpoint[0].version - 1
    return _empty_state(location, version, with_files), None, damaged


def _empty_state(location: TableLocation, version: int, with_files: bool) -> LogState:
    return LogState(version, files=FileActions(location) if with_files else None)


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


def read_checkpoint(location: TableLocation, parts: list[CheckpointFile], state: LogState) -> None:
    """Apply a checkpoint (every part; for v2, its sidecars too) to an empty ``state``.

    Its AddFiles are read column-wise into ``state.checkpoint_adds``; its RemoveFiles are
    tombstones, which no live file of a valid checkpoint shares a key with.
    """
    columns = ["protocol", "metaData", "sidecar"] + (["add"] if state.with_files else [])
    for part in parts:
        for action in checkpoint_part_actions(location, part, columns, state):
            if "sidecar" in action and state.with_files:
                _read_sidecar(location, action["sidecar"], part.version, state)
            elif "sidecar" not in action and "remove" not in action:  # not a tombstone
                state.apply([action], part.version)


def checkpoint_part_actions(location: TableLocation, part: CheckpointFile, columns: list[str],
                            state: LogState | None = None) -> list[dict[str, Any]]:
    """The actions of ``columns`` in one checkpoint part (a v2 JSON part: all of them); its
    ``add`` column goes to ``state`` (see :func:`_parquet_actions`)."""
    source = location.log_file_source(part.name)
    if source is None:
        raise LogGapError(location.table_uri, [part.version])
    if part.name.endswith(".json"):
        return _v2_json_actions(location, part, _bytes(source))
    return _parquet_actions(location, part.version, part.name, source, columns, state)


def _read_sidecar(location: TableLocation, sidecar: Mapping[str, Any], version: int,
                  state: LogState) -> None:
    path = unquote(sidecar["path"])
    # relative to _delta_log/_sidecars/, or an absolute URI that lies under _delta_log/
    name = path.rpartition("/_delta_log/")[2] if "/" in path else f"_sidecars/{path}"
    source = location.log_file_source(name)
    if source is None:
        raise InvalidLogError(location.table_uri, version, f"checkpoint sidecar {name} is missing")
    _parquet_actions(location, version, name, source, ["add"], state)


def _bytes(source: str | bytes | RangedObject) -> bytes:
    if isinstance(source, bytes):
        return source
    if isinstance(source, RangedObject):
        return source.reopened().read()
    with open(source, "rb") as handle:
        return handle.read()


def _size(source: str | bytes | RangedObject) -> int:
    if isinstance(source, RangedObject):
        return source.size
    return len(source) if isinstance(source, bytes) else os.path.getsize(source)


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


def _parquet_actions(location: TableLocation, version: int, name: str,
                     source: str | bytes | RangedObject,
                     columns: list[str], state: LogState | None) -> list[dict[str, Any]]:
    """The non-null actions of the given columns of a checkpoint Parquet file.

    ``add`` is read row group by row group, only the fields planning needs, into
    ``state.checkpoint_adds``; the other (few) actions are returned as Python dicts. Row
    groups whose statistics say a column is all null are not read for it.
    """
    try:
        parquet = _parquet_file(source)
        names = parquet.schema_arrow.names
        small = [c for c in columns if c in names and c != "add"]
        groups = sorted({g for c in small for g in _row_groups_holding(parquet, c)})
        table = _rows_holding(parquet, groups, small)
        if "add" in columns and "add" in names:
            state.checkpoint_adds.extend(_checkpoint_adds(parquet, source, version))
    except (pa.ArrowException, OSError) as exc:
        raise DamagedLogFileError(
            location.table_uri, version, name,
            f"it is not a readable Parquet file ({_size(source)} bytes, truncated or garbage: "
            f"{exc})",
        ) from exc
    actions = []
    for column_name in small:
        column = table.column(column_name).combine_chunks()
        present = column.filter(column.is_valid())
        maps = {f.name for f in present.type if pa.types.is_map(f.type)}
        actions.extend({column_name: _with_dicts(action, maps)} for action in present.to_pylist())
    return actions


def _rows_holding(parquet: pq.ParquetFile, groups: list[int], columns: list[str]) -> pa.Table:
    """The rows of ``groups`` where one of ``columns`` is not null. A checkpoint's protocol
    and metadata are two rows among its files' (1M null metadata structs read at once: 136
    MiB), mostly the first ones: their first leaves say where they are, and the columns are
    read a chunk at a time up to there."""
    schema = pa.schema([parquet.schema_arrow.field(name) for name in columns])
    chunks = [pa.Table.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)]
    last = max((_last_row_holding(parquet, groups, name) for name in columns), default=-1)
    rows = 0
    for batch in parquet.iter_batches(CHUNK_ROWS, row_groups=groups, columns=columns,
                                      use_threads=False) if last >= 0 else ():
        present = functools.reduce(pc.or_, [column.is_valid() for column in batch.columns])
        chunks.append(pa.Table.from_batches([batch.filter(present)], schema))
        rows += len(batch)
        if rows > last:
            break
    return pa.concat_tables(chunks)


def _last_row_holding(parquet: pq.ParquetFile, groups: list[int], column: str) -> int:
    """The last row of ``groups`` where ``column`` is not null (-1: none), by its first leaf."""
    leaf = _first_leaf(parquet, column)
    values = parquet.read_row_groups(groups, columns=[leaf], use_threads=False).column(0)
    for _ in leaf.split(".")[1:]:
        values = pc.struct_field(values, [0])
    found = pc.indices_nonzero(combined(values.is_valid()))
    return to_numpy(found)[-1] if len(found) else -1


def _parquet_file(source: str | bytes | RangedObject) -> pq.ParquetFile:
    """A checkpoint file read page by page: pyarrow's default (pre-buffering) reads every
    column chunk it is asked for whole, and deltalake writes a checkpoint's adds as one
    uncompressed row group (the statistics alone: 250 MiB at 1M files). A remote one is read
    by a request per column chunk, each streamed (each reader its own copy)."""
    if isinstance(source, RangedObject):
        remote = source.reopened()
        parquet = pq.ParquetFile(remote, pre_buffer=False, buffer_size=_PARQUET_BUFFER)
        remote.spans = _column_chunk_spans(parquet.metadata)
        return parquet
    return pq.ParquetFile(pa.BufferReader(source) if isinstance(source, bytes) else source,
                          pre_buffer=False, buffer_size=_PARQUET_BUFFER)


def _column_chunk_spans(metadata: pq.FileMetaData) -> list[tuple[int, int]]:
    """Where each column chunk lies in the file, as pyarrow reads it: from its dictionary
    page (if any) on, ``total_compressed_size`` bytes."""
    spans = []
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in range(row_group.num_columns):
            chunk = row_group.column(index)
            start = chunk.data_page_offset
            if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
                start = chunk.dictionary_page_offset
            spans.append((start, start + chunk.total_compressed_size))
    return sorted(spans)


def _first_leaf(parquet: pq.ParquetFile, column: str) -> str:
    """The path of ``column``'s first leaf (a null struct is null in every leaf)."""
    schema = parquet.metadata.schema
    return next(schema.column(i).path for i in range(len(schema))
                if schema.column(i).path.startswith(column + "."))


def _row_groups_holding(parquet: pq.ParquetFile, column: str) -> list[int]:
    """The row groups where ``column`` may have a non-null value, by its first leaf's
    null count (a null struct is null in every leaf)."""
    schema = parquet.metadata.schema
    path = _first_leaf(parquet, column)
    leaf = next(i for i in range(len(schema)) if schema.column(i).path == path)
    groups = []
    for group in range(parquet.metadata.num_row_groups):
        meta = parquet.metadata.row_group(group)
        stats = meta.column(leaf).statistics
        if stats is None or not stats.has_null_count or stats.null_count < meta.num_rows:
            groups.append(group)
    return groups


def _checkpoint_adds(parquet: pq.ParquetFile, source: str | bytes | RangedObject, version: int
                     ) -> list[pa.Table]:
    """The checkpoint's AddFiles as raw actions, ``CHUNK_ROWS`` at a time (their statistics,
    read only to count rows, are the biggest thing a checkpoint holds: each chunk's are
    dropped once counted); row groups read and converted on ``_CHECKPOINT_READERS`` threads
    (Arrow releases the GIL), each with its own reader."""
    fields = checkpoint_add_columns(parquet.schema_arrow.field("add").type)

    def read(group: int) -> list[pa.Table]:
        own = _parquet_file(source)
        batches = own.iter_batches(CHUNK_ROWS, row_groups=[group], columns=fields,
                                   use_threads=False)
        return [raw_checkpoint_adds(batch.column("add"), version) for batch in batches]

    groups = _row_groups_holding(parquet, "add")
    if len(groups) < 2:
        return [chunk for group in groups for chunk in read(group)]
    with ThreadPoolExecutor(max_workers=_CHECKPOINT_READERS) as pool:
        return [chunk for chunks in pool.map(read, groups) for chunk in chunks]


def _with_dicts(action: dict[str, Any], maps: set[str]) -> dict[str, Any]:
    """A checkpoint action as JSON gives it: its Parquet maps (lists of pairs) as dicts."""
    return {key: dict(value) if key in maps and value is not None else value
            for key, value in action.items()}
