"""A blind append committed by writing the target's next commit file ourselves.

deltalake 1.6's handle on a table materialises every live file, so its commits cost in
proportion to the target's size (about 0.3 s a commit at 20,000 live files, growing on).
A blind append (add actions and txn records, nothing read from the target) needs none of
that: only the snapshot's protocol, metadata and txns, which :class:`.target_log.TargetLog`
reads at a cost flat in the history. The commit file is created with put-if-absent (a hard
link locally, ``If-None-Match: *`` on S3), so of writers racing for a version one wins; the
loser re-reads the newer commits and checks again, as Delta's conflict rules for a blind
append ask: its own appId's txn, and a changed protocol or metadata. Concurrent removes
cannot conflict with an append.

Targets whose protocol asks of an append no more than its files, in-commit timestamps and row
ids are committed this way (:func:`unwritable_feature`); deltalake commits the others, unless
it cannot write one of their features either (:func:`deltalake_unwritable_feature`): then the
sink refuses the target before anything is written. Checkpoints stay where deltalake puts them
(version ``v`` with ``(v + 1) % interval == 0``), made by deltalake after the commit that
reaches them.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

import obstore
from deltalake import DeltaTable
from deltalake.transaction import AddAction, Transaction

from airflow_provider_delta import __version__
from airflow_provider_delta.core.commit_times import in_commit_timestamps_enabled
from airflow_provider_delta.core.delta_log import LOG_DIR, TableLocation, commit_name
from airflow_provider_delta.core.protocol import bool_property
from airflow_provider_delta.core.row_tracking import SUSPENDED_KEY
from airflow_provider_delta.storage import deltalake_uri

log = logging.getLogger(__name__)

ENGINE = f"airflow-provider-delta/{__version__}"
CHECKPOINT_INTERVAL = 100  # Delta's default delta.checkpointInterval
# Writer features an append of Spark-written Parquet files honours by writing nothing more
# (given the metadata conditions below); any other writer feature is left to deltalake.
_APPEND_READY_FEATURES = frozenset({
    "appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns",
    "columnMapping", "identityColumns", "timestampNtz", "deletionVectors", "domainMetadata",
    "vacuumProtocolCheck", "typeWidening", "typeWidening-preview", "inCommitTimestamp",
    "rowTracking",
})
# Writer features deltalake 1.6.6 commits an append on (found by trying each): it refuses
# the others (e.g. inCommitTimestamp, rowTracking, domainMetadata, identityColumns,
# typeWidening, vacuumProtocolCheck, clustering, icebergCompatV1/V2, allowColumnDefaults).
DELTALAKE_WRITER_FEATURES = frozenset({
    "appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns",
    "columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint", "variantType",
    "variantType-preview",
})
ICT_FEATURE = "inCommitTimestamp"
ROW_TRACKING_FEATURE, ROW_TRACKING_DOMAIN = "rowTracking", "delta.rowTracking"
# The features legacy writer versions imply (Delta's "Writer Version Requirements").
_LEGACY_WRITER_FEATURES = {
    2: ("appendOnly", "invariants"), 3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"), 5: ("columnMapping",), 6: ("identityColumns",),
}
# Column metadata keys whose rules a writer must enforce on the rows it adds.
_ENFORCED_COLUMN_KEYS = ("delta.invariants", "delta.generationExpression", "delta.identity.")
# Characters deltalake percent-encodes in an add action's path (besides non-ASCII bytes).
_PATH_SAFE = "/!$&'()+,-.:;=@_~"
# Storage options that choose deltalake's own commit mechanics on S3.
_DELTALAKE_COMMIT_OPTIONS = ("locking_provider", "allow_unsafe_rename")
# What os.link answers on a file system without hard links (FAT, some FUSE and network mounts).
_NO_HARD_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV,
                            errno.EMLINK, errno.ENOSYS})


class HardLinksRefused(OSError):
    """The target's file system refused the hard link that creates a commit file."""


def writer_features(protocol: Mapping[str, Any]) -> set[str]:
    """The writer features a protocol asks for, legacy writer versions spelled out."""
    version = int(protocol.get("minWriterVersion", 1))
    if version >= 7:
        return set(protocol.get("writerFeatures") or ())
    return {f for v, names in _LEGACY_WRITER_FEATURES.items() if v <= version for f in names}


