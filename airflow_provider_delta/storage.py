"""The one way this provider reaches files: URIs, obstore stores, small files and store errors.

A URI plus storage options (one flat dict, as deltalake takes them) becomes an obstore store
here and nowhere else; the same options thus mean the same thing to the core's log reader, the
Spark layer's data-file checks and the job's sinks and job files. Store failures are classified
here too: permanent (credentials, bucket, scheme or option wrong) or transient (network, 5xx).
Pure: imports neither Airflow nor Spark.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import os
import posixpath
import re
import shutil
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import NamedTuple
from urllib.parse import unquote

import numpy as np
import obstore
import pyarrow as pa
import pyarrow.compute as pc
from obstore.store import LocalStore, ObjectStore, from_url

from airflow_provider_delta.credential_keys import credential_key_names
from airflow_provider_delta.errors import (
    DeltaProviderError, StorageAccessError, StorageLocationError, TableNotFoundError,
    TransientStorageError,
)

log = logging.getLogger(__name__)

STORE_ERRORS = obstore.exceptions.BaseError
# obstore's client settings; everything else in storage_options is store configuration.
_CLIENT_OPTION_KEYS = {
    "allow_http", "allow_invalid_certificates", "connect_timeout", "timeout",
    "pool_idle_timeout", "proxy_url", "user_agent", "http1_only", "http2_only",
}
# Spark's Hadoop names for S3; obstore knows the bucket as s3://. Paths keep the given scheme.
_HADOOP_S3_SCHEMES = {"s3a": "s3", "s3n": "s3"}
_ACCESS_ERRORS = (obstore.exceptions.PermissionDeniedError,
                  obstore.exceptions.UnauthenticatedError)
_LOCATION_ERRORS = (obstore.exceptions.UnknownConfigurationKeyError,
                    obstore.exceptions.InvalidPathError, obstore.exceptions.NotSupportedError)
_HTTP_STATUS = re.compile(r"status code: (\d{3})")
_STORE_CODE = re.compile(r"<Code>([^<]+)</Code>")
_RETRYABLE_CLIENT_STATUS = {408, 429}  # request timeout, throttling
# The HTTP client refused to build the request (e.g. an http:// endpoint with allow_http off).
_REQUEST_NOT_BUILT = "kind: Builder"
_HEAD_THREADS = 16  # object-store HEAD requests are latency-bound
_LISTED_FOLDER_FILES = 256  # from this many files in one folder, list it instead of a stat each
# An object-store listing returns up to 1,000 keys a request, in key order. Listing a prefix
# stops once it has passed 20 keys per plan file under it (the rest get HEADs), so a listing
# costs at most one request per 50 HEADs it replaces: fewer requests, less time (HEADs go 16 at
# once, pages one after another) and less money (S3 prices a LIST as about 12 HEADs).
_LIST_PAGE_KEYS = 1000
_LISTED_KEYS_PER_FILE = 20
_OBJECT_URI = "^[A-Za-z][A-Za-z0-9+.-]*://[^/]+/."
# S3 starts a listing after a given key; obstore filters other stores' listings on the client,
# where skipped keys would cost requests the budget above does not see: they list from the top.
_START_AFTER_SCHEMES = ("s3://", "s3a://", "s3n://")
_LOCAL_URI_PREFIX = r"^file:(//(localhost)?)?/"
# The schemes obstore's stores read (Spark's s3a/s3n as s3); anything else fails on first use.
STORE_SCHEMES = ("s3", "s3a", "s3n", "gs", "az", "azure", "abfs", "abfss", "adl", "http",
                 "https", "file")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):")  # two letters at least: C: is a drive

StorageOptions = dict[str, str] | None
SharedFolder = tuple[str, pa.Array] | None  # a folder (with its last "/") and the names in it
UNKNOWN = object()  # a SharedFolder not computed yet


class ConnectionStorageOptions(dict):
    """Storage options read from an Airflow connection; they remember which one, so that an
    access error can name the connection to fix."""

    def __init__(self, options: dict[str, str], conn_id: str, conn_type: str):
        super().__init__(options)
        self.conn_id = conn_id
        self.conn_type = conn_type


# -- URIs ------------------------------------------------------------------------------------


def local_path(path_or_uri: str) -> str | None:
    """The absolute local path of a plain path or ``file:`` URI, None for object stores.

    Split by hand: a decoded path may hold ``#`` or ``?``, which ``urlparse`` would cut off.
    """
    if path_or_uri.startswith("file://"):
        path = _path_on_this_host(path_or_uri)
    elif path_or_uri.startswith("file:"):
        path = path_or_uri[len("file:"):]
    elif "://" in path_or_uri:
        return None
    else:
        path = path_or_uri
    return os.path.abspath(path or "/")


def location_problem(path_or_uri: object) -> str | None:
    """Why ``path_or_uri`` cannot name a table, told without a request (None: it can)."""
    if not isinstance(path_or_uri, str):
        return f"is a {type(path_or_uri).__name__}, not a path or URI"
    if not path_or_uri.strip():
        return "is empty"
    if path_or_uri != path_or_uri.strip():
        return "has spaces around it"
    scheme = _SCHEME.match(path_or_uri)
    if scheme is None or scheme.group(1).lower() == "file":
        return None
    name, rest = scheme.group(1).lower(), path_or_uri[scheme.end():]
    if name not in STORE_SCHEMES:
        return f"has the scheme {name}:, which no store of this provider reads"
    if not rest.startswith("//"):
        return f"lacks the // after {name}:"
    if not rest[2:].partition("/")[0]:
        return f"names no bucket, container or host after {name}://"
    return None


def _path_on_this_host(file_uri: str) -> str:
    """The path of ``file:///p`` or ``file://localhost/p``; another host has no local path."""
    host, slash, path = file_uri[len("file://"):].partition("/")
    if host not in ("", "localhost"):
        raise StorageLocationError(file_uri, f"a file: URI names host {host!r}, not the local "
                                   "host; mount that share and use its local path")
    return slash + path


