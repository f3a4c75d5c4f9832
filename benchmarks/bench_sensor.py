"""Benchmark of a DeltaVersionSensor poke, next to deltalake, side by side in one run.

One poke of ``DeltaVersionSensor`` (watermark two versions below the head, so the poke
succeeds and reads the head commit's timestamp) on tables of 100 and 100,000 commits
(checkpoint every 10 commits), next to ``deltalake.DeltaTable(uri).version()`` on the same
tables. Goals: the 100k/100 ratio of the poke stays <= 1.5; the factor by which the poke
beats deltalake is printed per size.

The watermark comes from a fixed in-memory store so that only the table-side cost is
measured (reading an XCom or Variable costs the same whatever the table's size).

Run: ``.venv/bin/python benchmarks/bench_sensor.py [--sizes 100,100000] [--repeat 50]
[--workdir DIR]``. Tables are generated once into ``--workdir`` and reused (shared with
bench_core.py); the 100,000-commit table takes about a minute to write.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_core import median_seconds, print_side_by_side  # noqa: E402
from core_tables import build_table  # noqa: E402
from deltalake import DeltaTable  # noqa: E402

from airflow_provider_delta.sensors import DeltaVersionSensor  # noqa: E402
from airflow_provider_delta.watermarks import WatermarkStore  # noqa: E402

NEW_VERSIONS = 2


class FixedWatermark(WatermarkStore):
    """A watermark that never moves: each poke sees the same new versions."""

    def __init__(self, table_uri: str, version: int):
        super().__init__(key="bench", table_uri=table_uri)
        self.version = version

    def read(self, context) -> int:
        return self.version

    def write(self, context, version: int) -> None:
        raise NotImplementedError("the benchmark never advances its watermark")


def poking_sensor(path: Path, commits: int) -> DeltaVersionSensor:
    uri = str(path)
    sensor = DeltaVersionSensor(task_id=f"sense_{commits}", table_uri=uri,
                                watermark_store="variable")
    sensor.store = FixedWatermark(uri, commits - 1 - NEW_VERSIONS)
    found = sensor.poke({}).xcom_value
    assert (found["start_version"], found["end_version"]) == (commits - NEW_VERSIONS, commits - 1)
    return sensor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,100000", help="commit counts of the tables")
    parser.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "core-bench-tables"))
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    logging.getLogger("airflow_provider_delta").setLevel(logging.WARNING)  # one line per poke
    sizes = sorted(int(s) for s in args.sizes.split(","))
    tables = {}
    for commits in sizes:
        started = time.perf_counter()
        tables[commits] = build_table(Path(args.workdir) / f"commits-{commits}", commits)
        print(f"table of {commits:>7} commits ready in {time.perf_counter() - started:6.1f} s")

    sensors = {n: poking_sensor(path, n) for n, path in tables.items()}
    ours = median_seconds({n: (lambda s=s: s.poke({})) for n, s in sensors.items()}, args.repeat)
    theirs = median_seconds(
        {n: (lambda p=str(p): DeltaTable(p).version()) for n, p in tables.items()},
        max(3, args.repeat // 10),
    )
    results = {n: (ours[n], theirs[n]) for n in sizes}
    print_side_by_side(
        f"DeltaVersionSensor.poke (watermark {NEW_VERSIONS} below the head), local; "
        "deltalake: DeltaTable().version()",
        results, " (goal <= 1.5)",
    )
    for commits, (poke, version) in results.items():
        print(f"  {commits:>9} commits: the poke is {version / poke:,.0f}x faster than deltalake")


if __name__ == "__main__":
    main()
