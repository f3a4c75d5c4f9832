"""Small storage helpers the job shares: URIs for Spark and obstore, JSON files on any store."""

from __future__ import annotations

import os
from urllib.parse import urlparse

import obstore
from obstore.store import ObjectStore, from_url


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


def write_text(path_or_uri: str, text: str, storage_options: dict[str, str] | None = None) -> None:
    folder, name = split_uri(path_or_uri)
    obstore.put(store_for(folder, storage_options), name, text.encode())


def read_text(path_or_uri: str, storage_options: dict[str, str] | None = None) -> str:
    folder, name = split_uri(path_or_uri)
    return bytes(obstore.get(store_for(folder, storage_options), name).bytes()).decode()


def list_files(path_or_uri: str, prefix: str, storage_options: dict[str, str] | None = None):
    """Every object under ``prefix`` of the store rooted at ``path_or_uri`` (obstore metadata)."""
    store = store_for(path_or_uri, storage_options)
    for chunk in obstore.list(store, prefix=prefix):
        yield from chunk