def to_uri(path_or_uri: str) -> str:
    """``/tmp/t/`` -> ``file:///tmp/t``; other URIs lose only a trailing slash."""
    path = local_path(path_or_uri)
    return "file://" + path.rstrip("/") if path is not None else path_or_uri.rstrip("/")


def deltalake_uri(path_or_uri: str) -> str:
    """The location to hand deltalake: a local table by its plain path (deltalake parses a
    ``file://`` URI as a URL, cutting it at ``#`` or ``?``), others as :func:`to_uri`."""
    path = local_path(path_or_uri)
    return path.rstrip("/") or "/" if path is not None else to_uri(path_or_uri)


def store_uri(path_or_uri: str) -> str:
    """The URI obstore knows a location by: :func:`to_uri`, Spark's ``s3a://`` and ``s3n://``
    as ``s3://``."""
    scheme, sep, rest = to_uri(path_or_uri).partition("://")
    return f"{_HADOOP_S3_SCHEMES.get(scheme.lower(), scheme)}{sep}{rest}"


def normalised_location(path_or_uri: str) -> str:
    """One spelling per location, to tell whether two names are one place: the store's URI
    with a lower-case scheme, ``..`` and ``%``-escapes resolved, and symbolic links of local
    paths followed."""
    scheme, _, rest = store_uri(path_or_uri).partition("://")
    authority, _, path = rest.partition("/")
    path = posixpath.normpath("/" + unquote(path))
    if scheme.lower() == "file":
        path = os.path.realpath(path)
    return f"{scheme.lower()}://{authority}{path}".rstrip("/")


def spark_uri(path_or_uri: str) -> str:
    """The URI Spark's Hadoop file systems understand (``s3://`` is served by ``s3a://``)."""
    uri = to_uri(path_or_uri)
    return "s3a://" + uri[len("s3://"):] if uri.startswith("s3://") else uri


def split_uri(path_or_uri: str) -> tuple[str, str]:
    """``s3://b/dir/f.json`` -> (``s3://b/dir``, ``f.json``)."""
    folder, _, name = to_uri(path_or_uri).rpartition("/")
    return folder, name


# -- stores ----------------------------------------------------------------------------------


def split_storage_options(options: StorageOptions) -> tuple[dict, dict]:
    """Split one flat dict into obstore's store config and client options."""
    config: dict[str, str] = {}
    client: dict[str, object] = {}
    for key, value in (options or {}).items():
        short = key.lower().removeprefix("aws_").removeprefix("google_").removeprefix("azure_")
        if short in _CLIENT_OPTION_KEYS:
            client[short] = str(value).lower() == "true" if short == "allow_http" else value
        else:
            config[key.lower()] = value
    return config, client


