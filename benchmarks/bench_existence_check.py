"""Benchmark of the data files' existence check on S3: listings against a HEAD per file.

A moto S3 server on 127.0.0.1 holds a table of ``--files`` data files under one partition
folder plus ``--others`` files in small partition folders (5 each) and a ``_delta_log`` of 100
commits; one file in 100 is missing. ``missing_file_mask`` (listings where a prefix holds 256
or more of the files, HEADs for the rest) is timed against ``missing_files`` (one HEAD per
file, 16 at once: the check as it was) on the same URIs, interleaved round by round; both
must find the same missing files. Then each runs once more through a counting HTTP proxy to
count its requests. Printed: median seconds, request counts and the ratios.

Run: ``.venv/bin/python benchmarks/bench_existence_check.py [--files 10000] [--others 100]
[--repeat 5]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from bench_core import median_seconds  # noqa: E402
from core_s3 import moto_bucket  # noqa: E402

from airflow_provider_delta.storage import missing_file_mask, missing_files  # noqa: E402
from tests.moto_s3 import counted_requests  # noqa: E402

BUCKET = "bench"


def put_table(files: int, others: int) -> tuple[list[str], set[str]]:
    """The table's objects put into moto in-process; (the plan's URIs, the missing ones)."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    keys = [f"t/p=0/part-{n:06d}.parquet" for n in range(files)]
    keys += [f"t/p={1 + n // 5}/part-{n:06d}.parquet" for n in range(others)]
    missing = set(keys[::100])
    for key in keys:
        if key not in missing:
            backend.put_object(BUCKET, key, b"")
    for version in range(100):
        backend.put_object(BUCKET, f"t/_delta_log/{version:020d}.json", b"")
    return [f"s3://{BUCKET}/{key}" for key in keys], {f"s3://{BUCKET}/{key}" for key in missing}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--others", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with moto_bucket(BUCKET) as options:
        run(options, *put_table(args.files, args.others), args)


def run(options: dict[str, str], uris: list[str], missing: set[str],
        args: argparse.Namespace) -> None:
    column = pa.array(uris, pa.string())
    table = f"s3://{BUCKET}/t"

    def by_listing(opts: dict[str, str]) -> set[str]:
        return {uris[row] for row in np.flatnonzero(missing_file_mask(column, table, opts))}

    def by_heads(opts: dict[str, str]) -> set[str]:
        return set(missing_files(uris, table, opts))

    checks = {"listing": by_listing, "heads": by_heads}
    for name, check in checks.items():
        assert check(options) == missing, name
    seconds = median_seconds({n: lambda c=c: c(options) for n, c in checks.items()},
                             args.repeat)
    requests = {}
    for name, check in checks.items():
        with counted_requests(options) as (counted, counter):
            check(counted)
        requests[name] = dict(counter)
    print(f"{len(uris):,} files ({args.files:,} in one folder, {args.others} in folders of 5), "
          f"{len(missing)} missing; median of {args.repeat}")
    for name in checks:
        print(f"  {name:8} {seconds[name]:8.3f} s   requests {requests[name]}")
    total = {name: sum(r.values()) for name, r in requests.items()}
    print(f"  listing/heads: time {seconds['listing'] / seconds['heads']:.3f}x, "
          f"requests {total['listing'] / total['heads']:.4f}x")


if __name__ == "__main__":
    main()