def deltalake_unwritable_feature(protocol: Mapping[str, Any]) -> str | None:
    """The first writer feature of ``protocol`` deltalake cannot commit an append on."""
    return next(iter(sorted(writer_features(protocol) - DELTALAKE_WRITER_FEATURES)), None)


def writes_in_commit_timestamps(protocol: Mapping[str, Any],
                                configuration: Mapping[str, str]) -> bool:
    """In-commit timestamps are enabled: the feature, and the property set to true."""
    return (ICT_FEATURE in writer_features(protocol)
            and in_commit_timestamps_enabled(configuration))


def assigns_row_ids(protocol: Mapping[str, Any], configuration: Mapping[str, str]) -> bool:
    """Row tracking is supported and not suspended: every add needs row ids."""
    return (ROW_TRACKING_FEATURE in writer_features(protocol)
            and not bool_property(configuration, SUSPENDED_KEY))


def unwritable_feature(protocol: Mapping[str, Any], metadata: Mapping[str, Any],
                       storage_options: Mapping[str, str] | None) -> str | None:
    """What of the target keeps this sink from committing an append itself (None: nothing):
    a writer feature that asks more than the files, or a rule the rows must be checked by."""
    for feature in sorted(writer_features(protocol) - _APPEND_READY_FEATURES):
        return feature
    configuration = metadata.get("configuration") or {}
    constraints = [key for key in configuration if key.startswith("delta.constraints.")]
    if constraints:
        return f"CHECK constraint {constraints[0]}"
    if configuration.get("delta.columnMapping.mode", "none") != "none":
        return "columnMapping"
    enforced = _enforced_column_rule(json.loads(metadata["schemaString"]))
    if enforced:
        return enforced
    for key in storage_options or {}:
        if any(option in key.lower() for option in _DELTALAKE_COMMIT_OPTIONS):
            return f"storage option {key}"
    return None


def _enforced_column_rule(kind: Any) -> str | None:
    """The first column (nested ones too) whose metadata holds a rule on its values."""
    if not isinstance(kind, dict):
        return None
    for field in kind.get("fields", []):
        keys = [k for k in (field.get("metadata") or {}) if k.startswith(_ENFORCED_COLUMN_KEYS)]
        if keys:
            return f"column {field['name']!r} ({keys[0]})"
        inner = _enforced_column_rule(field["type"])
        if inner:
            return inner
    for child in ("elementType", "keyType", "valueType"):
        inner = _enforced_column_rule(kind.get(child))
        if inner:
            return inner
    return None


def add_action(add: AddAction) -> dict[str, Any]:
    """An add action as deltalake writes it (its path percent-encoded the same way)."""
    return {"add": {"path": quote(add.path, safe=_PATH_SAFE),
                    "partitionValues": dict(add.partition_values), "size": add.size,
                    "modificationTime": add.modification_time, "dataChange": add.data_change,
                    "stats": add.stats}}


def txn_action(txn: Transaction) -> dict[str, Any]:
    action = {"appId": txn.app_id, "version": txn.version}
    if txn.last_updated is not None:
        action["lastUpdated"] = txn.last_updated
    return {"txn": action}


def blind_append_actions(adds: list[AddAction], txns: Iterable[Transaction],
                         commit_info: Mapping[str, Any], partition_by: list[str],
                         read_version: int, rows: int, *, timestamp: int | None = None,
                         in_commit_timestamp: bool = False,
                         row_ids: RowIds | None = None) -> list[dict[str, Any]]:
    """The actions of one append commit: commitInfo (first: in-commit timestamps ask it; with
    ``inCommitTimestamp`` = ``timestamp`` then), the adds (with ``row_ids``' fresh row ids and
    commit version), the txn records, the new row id high-water mark."""
    timestamp = int(time.time() * 1000) if timestamp is None else timestamp
    info = {"timestamp": timestamp, "operation": "WRITE",
            "operationParameters": {"mode": "Append", "partitionBy": json.dumps(partition_by)},
            "readVersion": read_version, "isBlindAppend": True,
            "operationMetrics": {"numFiles": len(adds), "numOutputRows": rows,
                                 "numOutputBytes": sum(a.size for a in adds)},
            "engineInfo": ENGINE, "clientVersion": ENGINE, **commit_info}
    if in_commit_timestamp:
        info["inCommitTimestamp"] = timestamp
    added = [add_action(a) for a in adds]
    tail = []
    if row_ids is not None:
        tail = row_ids.assign(added)
    return [{"commitInfo": info}, *added, *map(txn_action, txns), *tail]


