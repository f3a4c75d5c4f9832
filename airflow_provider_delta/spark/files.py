"""Byte-level access to a table's data and deletion-vector files, local or in an object store.

Paths are absolute decoded URIs as the plan holds them (``file:///t/a b/x.parquet``,
``s3://bucket/t/x.parquet``). Local files go through ``os``; object stores through obstore,
with the table's storage options.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import obstore
from obstore.store import from_url

from airflow_provider_delta.core.storage import split_storage_options
from airflow_provider_delta.errors import TransientStorageError

log = logging.getLogger(__name__)

_HEAD_THREADS = 16  # object-store HEAD requests are latency-bound


def local_file_of(uri: str) -> str | None:
    """The local path of a decoded ``file:`` URI (or a plain path), else None.

    Split by hand: a decoded path may hold ``#`` or ``?``, which ``urlparse`` would cut off.
    """
    if uri.startswith("file://"):
        return uri[len("file://"):]
    if uri.startswith("file:"):
        return uri[len("file:"):]
    return None if "://" in uri else uri


def missing_files(
    uris: Iterable[str], table_uri: str, storage_options: dict[str, str] | None
) -> list[str]:
    """The URIs among ``uris`` that do not exist, in their order."""
    uris = list(uris)
    local = [u for u in uris if local_file_of(u) is not None]
    remote = [u for u in uris if local_file_of(u) is None]
    gone = {u for u in local if not os.path.isfile(local_file_of(u))}
    if remote:
        log.info("%s: checking %d data files exist", table_uri, len(remote))
        with ThreadPoolExecutor(_HEAD_THREADS) as pool:
            found = pool.map(lambda u: _remote_exists(u, table_uri, storage_options), remote)
            gone.update(u for u, ok in zip(remote, found) if not ok)
    return [u for u in uris if u in gone]


def read_range(
    uri: str, start: int, length: int, table_uri: str, storage_options: dict[str, str] | None
) -> bytes:
    """``length`` bytes of ``uri`` from ``start``; FileNotFoundError if it does not exist."""
    path = local_file_of(uri)
    if path is not None:
        with open(path, "rb") as handle:
            handle.seek(start)
            return handle.read(length)
    store, key = _store_and_key(uri, _frozen(storage_options))
    try:
        return bytes(obstore.get_range(store, key, start=start, length=length))
    except FileNotFoundError:
        raise
    except obstore.exceptions.GenericError as exc:
        raise TransientStorageError(table_uri, str(exc)) from exc


def _remote_exists(uri: str, table_uri: str, storage_options: dict[str, str] | None) -> bool:
    store, key = _store_and_key(uri, _frozen(storage_options))
    try:
        obstore.head(store, key)
    except FileNotFoundError:
        return False
    except obstore.exceptions.GenericError as exc:
        raise TransientStorageError(table_uri, str(exc)) from exc
    return True


def _frozen(options: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((options or {}).items()))


@lru_cache(maxsize=32)
def _bucket_store(bucket_uri: str, options: tuple[tuple[str, str], ...]):
    config, client = split_storage_options(dict(options))
    return from_url(bucket_uri, config=config or None, client_options=client or None)


def _store_and_key(uri: str, options: tuple[tuple[str, str], ...]):
    """One store per bucket (cached), and the object key of ``uri`` inside it."""
    scheme, rest = uri.split("://", 1)
    bucket, _, key = rest.partition("/")
    return _bucket_store(f"{scheme}://{bucket}/", options), key
