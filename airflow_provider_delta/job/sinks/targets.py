"""Targets a sink refuses before anything is written: the source itself, a file, a folder of
files that is no Delta table."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

import obstore
from obstore.exceptions import NotFoundError

from airflow_provider_delta.errors import SinkTargetError
from airflow_provider_delta.job.sinks.blind_append import deltalake_unwritable_feature
from airflow_provider_delta.storage import (
    list_files, local_path, normalised_location, open_store, split_uri, to_uri,
)

# Where the delta sink stages a batch's files inside its target before committing them.
STAGING_FOLDER = "airflow_staging"
SOURCE_AS_TARGET_FIX = "Give a target path other than the source table's."
DELTA_SPARK_FIX = 'Set sink="delta-spark" (Delta\'s own writer; Delta\'s jars on the cluster)'
# deltalake 1.6 decodes such an escape in a local table's path once more on reading its log.
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


def refuse_source_as_target(source_uri: str, target: str) -> None:
    """A target at the source's own location would append the source's rows to itself."""
    if normalised_location(source_uri) == normalised_location(target):
        raise SinkTargetError(
            to_uri(target), f"it is the source table {source_uri}: every row would be "
            "appended to the table it came from", SOURCE_AS_TARGET_FIX)


def refuse_delta_target(source_uri: str, target_uri: str, storage_options: dict[str, str] | None,
                        table_version: Callable[[], int | None]) -> None:
    """A Delta sink's target: not the source's location, not a file, not a folder of files of
    another kind (``table_version``: the Delta table's version there, None if none; asked after
    the file check, as reading a file's log fails)."""
    refuse_source_as_target(source_uri, target_uri)
    refuse_escape_in_local_path(target_uri)
    refuse_file_target(target_uri, storage_options)
    if table_version() is None:
        refuse_non_delta_folder(target_uri, storage_options)


def refuse_unwritable_target(target_uri: str, protocol: dict, own_commit_blocker: str | None,
                             merge: bool = False) -> None:
    """A target that deltalake cannot commit to, where the delta sink's own commit cannot
    either (``own_commit_blocker``: why not; the merge sink has only deltalake's commit)."""
    feature = deltalake_unwritable_feature(protocol)
    if feature is None or (own_commit_blocker is None and not merge):
        return
    own = "" if merge else (f", and the delta sink's own commit cannot write this target "
                            f"({own_commit_blocker})")
    if merge:
        fix = ("Merge into a target without that feature, or drop it from this one "
               "(ALTER TABLE ... DROP FEATURE, with Delta's engine).")
    elif own_commit_blocker == feature:
        fix = f"{DELTA_SPARK_FIX}."
    else:
        fix = (f"{DELTA_SPARK_FIX}; or remove what keeps the own commit off the target "
               f"({own_commit_blocker}).")
    raise SinkTargetError(
        target_uri, f"its protocol has table feature {feature!r}, which deltalake (which commits "
        f"{'merges' if merge else 'appends to such targets'}) cannot write{own}", fix)


def refuse_escape_in_local_path(target_uri: str) -> None:
    """A local Delta target whose path holds ``%`` and two hex digits: deltalake would write
    its first commit there and then look for it where the escape is decoded (``%41``: ``A``)."""
    path = local_path(target_uri)
    escape = _ESCAPE.search(path) if path is not None else None
    if escape is not None:
        raise SinkTargetError(
            target_uri, f"its path holds {escape.group()!r}, which deltalake reads as the "
            f"escaped character {chr(int(escape.group()[1:], 16))!r} and so looks for the "
            "table's log in another folder",
            "Give a target folder whose path has no '%' followed by two hex digits.")


def refuse_source_table_id(target_uri: str, target_table_id: str | None, source_uri: str,
                           source_table_id: str) -> None:
    """A target that is the source table under another name (the same table id)."""
    if target_table_id == source_table_id:
        raise SinkTargetError(
            target_uri, f"it is the source table {source_uri} (same table id "
            f"{source_table_id}): every row would be appended to the table it came from",
            SOURCE_AS_TARGET_FIX)


def refuse_file_target(target_uri: str, storage_options: dict[str, str] | None) -> None:
    if _is_object(target_uri, storage_options):
        raise SinkTargetError(target_uri, "it is a file, not a folder",
                              "Give a folder path as target: a new or empty one, or a Delta table.")


def refuse_non_delta_folder(target_uri: str, storage_options: dict[str, str] | None) -> None:
    """A target that is no Delta table yet must be a new or empty folder (staged files of an
    attempt that never committed are ours and allowed)."""
    stray = _first_foreign_file(target_uri, storage_options)
    if stray is not None:
        raise SinkTargetError(
            target_uri, f"it is a folder of files that are not a Delta table (e.g. {stray}); "
            "the delta sink would create a _delta_log beside them and leave them untracked "
            "(a VACUUM would delete them)",
            "Give a new path or an empty folder as target, or convert the folder to a Delta "
            "table first (e.g. deltalake's convert_to_deltalake).")


def _is_object(uri: str, storage_options: dict[str, str] | None) -> bool:
    if uri.startswith("file://"):
        return os.path.isfile(uri[len("file://"):])
    folder, name = split_uri(uri)
    try:
        obstore.head(open_store(folder, storage_options), name)
    except (NotFoundError, FileNotFoundError):
        return False
    return True


def _first_foreign_file(uri: str, storage_options: dict[str, str] | None) -> str | None:
    """The first file under ``uri`` that neither a Delta log nor our staging explains."""
    if uri.startswith("file://") and not os.path.isdir(uri[len("file://"):]):
        return None  # listing through obstore would create the folder
    for meta in list_files(uri, "", storage_options):
        if meta["path"].split("/")[0] not in (STAGING_FOLDER, "_delta_log"):
            return meta["path"]
    return None
