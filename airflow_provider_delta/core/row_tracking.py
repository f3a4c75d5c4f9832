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

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_delta.core.arrow import from_numpy, nulls, to_numpy
from airflow_provider_delta.core.protocol import bool_property

log = logging.getLogger(__name__)

FEATURE = "rowTracking"
ENABLE_KEY = "delta.enableRowTracking"
SUSPENDED_KEY = "delta.rowTrackingSuspended"
ROW_ID_COLUMN_KEY = "delta.rowTracking.materializedRowIdColumnName"
ROW_COMMIT_VERSION_COLUMN_KEY = "delta.rowTracking.materializedRowCommitVersionColumnName"
PRESERVED_TAG = "delta.rowTracking.preserved"
# the file actions' fields that row tracking adds (parsed with the log's other fields)
LOG_FIELDS = ("baseRowId", "defaultRowCommitVersion")
# the file table's columns for them (null where a file has none or its commit does not qualify)
BASE_ROW_ID, DEFAULT_ROW_COMMIT_VERSION = "base_row_id", "default_row_commit_version"


@dataclass(frozen=True)
class MaterializedColumns:
    """The physical names of the hidden columns holding preserved row ids and versions."""

    row_id: str
    row_commit_version: str


def materialized_columns(protocol: Mapping[str, Any], configuration: Mapping[str, str]
                         ) -> MaterializedColumns | None:
    """The materialized columns where row tracking is enabled, else None."""
    enabled = (FEATURE in (protocol.get("writerFeatures") or ())
               and bool_property(configuration, ENABLE_KEY)
               and not bool_property(configuration, SUSPENDED_KEY))
    names = configuration.get(ROW_ID_COLUMN_KEY), configuration.get(ROW_COMMIT_VERSION_COLUMN_KEY)
    return MaterializedColumns(*names) if enabled and all(names) else None


@dataclass
class RowTrackingLog:
    """The commits of a feed's range that have row tracking enabled (their materialized
    columns), and why the others have not."""

    columns: dict[int, MaterializedColumns] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)  # version -> reason

    def take(self, version: int, protocol: Mapping[str, Any], configuration: Mapping[str, str],
             actions: list[dict[str, Any]]) -> None:
        """Note commit ``version`` (its non-file ``actions``)."""
        columns = materialized_columns(protocol, configuration)
        if columns is None:
            self.refused[version] = "row tracking is not enabled (delta.enableRowTracking)"
            return
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if not bool_property(info.get("tags") or {}, PRESERVED_TAG, default=True):
            self.refused[version] = f"its writer did not preserve row ids ({PRESERVED_TAG})"
            return
        if info.get("operation") == "RESTORE":  # changed rows come back with older versions
            self.refused[version] = "RESTORE brings rows back with their earlier row versions"
            return
        self.columns[version] = columns

    def fields_of(self, changes: pa.Table, rewrites: set[int]) -> tuple[pa.Table, set[int]]:
        """``changes`` (a feed's change files, raw, with their actions' :data:`LOG_FIELDS`)
        with ``base_row_id`` and ``default_row_commit_version`` for the files of the
        ``rewrites`` (versions of copy-on-write commits) that can be read by row id (null for
        the others), and which these are; logs why the others cannot."""
        candidates = sorted(rewrites & self.columns.keys())
        versions = to_numpy(changes.column("version"))
        fields = [changes.column(name) for name in LOG_FIELDS]
        missing = np.isin(versions, candidates) & np.logical_or.reduce(
            [to_numpy(values.is_null()) for values in fields])
        lacking = np.unique(versions[missing]).tolist()
        for version in lacking:
            self.refused[version] = "a changed file has no baseRowId or defaultRowCommitVersion"
        tracked = set(candidates) - set(lacking)
        self._log_refused(rewrites - tracked)
        kept = from_numpy(np.isin(versions, sorted(tracked)))
        none = nulls(pa.int64(), len(versions))
        for name, values in zip((BASE_ROW_ID, DEFAULT_ROW_COMMIT_VERSION), fields):
            changes = changes.append_column(name, pc.if_else(kept, values, none))
        return changes, tracked

    def _log_refused(self, versions: set[int]) -> None:
        reasons: dict[str, list[int]] = {}
        for version in sorted(versions):
            reasons.setdefault(self.refused.get(version, "unknown"), []).append(version)
        for reason, listed in reasons.items():
            log.info("Change feed: copy-on-write version(s) %s are compared row by row, not by "
                     "row id: %s", ", ".join(map(str, listed)), reason)


# -- removed rows to report, from runs of row ids ----------------------------------------------

@dataclass(frozen=True)
class ReportedRows:
    """Rows of removed entries (files, or a file's newly masked rows) that a rewrite did not
    copy, by entry: their positions in the file and whether each is an update's old image."""

    entry: np.ndarray
    row_index: np.ndarray
    preimage: np.ndarray


