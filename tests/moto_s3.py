"""The tests' moto S3 server from inside: objects put without HTTP, and the requests code makes
counted (and, if asked, answered late, as over a network) by an HTTP proxy in front of it."""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def put_tree(local: Path, prefix: str, bucket: str = "lake") -> str:
    """Copy a folder into the moto server's bucket inside this process (no HTTP: fast); returns
    its s3:// URI."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for path in Path(local).rglob("*"):
        if path.is_file():
            backend.put_object(bucket, f"{prefix}/{path.relative_to(local)}", path.read_bytes())
    return f"s3://{bucket}/{prefix}"


class CountingProxy(ThreadingHTTPServer):
    """Forwards HTTP requests to ``upstream`` and counts them by method; each request waits
    ``latency`` seconds first (a thread each: requests made together wait together)."""

    def __init__(self, upstream: str):
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream = (host, int(port))
        self.requests: Counter = Counter()
        self.latency = 0.0
        super().__init__(("127.0.0.1", 0), _Forward)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextmanager
def counted_requests(s3_options: dict[str, str]) -> Iterator[tuple[dict[str, str], Counter]]:
    """Storage options that reach the same server through a counting proxy, and its counter
    (``{"GET": n, "HEAD": m, ...}``; a listing is a GET)."""
    with counting_proxy(s3_options) as (options, proxy):
        yield options, proxy.requests


@contextmanager
def counting_proxy(s3_options: dict[str, str]) -> Iterator[tuple[dict[str, str], CountingProxy]]:
    """Storage options that reach the same server through a :class:`CountingProxy`, and it."""
    proxy = CountingProxy(s3_options["AWS_ENDPOINT_URL"])
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield dict(s3_options, AWS_ENDPOINT_URL=proxy.url), proxy
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join()


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.requests[self.command] += 1
        time.sleep(self.server.latency)
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=60)
        upstream.request(self.command, self.path, body=body, headers=dict(self.headers))
        answer = upstream.getresponse()
        payload = answer.read()
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        upstream.close()

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _forward

    def log_message(self, *args) -> None:
        pass


@contextmanager
def scratch_bucket(name: str) -> Iterator[str]:
    """A bucket of its own on the moto server (created and emptied inside this process), for
    tests putting many keys: moto scans every key of a bucket on each listing, so they would
    slow the shared bucket's tests down."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    backend.create_bucket(name, "us-east-1")
    try:
        yield name
    finally:
        backend.get_bucket(name).keys.clear()
        backend.delete_bucket(name)
