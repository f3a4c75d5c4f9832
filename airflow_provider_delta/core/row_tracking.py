"""Row tracking in a change feed: which copy-on-write commits can be read by row id.

A table with row tracking gives every row a stable id and the version that last inserted or
updated it (PROTOCOL.md, "Row Tracking"). Within a commit that rewrites files, a removed row and
an added row with the same id are one logical row, copied unless the commit wrote it (its row
commit version is then the commit's). So such a commit's changes follow from the ids alone,
with nothing compared column by column (:mod:`~airflow_provider_delta.spark.row_id_changes`);
the other copy-on-write commits keep the netting diff.

A commit qualifies when row tracking is enabled at its version (the ``rowTracking`` writer
feature, ``delta.enableRowTracking`` and not ``delta.rowTrackingSuspended``, both materialized
column names set), its writer did not say it lost ids (``delta.rowTracking.preserved``
false), it is not a RESTORE, and each of its changed files carries ``baseRowId`` and
``defaultRowCommitVersion``.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from airflow_provider_delta.core.arrow import from_numpy, scalar, to_numpy

log = logging.getLogger(__name__)

FEATURE = "rowTracking"
ENABLE_KEY = "delta.enableRowTracking"
SUSPENDED_KEY = "delta.rowTrackingSuspended"
ROW_ID_COLUMN_KEY = "delta.rowTracking.materializedRowIdColumnName"
ROW_COMMIT_VERSION_COLUMN_KEY = "delta.rowTracking.materializedRowCommitVersionColumnName"
PRESERVED_TAG = "delta.rowTracking.preserved"
# the file table's columns for them (null where a file has none or its commit does not qualify)
BASE_ROW_ID, DEFAULT_ROW_COMMIT_VERSION = "base_row_id", "default_row_commit_version"
_FIELDS = ("baseRowId", "defaultRowCommitVersion")
# the file action behind each kind of change file
_ACTION_OF_KIND = {"insert": "add", "vector": "add", "delete": "remove"}


@dataclass(frozen=True)
class MaterializedColumns:
    """The physical names of the hidden columns holding preserved row ids and versions."""

    row_id: str
    row_commit_version: str


def materialized_columns(protocol: Mapping[str, Any], configuration: Mapping[str, str]
                         ) -> MaterializedColumns | None:
    """The materialized columns where row tracking is enabled, else None."""
    enabled = (FEATURE in (protocol.get("writerFeatures") or ())
               and _true(configuration, ENABLE_KEY) and not _true(configuration, SUSPENDED_KEY))
    names = configuration.get(ROW_ID_COLUMN_KEY), configuration.get(ROW_COMMIT_VERSION_COLUMN_KEY)
    return MaterializedColumns(*names) if enabled and all(names) else None


def _true(configuration: Mapping[str, str], key: str) -> bool:
    return str(configuration.get(key, "false")).lower() == "true"


@dataclass
class RowTrackingLog:
    """The commits of a feed's range that have row tracking enabled: their file actions' text
    (to read the two row-tracking fields of the few that rewrite files) and materialized
    columns; and why the others have not."""

    texts: dict[int, bytes] = field(default_factory=dict)
    columns: dict[int, MaterializedColumns] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)  # version -> reason

    def take(self, version: int, protocol: Mapping[str, Any], configuration: Mapping[str, str],
             actions: list[dict[str, Any]], text: bytes) -> None:
        """Note commit ``version`` (its non-file ``actions`` and file actions' ``text``)."""
        columns = materialized_columns(protocol, configuration)
        if columns is None:
            self.refused[version] = "row tracking is not enabled (delta.enableRowTracking)"
            return
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if str((info.get("tags") or {}).get(PRESERVED_TAG, "true")).lower() == "false":
            self.refused[version] = f"its writer did not preserve row ids ({PRESERVED_TAG})"
            return
        if info.get("operation") == "RESTORE":  # changed rows come back with older versions
            self.refused[version] = "RESTORE brings rows back with their earlier row versions"
            return
        self.columns[version] = columns
        if b'"remove"' in text:  # only a commit that removes files can be a rewrite
            self.texts[version] = text

    def fields_of(self, changes: pa.Table, rewrites: set[int]) -> tuple[pa.Table, set[int]]:
        """``changes`` (a feed's change files, raw) with their ``base_row_id`` and
        ``default_row_commit_version``, and which of the ``rewrites`` (versions of
        copy-on-write commits) can be read by row id; logs why the others cannot."""
        candidates = sorted(rewrites & self.texts.keys())
        fields = _row_fields(changes, {v: self.texts[v] for v in candidates})
        versions = to_numpy(changes.column("version"))
        missing = (to_numpy(fields[0].is_null()) | to_numpy(fields[1].is_null())) & np.isin(
            versions, candidates)
        for version in np.unique(versions[missing]).tolist():
            self.refused[version] = "a changed file has no baseRowId or defaultRowCommitVersion"
        tracked = set(candidates) - set(np.unique(versions[missing]).tolist())
        self._log_refused(rewrites - tracked)
        return (changes.append_column(BASE_ROW_ID, fields[0])
                .append_column(DEFAULT_ROW_COMMIT_VERSION, fields[1]), tracked)

    def _log_refused(self, versions: set[int]) -> None:
        reasons: dict[str, list[int]] = {}
        for version in sorted(versions):
            reasons.setdefault(self.refused.get(version, "unknown"), []).append(version)
        for reason, listed in reasons.items():
            log.info("Change feed: copy-on-write version(s) %s are compared row by row, not by "
                     "row id: %s", ", ".join(map(str, listed)), reason)


def _row_fields(changes: pa.Table, texts: Mapping[int, bytes]) -> tuple[pa.Array, pa.Array]:
    """``baseRowId`` and ``defaultRowCommitVersion`` of each change file of ``texts``'
    commits (null for the others), found by version, action and path as the log spells it."""
    empty = pa.nulls(changes.num_rows, pa.int64())
    if not texts:
        return empty, empty
    actions = _file_actions(texts)
    wanted = _keys(changes.column("version"), _actions_of(changes.column("kind")),
                   changes.column("path"))
    at = pc.index_in(wanted, value_set=_keys(actions["version"], actions["action"],
                                             actions["path"]))
    return tuple(actions[name].take(at) for name in _FIELDS)


def _actions_of(kinds: pa.ChunkedArray) -> pa.Array:
    """The file action behind each change file's kind (``cdc`` files have none)."""
    names = list(_ACTION_OF_KIND)
    at = pc.index_in(kinds, value_set=pa.array(names))
    return pa.array([*_ACTION_OF_KIND.values()]).take(at)


def _keys(versions: Any, actions: Any, paths: Any) -> pa.Array:
    return pc.binary_join_element_wise(pc.cast(versions, pa.string()), actions, paths,
                                       scalar("\x00"))


def _file_actions(texts: Mapping[int, bytes]) -> dict[str, pa.Array]:
    """The add and remove actions of the commits: version, action, path and the two fields."""
    action_type = pa.struct([("path", pa.string()), *((name, pa.int64()) for name in _FIELDS)])
    columns: dict[str, list[pa.Array]] = {k: [] for k in ("version", "action", "path", *_FIELDS)}
    for version, text in texts.items():
        table = pj.read_json(io.BytesIO(text), parse_options=pj.ParseOptions(
            explicit_schema=pa.schema([("add", action_type), ("remove", action_type)]),
            unexpected_field_behavior="ignore"))
        for action in ("add", "remove"):
            values = table.column(action).combine_chunks()
            values = values.filter(values.is_valid())
            columns["version"].append(from_numpy(np.full(len(values), version, np.int64)))
            columns["action"].append(pa.array([action] * len(values), pa.string()))
            for name in ("path", *_FIELDS):
                columns[name].append(values.field(name))
    return {name: pa.concat_arrays(parts) for name, parts in columns.items()}
