"""A local S3 (moto's server) holding copies of benchmark tables' logs."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import obstore

from airflow_provider_delta.core.delta_log import TableLocation

BUCKET = "bench"


@contextmanager
def moto_s3_logs(tables: dict[int, Path]) -> Iterator[tuple[dict[str, str], dict[int, str]]]:
    """Start moto, upload each table's ``_delta_log``; yield (storage_options, {key: s3 uri})."""
    with moto_bucket(BUCKET) as options:
        yield options, {key: upload_log(path, f"s3://{BUCKET}/{path.name}", options)
                        for key, path in tables.items()}


@contextmanager
def moto_bucket(bucket: str) -> Iterator[dict[str, str]]:
    """A moto S3 server on 127.0.0.1 holding an empty ``bucket``; yields its storage options."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield new_bucket(f"http://{host}:{port}", bucket)
    finally:
        server.stop()


def new_bucket(endpoint: str, bucket: str) -> dict[str, str]:
    """Create ``bucket`` on the moto server at ``endpoint``; its storage options."""
    import boto3

    options = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
               "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true"}
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                 aws_access_key_id="bench", aws_secret_access_key="bench",
                 ).create_bucket(Bucket=bucket)
    return options


def upload_log(path: Path, uri: str, options: dict[str, str]) -> str:
    """Copy the ``_delta_log`` folder (not its sub-folders) of ``path`` to ``uri``."""
    store = TableLocation(uri, options).store
    names = sorted(p.name for p in (path / "_delta_log").iterdir() if p.is_file())
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda name: obstore.put(
            store, f"_delta_log/{name}", (path / "_delta_log" / name).read_bytes()), names))
    return uri