def entries_with_gaps(runs: pa.Table) -> np.ndarray:
    """The entries with a group of rows (same ``entry``, ``offset`` and ``run``) whose
    positions are not consecutive: two runs of ids that share an offset (a rewrite may copy
    ``0..9`` to positions 0-9 and ``20..29`` to 20-29 of one file) or rows a deletion vector
    masks. Their runs must be told apart by position (``run``) before
    :func:`reported_removed_rows` can use them."""
    whole = _whole_runs(runs)
    return np.unique(to_numpy(whole["entry"])[_gaps(whole)])


def _whole_runs(runs: pa.Table) -> pa.Table:
    return runs.group_by(["entry", "offset", "run"]).aggregate(
        [("first", "min"), ("last", "max"), ("rows", "sum")])


def _gaps(whole: pa.Table) -> np.ndarray:
    """Whether each group of :func:`_whole_runs` has fewer rows than positions it spans."""
    span = to_numpy(whole["last_max"]) - to_numpy(whole["first_min"]) + 1
    return to_numpy(whole["rows_sum"]) != span


def reported_removed_rows(runs: pa.Table, removed: np.ndarray, versions: np.ndarray
                          ) -> ReportedRows | None:
    """The removed rows of copy-on-write commits that are deletes or update preimages, found
    from runs of row ids; None when a run is not whole (see :func:`entries_with_gaps`).

    ``runs`` has a row per group of rows of an entry whose id minus position is ``offset``,
    told apart by ``run`` where such rows are not consecutive: ``entry``, ``offset``, ``run``,
    ``updated`` (the position of an updated row, a group of its own; null for the others),
    ``first`` and ``last`` position, ``rows``. ``removed[e]`` says whether entry ``e`` is a
    removed one, ``versions[e]`` its commit. Ids come in ranges (copies keep theirs and their
    order), so per commit the removed ids not among the added ones are found by ranges, not
    id by id; an updated id gives its removed row as preimage.
    """
    whole = _whole_runs(runs)
    if np.any(_gaps(whole)):
        return None
    entry, offset = to_numpy(whole["entry"]), to_numpy(whole["offset"])
    low, high = offset + to_numpy(whole["first_min"]), offset + to_numpy(whole["last_max"])
    updated = runs.filter(pc.is_valid(runs["updated"]))
    updated_ids = to_numpy(updated["offset"]) + to_numpy(updated["updated"])
    updated_versions = versions[to_numpy(updated["entry"])]
    parts = []
    for version in np.unique(versions[entry]).tolist():
        side = versions[entry] == version
        gone, kept = side & removed[entry], side & ~removed[entry]
        ids = _ids_of(*_difference(low[gone], high[gone], low[kept], high[kept]))
        parts.append(_positions(ids, False, entry[gone], offset[gone], low[gone], high[gone]))
        parts.append(_positions(updated_ids[updated_versions == version], True, entry[gone],
                                offset[gone], low[gone], high[gone]))
    dtypes = (np.int64, np.int64, bool)
    return ReportedRows(*(np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, dtype)
                          for i, dtype in enumerate(dtypes)))


def _difference(low: np.ndarray, high: np.ndarray, other_low: np.ndarray,
                other_high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The id ranges (inclusive) of disjoint ranges ``low..high`` not in disjoint
    ``other_low..other_high``."""
    points = np.unique(np.concatenate([low, high + 1, other_low, other_high + 1]))
    starts, ends = points[:-1], points[1:] - 1
    inside = _cover(starts, low, high) & ~_cover(starts, other_low, other_high)
    return starts[inside], ends[inside]


def _cover(points: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Whether each point lies in one of the disjoint ranges ``low..high``."""
    return (np.searchsorted(np.sort(low), points, "right")
            - np.searchsorted(np.sort(high + 1), points, "right")) > 0


def _ids_of(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    lengths = ends - starts + 1
    return np.arange(lengths.sum()) + np.repeat(starts - np.cumsum(lengths) + lengths, lengths)


def _positions(ids: np.ndarray, preimage: bool, entry: np.ndarray, offset: np.ndarray,
               low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, ...]:
    """The entries and positions of the ``ids`` that lie in the removed ranges."""
    order = np.argsort(low)
    at = order[np.maximum(np.searchsorted(low[order], ids, "right") - 1, 0)] if len(low) else (
        np.zeros(len(ids), np.int64))
    inside = (ids >= low[at]) & (ids <= high[at]) if len(low) else np.zeros(len(ids), bool)
    at, ids = at[inside], ids[inside]
    return entry[at], ids - offset[at], np.full(len(ids), preimage)