def open_store(path_or_uri: str, storage_options: StorageOptions = None,
               table_uri: str | None = None) -> ObjectStore:
    """An obstore store rooted at ``path_or_uri``; local folders are created when missing.

    A URI or option obstore refuses is a StorageLocationError of ``table_uri`` (default: the
    URI itself): no request was made, so nothing else can be wrong.
    """
    path = local_path(path_or_uri)
    config, client = split_storage_options(storage_options)
    try:
        if path is not None:  # not as a URL: that would cut the path at "#" or "?"
            return LocalStore(prefix=path, mkdir=True)
        return from_url(store_uri(path_or_uri) + "/", config=config or None,
                        client_options=client or None)
    except STORE_ERRORS as exc:
        raise StorageLocationError(table_uri or path_or_uri, short_message(exc)) from exc


def storage_error(table_uri: str, exc: Exception,
                  storage_options: StorageOptions = None) -> DeltaProviderError:
    """A failed store request as a permanent or transient error of ``table_uri``.

    Refused credentials (401/403), a missing bucket (404) and requests the store rejects
    (other 4xx) are permanent; timeouts, throttling (408/429), 5xx and network failures
    are transient.
    """
    if isinstance(exc, _ACCESS_ERRORS):
        return StorageAccessError(table_uri, short_message(exc), _credentials(storage_options))
    if isinstance(exc, _LOCATION_ERRORS):
        return StorageLocationError(table_uri, short_message(exc))
    if _REQUEST_NOT_BUILT in str(exc):
        return StorageLocationError(
            table_uri, "the HTTP client refused the request's URL; an http:// endpoint needs "
            "AWS_ALLOW_HTTP=true (allow_http in the delta connection's extras)")
    status = _HTTP_STATUS.search(str(exc))
    code = int(status.group(1)) if status else None
    if code in (401, 403):
        return StorageAccessError(table_uri, short_message(exc), _credentials(storage_options))
    if code == 404:
        return TableNotFoundError(table_uri, short_message(exc))
    if code is not None and 400 <= code < 500 and code not in _RETRYABLE_CLIENT_STATUS:
        return StorageLocationError(table_uri, short_message(exc))
    return TransientStorageError(table_uri, short_message(exc))


def short_message(exc: Exception) -> str:
    """The first line of a store error, cut before any response body, with the HTTP status and
    the store's error code when there are ones."""
    text = str(exc)
    lead = text.split("\n", 1)[0].split(": Error performing", 1)[0].split(": <?xml", 1)[0]
    status = _HTTP_STATUS.search(text)
    code = _STORE_CODE.search(text)
    found = [f"HTTP {status.group(1)}"] if status else []
    found += [code.group(1)] if code else []
    return lead[:240] + (f" ({', '.join(found)})" if found else "")


def _credentials(storage_options: StorageOptions) -> str:
    """Which credentials were used: by connection id where known, by option name (never by
    value)."""
    given = credential_key_names(storage_options)
    if isinstance(storage_options, ConnectionStorageOptions):
        held = f"its {', '.join(given)}" if given else "no keys, so the environment's are used"
        return (f"the credentials of Airflow connection {storage_options.conn_id!r} (type "
                f"{storage_options.conn_type}; {held})")
    if given:
        return (f"the credentials in the storage options ({', '.join(given)}): the "
                "storage_options given, or the connection given as delta_conn_id")
    return ("the credentials of the environment (no key is in the storage options; set "
            "delta_conn_id to a connection holding keys: delta, aws, wasb, adls or "
            "google_cloud_platform)")


def holds_delta_log(path_or_uri: str, storage_options: StorageOptions = None) -> bool:
    """Whether a location holds a ``_delta_log``, by one listing request: a location the
    store refuses (credentials, bucket, endpoint) raises the classified error."""
    path = local_path(path_or_uri)
    if path is not None:
        if not os.path.isdir(path):
            raise TableNotFoundError(path_or_uri, "no such folder")
        return os.path.isdir(os.path.join(path, "_delta_log"))
    store = open_store(path_or_uri, storage_options)
    try:
        first = next(iter(obstore.list(store, prefix="_delta_log/", chunk_size=1)), [])
    except STORE_ERRORS as exc:
        raise storage_error(path_or_uri, exc, storage_options) from exc
    return bool(first)