class RowIds:
    """Fresh row ids and the row commit version of one commit's adds (Delta's row tracking):
    each file's ``baseRowId`` follows the high-water mark of the snapshot the commit builds on,
    by the previous files' record counts."""

    def __init__(self, high_water_mark: int, version: int):
        self.high_water_mark = high_water_mark
        self.version = version

    def assign(self, added: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Set the ids on ``added`` (add actions); the domainMetadata action of the new mark
        (none if no row got an id)."""
        mark = self.high_water_mark
        for action in added:
            add = action["add"]
            add["baseRowId"] = mark + 1
            add["defaultRowCommitVersion"] = self.version
            mark += json.loads(add["stats"])["numRecords"]
        if mark == self.high_water_mark:
            return []
        return [{"domainMetadata": {"domain": ROW_TRACKING_DOMAIN, "removed": False,
                                    "configuration": json.dumps({"rowIdHighWaterMark": mark})}}]


def put_commit(location: TableLocation, version: int, actions: list[dict[str, Any]]) -> bool:
    """Create commit ``version``; False if it exists already (another writer won it).
    Raises :class:`HardLinksRefused` on a local file system without hard links."""
    body = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions).encode()
    if location.local_root is not None:
        return _create_local(os.path.join(location.local_root, LOG_DIR), commit_name(version),
                             body)
    try:
        obstore.put(location.store, f"{LOG_DIR}/{commit_name(version)}", body, mode="create")
    except (obstore.exceptions.AlreadyExistsError, obstore.exceptions.PreconditionError):
        # Taken -- or created by this very put, whose answer was lost and whose retry found
        # it: then the commit is ours (its files must not be dropped as another run's).
        return location.read_log_file(commit_name(version)) == body
    except obstore.exceptions.BaseError as error:
        raise location.storage_error(error) from error
    return True


def _create_local(folder: str, name: str, body: bytes) -> bool:
    """Write ``folder/name`` whole or not at all, unless it exists: a hard link of a complete
    temporary file fails if the name is taken (the plain path: a local path may hold
    characters a ``file://`` URI would cut)."""
    temporary = os.path.join(folder, f"_commit_{uuid.uuid4().hex}.json.tmp")
    with open(temporary, "wb") as handle:
        handle.write(body)
    try:
        os.link(temporary, os.path.join(folder, name))
    except FileExistsError:
        return False
    except OSError as error:
        if error.errno in _NO_HARD_LINKS:
            raise HardLinksRefused(error.errno, error.strerror, folder) from error
        raise
    finally:
        os.unlink(temporary)
    return True


def checkpoint_when_due(location: TableLocation, version: int,
                        configuration: Mapping[str, str]) -> None:
    """deltalake's checkpoint at ``version`` when the interval asks for one there, and its
    log cleanup with it (as its own commits do); a failure leaves the commit in place.
    (deltalake's checkpoint keeps row ids, domain metadata and txns' ``lastUpdated``.)"""
    interval = int(configuration.get("delta.checkpointInterval", CHECKPOINT_INTERVAL))
    if (version + 1) % interval:
        return
    try:
        table = DeltaTable(deltalake_uri(location.table_uri), version=version,
                           storage_options=location.storage_options)
        table.create_checkpoint()
        if configuration.get("delta.enableExpiredLogCleanup", "true").lower() != "false":
            table.cleanup_metadata()
    except Exception as error:  # noqa: BLE001 - the commit stands; readers replay more
        log.warning("%s: checkpoint at version %s failed (the commit stands): %s",
                    location.table_uri, version, error)
