"""Small storage helpers the job shares: URIs for Spark and obstore, JSON files on any store,
and the storage options' trip to the driver through the environment (never in a file)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import obstore
from obstore.store import ObjectStore, from_url

if TYPE_CHECKING:
    from airflow_provider_delta.job.spec import JobSpec

# The environment variable of the spark-submit process that carries the storage options.
STORAGE_OPTIONS_ENV = "AIRFLOW_PROVIDER_DELTA_STORAGE_OPTIONS"


def to_uri(path_or_uri: str) -> str:
    """``/tmp/t`` -> ``file:///tmp/t``; URIs pass through unchanged."""
    if "://" in path_or_uri:
        return path_or_uri.rstrip("/")
    return "file://" + os.path.abspath(path_or_uri).rstrip("/")


def spark_uri(path_or_uri: str) -> str:
    """The URI Spark's Hadoop file systems understand (``s3://`` is served by ``s3a://``)."""
    uri = to_uri(path_or_uri)
    return "s3a://" + uri[len("s3://"):] if uri.startswith("s3://") else uri


def store_for(path_or_uri: str, storage_options: dict[str, str] | None = None) -> ObjectStore:
    """An obstore store rooted at ``path_or_uri``; local folders are created when missing."""
    uri = to_uri(path_or_uri)
    if urlparse(uri).scheme == "file":
        return from_url(uri, mkdir=True)
    return from_url(uri, config=storage_options or None)


def split_uri(path_or_uri: str) -> tuple[str, str]:
    """``s3://b/dir/f.json`` -> (``s3://b/dir``, ``f.json``)."""
    uri = to_uri(path_or_uri)
    folder, _, name = uri.rpartition("/")
    return folder, name


def local_path(path_or_uri: str) -> str | None:
    """The local path of ``path_or_uri``, None for object stores."""
    uri = to_uri(path_or_uri)
    return uri[len("file://"):] if urlparse(uri).scheme == "file" else None


def write_text(path_or_uri: str, text: str, storage_options: dict[str, str] | None = None) -> None:
    """Write a file; local ones are private (0600, in folders created 0700)."""
    path = local_path(path_or_uri)
    if path is None:
        folder, name = split_uri(path_or_uri)
        obstore.put(store_for(folder, storage_options), name, text.encode())
        return
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(text)


def remove_tree(path_or_uri: str, storage_options: dict[str, str] | None = None) -> None:
    """Delete a folder and everything under it; a missing folder is fine."""
    path = local_path(path_or_uri)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
        return
    folder, name = split_uri(path_or_uri)
    store = store_for(folder, storage_options)
    paths = [meta["path"] for meta in list_files(folder, f"{name}/", storage_options)]
    if paths:
        obstore.delete(store, paths)


def read_text(path_or_uri: str, storage_options: dict[str, str] | None = None) -> str:
    folder, name = split_uri(path_or_uri)
    return bytes(obstore.get(store_for(folder, storage_options), name).bytes()).decode()


def list_files(path_or_uri: str, prefix: str, storage_options: dict[str, str] | None = None):
    """Every object under ``prefix`` of the store rooted at ``path_or_uri`` (obstore metadata);
    a missing local folder holds none (and is not created)."""
    path = local_path(path_or_uri)
    if path is not None and not os.path.isdir(path):
        return
    store = store_for(path_or_uri, storage_options)
    for chunk in obstore.list(store, prefix=prefix):
        yield from chunk


def storage_options_env(spec: JobSpec) -> dict[str, str]:
    """The environment that hands ``spec``'s storage options to the driver."""
    options = {"source": spec.storage_options, "sink": spec.sink.storage_options}
    return {STORAGE_OPTIONS_ENV: json.dumps(options)}


def without_storage_options(spec: JobSpec) -> JobSpec:
    """``spec`` as it may be written to a file: no credentials."""
    return replace(spec, storage_options=None, sink=replace(spec.sink, storage_options=None))


def with_storage_options_from(environ: Mapping[str, str], spec: JobSpec) -> JobSpec:
    """``spec`` with the storage options the operator put into the driver's environment."""
    if STORAGE_OPTIONS_ENV not in environ:
        return spec
    options = json.loads(environ[STORAGE_OPTIONS_ENV])
    return replace(spec, storage_options=options["source"],
                   sink=replace(spec.sink, storage_options=options["sink"]))