# -- small files (job files, sink listings) --------------------------------------------------


def write_text(path_or_uri: str, text: str, storage_options: StorageOptions = None) -> None:
    """Write a file; local ones are private (0600, in folders created 0700)."""
    path = local_path(path_or_uri)
    if path is None:
        folder, name = split_uri(path_or_uri)
        obstore.put(open_store(folder, storage_options), name, text.encode())
        return
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(text)


def read_text(path_or_uri: str, storage_options: StorageOptions = None) -> str:
    folder, name = split_uri(path_or_uri)
    return bytes(obstore.get(open_store(folder, storage_options), name).bytes()).decode()


def remove_tree(path_or_uri: str, storage_options: StorageOptions = None) -> None:
    """Delete a folder and everything under it; a missing folder is fine."""
    path = local_path(path_or_uri)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
        return
    folder, name = split_uri(path_or_uri)
    paths = [meta["path"] for meta in list_files(folder, f"{name}/", storage_options)]
    if paths:
        obstore.delete(open_store(folder, storage_options), paths)


def list_files(path_or_uri: str, prefix: str, storage_options: StorageOptions = None
               ) -> Iterator[dict]:
    """Every object under ``prefix`` of the store rooted at ``path_or_uri`` (obstore metadata);
    a missing local folder holds none (and is not created)."""
    path = local_path(path_or_uri)
    if path is not None and not os.path.isdir(path):
        return
    for chunk in obstore.list(open_store(path_or_uri, storage_options), prefix=prefix):
        yield from chunk


# -- data files (absolute decoded URIs, as a plan holds them) --------------------------------


def missing_files(uris: Iterable[str], table_uri: str, storage_options: StorageOptions
                  ) -> list[str]:
    """The URIs among ``uris`` that do not exist, in their order."""
    uris = list(uris)
    local = {u: local_path(u) for u in uris}
    remote = [u for u, path in local.items() if path is None]
    gone = {u for u, path in local.items() if path is not None and not os.path.isfile(path)}
    gone.update(u for u, lost in zip(remote, _missing_by_head(remote, table_uri, storage_options))
                if lost)
    return [u for u in uris if u in gone]


def missing_file_mask(uris: pa.Array, table_uri: str, storage_options: StorageOptions, *,
                      common: SharedFolder | object = UNKNOWN) -> np.ndarray:
    """Which of ``uris`` do not exist, looked up column-wise. A local folder holding many of
    them is listed once, its other files get a ``stat`` each; on an object store a prefix
    holding many of them is listed (see :func:`_listing_prefixes`), the others get a HEAD.
    ``common``: their :func:`common_folder`, where the caller has it already."""
    missing = np.zeros(len(uris), dtype=bool)
    if not len(uris):
        return missing
    one_folder = _one_local_folder(common_folder(uris) if common is UNKNOWN else common)
    if one_folder is not None:  # the common case, a table's files side by side: no regex
        return _missing_in_folder(*one_folder)
    paths = pc.replace_substring_regex(uris, _LOCAL_URI_PREFIX, "/")
    local = pc.match_substring_regex(paths, "^/[^/]").to_numpy(zero_copy_only=False)
    in_store = (pc.match_substring_regex(uris, _OBJECT_URI).to_numpy(zero_copy_only=False)
                & ~pc.match_substring_regex(uris, "^file:", ignore_case=True)
                .to_numpy(zero_copy_only=False))
    if local.any():
        rows = np.flatnonzero(local)
        missing[rows] = _missing_local(paths.take(pa.array(rows)))
    if in_store.any():
        rows = np.flatnonzero(in_store)
        missing[rows] = _missing_in_stores(uris.take(pa.array(rows)), table_uri, storage_options)
    if not (local | in_store).all():  # e.g. a file: URI of another host: refused there
        rows = np.flatnonzero(~(local | in_store))
        others = uris.take(pa.array(rows)).to_pylist()
        gone = set(missing_files(others, table_uri, storage_options))
        missing[rows] = [uri in gone for uri in others]
    return missing


def file_size(uri: str, table_uri: str, storage_options: StorageOptions) -> int | None:
    """The size of ``uri`` in bytes; None if it does not exist."""
    path = local_path(uri)
    if path is not None:
        return os.path.getsize(path) if os.path.isfile(path) else None
    store, key = _store_and_key(uri, table_uri, storage_options)
    try:
        return obstore.head(store, key)["size"]
    except FileNotFoundError:
        return None
    except STORE_ERRORS as exc:
        raise storage_error(table_uri, exc, storage_options) from exc


def _missing_local(paths: pa.Array) -> np.ndarray:
    folders, names = split_folders(paths)
    missing = np.zeros(len(paths), dtype=bool)
    for folder, rows in _row_groups(folders):
        in_folder = names if len(rows) == len(names) else names.take(pa.array(rows))
        missing[rows] = _missing_in_folder(folder or "/", in_folder)
    return missing


def split_folders(paths: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Each path's folder (without the last ``/``) and name; a split, five times cheaper than
    regular expressions over a million paths. A path without ``/`` is a name alone."""
    with_folder = pc.if_else(pc.match_substring(paths, "/"), paths,
                             pc.binary_join_element_wise("/", paths, ""))  # "e" as "/e"
    parts = pc.split_pattern(with_folder, "/", max_splits=1, reverse=True)
    return pc.list_element(parts, 0), pc.list_element(parts, 1)


def common_folder(uris: pa.Array) -> SharedFolder:
    """The folder holding every one of ``uris`` directly (as they spell it, with its last
    ``/``) and their names; None if they lie in several. Tested against the first one's folder
    instead of splitting each."""
    first = uris[0].as_py() if len(uris) and not uris.null_count else ""
    prefix = first[:first.rfind("/") + 1]
    if not prefix or not pc.all(pc.starts_with(uris, prefix)).as_py():
        return None
    names = pc.replace_substring(uris, prefix, "", max_replacements=1)
    return None if pc.any(pc.match_substring(names, "/")).as_py() else (prefix, names)


def _one_local_folder(common: SharedFolder) -> tuple[str, pa.Array] | None:
    """The local folder (as :func:`split_folders` gives it) holding all of some URIs (their
    :func:`common_folder` is ``common``), and their names; None if they are elsewhere or in
    several."""
    if common is None:
        return None
    folder = re.sub(_LOCAL_URI_PREFIX, "/", common[0])  # the column-wise rule, on the folder
    return (folder[:-1], common[1]) if re.match("/[^/]", folder) else None


def _missing_in_folder(folder: str, names: pa.Array) -> np.ndarray:
    if len(names) < _LISTED_FOLDER_FILES:
        return np.array([not os.path.isfile(os.path.join(folder, name))
                         for name in names.to_pylist()], dtype=bool)
    try:
        listed = pa.array(os.listdir(folder), pa.string())
    except (FileNotFoundError, NotADirectoryError):
        listed = pa.array([], pa.string())
    return _absent(names, listed)


def _absent(names: pa.Array, listed: pa.Array) -> np.ndarray:
    """Which of ``names`` are not among ``listed``: a join counts the names found (cheaper
    than a lookup per name), and only if some lack does a lookup tell which."""
    found = pa.table({"name": names}).join(pa.table({"name": listed}), "name",
                                           join_type="left semi", use_threads=False)
    if found.num_rows == len(names):
        return np.zeros(len(names), dtype=bool)
    return pc.invert(pc.is_in(names, value_set=listed)).to_numpy(zero_copy_only=False)


def _missing_in_stores(uris: pa.Array, table_uri: str, storage_options: StorageOptions
                       ) -> np.ndarray:
    buckets = pc.replace_substring_regex(uris, "^([^:]+://[^/]+)/.*$", r"\1")
    keys = pc.replace_substring_regex(uris, "^[^:]+://[^/]+/", "")
    frozen = tuple(sorted((storage_options or {}).items()))
    missing = np.zeros(len(uris), dtype=bool)
    for bucket, rows in _row_groups(buckets):
        store = _bucket_store(bucket, frozen, table_uri)
        taken = pa.array(rows)
        listing = _Listing(store, bucket.lower().startswith(_START_AFTER_SCHEMES))
        missing[rows] = _missing_in_bucket(listing, keys.take(taken), uris.take(taken),
                                           table_uri, storage_options)
    return missing


class _Listing(NamedTuple):
    store: ObjectStore
    starts_after: bool  # whether the store itself skips the keys before a given one


def _missing_in_bucket(listing: _Listing, keys: pa.Array, uris: pa.Array, table_uri: str,
                       storage_options: StorageOptions) -> np.ndarray:
    """Listings settle the keys of the prefixes worth listing; the rest get a HEAD each."""
    folders = pc.replace_substring_regex(keys, "(^|/)[^/]*$", "")
    rows_by_folder = dict(_row_groups(folders))
    listed_under = _listing_prefixes({f: len(rows) for f, rows in rows_by_folder.items()})
    rows_by_prefix: dict[str | None, list[np.ndarray]] = {}
    for folder, rows in rows_by_folder.items():
        rows_by_prefix.setdefault(listed_under[folder], []).append(rows)
    missing = np.zeros(len(keys), dtype=bool)
    unsettled = [np.concatenate(rows_by_prefix.pop(None, [np.zeros(0, dtype=np.int64)]))]
    for prefix, parts in rows_by_prefix.items():
        rows = np.concatenate(parts)
        log.info("%s: checking %d data files exist by listing %s", table_uri, len(rows),
                 prefix or "the bucket")
        try:
            settled, lost = _listed(listing, prefix, keys.take(pa.array(rows)))
        except STORE_ERRORS as exc:
            raise storage_error(table_uri, exc, storage_options) from exc
        missing[rows] = lost
        unsettled.append(rows[~settled])
    headed = np.sort(np.concatenate(unsettled))
    missing[headed] = _missing_by_head(uris.take(pa.array(headed)).to_pylist(), table_uri,
                                       storage_options)
    return missing


def _listing_prefixes(files_by_folder: dict[str, int]) -> dict[str, str | None]:
    """For each folder of a bucket (with its count of a plan's files), the prefix to list for
    them, or None: HEADs. A folder of fewer than ``_LISTED_FOLDER_FILES`` files joins its parent,
    deepest first, so that partition folders of a few files each add up under the table."""
    totals = dict(files_by_folder)
    joined: dict[str, str] = {}
    deepest_first = [(-_depth(folder), folder) for folder in totals]
    heapq.heapify(deepest_first)
    while deepest_first:
        _, prefix = heapq.heappop(deepest_first)
        if not prefix or totals[prefix] >= _LISTED_FOLDER_FILES:
            continue
        parent = prefix.rpartition("/")[0]
        if parent not in totals:
            totals[parent] = 0
            heapq.heappush(deepest_first, (-_depth(parent), parent))
        totals[parent] += totals.pop(prefix)
        joined[prefix] = parent
    owners = {}
    for folder in files_by_folder:
        owner = folder
        while owner in joined:
            owner = joined[owner]
        owners[folder] = owner if totals[owner] >= _LISTED_FOLDER_FILES else None
    return owners


def _depth(prefix: str) -> int:
    return prefix.count("/") + 1 if prefix else 0


def _listed(listing: _Listing, prefix: str, keys: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """List ``prefix`` (on S3 from just before the first of ``keys``; keys sort as the store
    lists them) until past the last one, or until the listing has passed ``_LISTED_KEYS_PER_FILE``
    keys a file. Returns which of ``keys`` the listing settled, and which of those are
    missing."""
    first, last = (value.as_py() for value in pc.min_max(keys).values())
    budget = _LISTED_KEYS_PER_FILE * len(keys)
    pages: list[pa.Array] = []
    passed = 0
    reached = None  # the last key listed, if the listing stopped before its end
    offset = (first[:-1] or None) if listing.starts_after else None
    for batch in obstore.list(listing.store, prefix or None, offset=offset,
                              chunk_size=_LIST_PAGE_KEYS, return_arrow=True):
        page = pa.record_batch(batch).column("path").cast(pa.string())
        pages.append(page)
        passed += len(page)
        if len(page) and (page[-1].as_py() >= last or passed >= budget):
            reached = page[-1].as_py()
            break
    listed = pa.concat_arrays(pages) if pages else pa.array([], pa.string())
    settled = (np.ones(len(keys), dtype=bool) if reached is None
               else pc.less_equal(keys, reached).to_numpy(zero_copy_only=False))
    return settled, settled & _absent(keys, listed)


def _missing_by_head(uris: list[str], table_uri: str, storage_options: StorageOptions
                     ) -> np.ndarray:
    """One HEAD request per URI, ``_HEAD_THREADS`` at once."""
    if not uris:
        return np.zeros(0, dtype=bool)
    log.info("%s: checking %d data files exist", table_uri, len(uris))
    with ThreadPoolExecutor(_HEAD_THREADS) as pool:
        found = pool.map(lambda u: _remote_exists(u, table_uri, storage_options), uris)
        return ~np.fromiter(found, dtype=bool, count=len(uris))


def _row_groups(values: pa.Array) -> Iterator[tuple[str, np.ndarray]]:
    """Each distinct value of ``values`` with the rows holding it."""
    if len(values) and not values.null_count and pc.all(pc.equal(values, values[0])).as_py():
        # one folder or bucket: no hashing
        yield values[0].as_py(), np.arange(len(values))
        return
    encoded = values.dictionary_encode()
    codes = encoded.indices.to_numpy()
    order = np.argsort(codes, kind="stable")
    starts = np.flatnonzero(np.diff(codes[order], prepend=-1))
    for rows in np.split(order, starts[1:]):
        yield encoded.dictionary[int(codes[rows[0]])].as_py(), rows


def read_range(uri: str, start: int, length: int, table_uri: str,
               storage_options: StorageOptions) -> bytes:
    """``length`` bytes of ``uri`` from ``start``; FileNotFoundError if it does not exist."""
    path = local_path(uri)
    if path is not None:
        with open(path, "rb") as handle:
            handle.seek(start)
            return handle.read(length)
    store, key = _store_and_key(uri, table_uri, storage_options)
    try:
        return bytes(obstore.get_range(store, key, start=start, length=length))
    except FileNotFoundError:
        raise
    except STORE_ERRORS as exc:
        raise storage_error(table_uri, exc, storage_options) from exc


# -- large objects, read in ranges ----------------------------------------------------------

# An object up to this size is read whole, in one request, as before ranged reads; a larger one
# costs a request for this much of its tail (a Parquet footer) and one per stretch read.
TAIL_BYTES = 8 << 20
_STREAM_CHUNK = 1 << 20  # bytes a stretch's response hands over at a time
# A stretch whose response breaks off (e.g. at the client's timeout, 30 s by default, while a
# slow reader holds it open) is asked again from where it stopped, up to this many times in a row.
_STREAM_RETRIES = 2
_OPEN_STRETCHES = 64  # stretches left unfinished (e.g. columns not read to the end) are dropped


def read_object_tail(store: ObjectStore, key: str, on_error: Callable[[Exception], Exception]
                     ) -> bytes | RangedObject | None:
    """An object of ``store`` in one request: its bytes if it holds at most
    :data:`TAIL_BYTES`, else a :class:`RangedObject` holding its tail; None if it does not
    exist. ``on_error`` turns a store error into the error to raise."""
    try:
        try:
            result = obstore.get(store, key, options={"range": {"suffix": TAIL_BYTES}})
        except STORE_ERRORS as exc:
            if not _no_tail(exc):
                raise
            result = obstore.get(store, key)  # an empty object: no range to answer with
        tail, size = bytes(result.bytes()), int(result.meta["size"])
    except FileNotFoundError:
        return None
    except STORE_ERRORS as exc:
        raise on_error(exc) from exc
    return tail if len(tail) >= size else RangedObject(store, key, size, tail, on_error)


def _no_tail(exc: Exception) -> bool:
    """Whether a store refused a suffix range as for an empty object: with a 416, or with a
    whole (empty) answer that object_store calls ``NotPartial`` (moto)."""
    status = _HTTP_STATUS.search(str(exc))
    return "NotPartial" in str(exc) or (status is not None and status.group(1) == "416")


# Not obstore's open_reader: pyarrow seeks before every read and that reader drops its buffer
# on a seek, so it costs a request per read (a buffer each) where this costs one per column
# chunk; pyarrow also asks for a `closed` it lacks, and it skips its HEAD only from obstore 0.10.
class RangedObject:
    """A large object read as a file (seek, read) by range requests, for pyarrow.

    Its tail is held; any other read continues the open stretch that ends where it starts,
    or opens one: a streamed request from there to the end of the span holding it
    (:attr:`spans`, e.g. a Parquet file's column chunks), so each column chunk read from
    start to end costs one request and is held a chunk at a time, never whole. Not for
    threads: each one reads its own :meth:`reopened` copy."""

    def __init__(self, store: ObjectStore, key: str, size: int, tail: bytes,
                 on_error: Callable[[Exception], Exception]):
        self.store, self.key, self.size, self.tail = store, key, size, tail
        self._on_error = on_error
        self._tail_start = size - len(tail)
        self._position = 0
        self._stretches: dict[int, _Stretch] = {}  # by the position each goes on from
        self.spans: list[tuple[int, int]] = []  # sorted (start, end) byte ranges

    def reopened(self) -> RangedObject:
        """A reader of the same object at its start, with no stretch open."""
        again = RangedObject(self.store, self.key, self.size, self.tail, self._on_error)
        again.spans = self.spans
        return again

    def read(self, size: int = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self._position + size)
        pieces = []
        while self._position < end:
            if self._position >= self._tail_start:
                start = self._position - self._tail_start
                piece = self.tail[start:start + end - self._position]
            else:
                piece = self._streamed(min(end, self._tail_start) - self._position)
            pieces.append(piece)
            self._position += len(piece)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)  # b"" past the end

    def _streamed(self, length: int) -> bytes:
        stretch = self._stretches.pop(self._position, None)
        if stretch is None:
            stretch = _Stretch(self, self._position, self._stretch_end(length))
        piece = stretch.take(length)
        if stretch.position < stretch.end:
            self._stretches[stretch.position] = stretch
            if len(self._stretches) > _OPEN_STRETCHES:
                del self._stretches[next(iter(self._stretches))]
        return piece

    def _stretch_end(self, length: int) -> int:
        """Where a stretch starting here ends: the end of the span holding it, else just past
        this read."""
        found = bisect.bisect_right(self.spans, (self._position, float("inf"))) - 1
        end = self._position + max(length, _STREAM_CHUNK)
        if found >= 0 and self.spans[found][0] <= self._position < self.spans[found][1]:
            end = max(self._position + length, self.spans[found][1])
        return min(end, self._tail_start)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self.size}[whence]
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return False

    def close(self) -> None:
        self._stretches.clear()


class _Stretch:
    """One streamed range request of a :class:`RangedObject`, taken from a chunk at a time."""

    def __init__(self, source: RangedObject, start: int, end: int):
        self.source, self.position, self.end = source, start, end
        self._held = memoryview(b"")
        self._chunks: Iterator | None = None
        self._failures = 0

    def take(self, length: int) -> bytes:
        """Up to ``length`` bytes from where the stretch stands (at least one)."""
        while not len(self._held):
            self._held = memoryview(self._next_chunk())
        piece, self._held = self._held[:length], self._held[length:]
        self.position += len(piece)
        return bytes(piece)

    def _next_chunk(self):
        while True:
            try:
                if self._chunks is None:
                    self._chunks = iter(obstore.get(
                        self.source.store, self.source.key,
                        options={"range": (self.position, self.end)},
                    ).stream(min_chunk_size=_STREAM_CHUNK))
                chunk = next(self._chunks)
                self._failures = 0
                return chunk
            except StopIteration:
                raise self.source._on_error(OSError(
                    f"{self.source.key}: a range response ended at byte {self.position}, "
                    f"short of {self.end}")) from None
            except STORE_ERRORS as exc:
                self._failures += 1
                if self._failures > _STREAM_RETRIES or isinstance(exc, FileNotFoundError):
                    raise self.source._on_error(exc) from exc
                log.info("%s: reading again from byte %d (%s)", self.source.key,
                         self.position, short_message(exc))
                self._chunks = None


def _remote_exists(uri: str, table_uri: str, storage_options: StorageOptions) -> bool:
    store, key = _store_and_key(uri, table_uri, storage_options)
    try:
        obstore.head(store, key)
    except FileNotFoundError:
        return False
    except STORE_ERRORS as exc:
        raise storage_error(table_uri, exc, storage_options) from exc
    return True


def _store_and_key(uri: str, table_uri: str, storage_options: StorageOptions
                   ) -> tuple[ObjectStore, str]:
    """One store per bucket (cached), and the object key of ``uri`` inside it."""
    scheme, rest = uri.split("://", 1)
    bucket, _, key = rest.partition("/")
    frozen = tuple(sorted((storage_options or {}).items()))
    return _bucket_store(f"{scheme}://{bucket}", frozen, table_uri), key


@lru_cache(maxsize=32)
def _bucket_store(bucket_uri: str, frozen_options: tuple[tuple[str, str], ...],
                  table_uri: str) -> ObjectStore:
    return open_store(bucket_uri, dict(frozen_options), table_uri)
