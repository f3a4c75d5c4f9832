"""The change-feed benchmark's source with row tracking, written by delta-spark (deltalake
cannot write row tracking): ``commits`` appends of ``rows`` rows in all (one file each, the
columns of ``bench_change_feed.rows_of``), then with ``--where`` a copy-on-write DELETE or
UPDATE (``--change``) of the rows it selects. The Change Data Feed and deletion vectors are
off.

Run by ``bench_change_feed.py`` with the Python of ``.venv-delta-spark`` (pyspark 4.2 and
Delta's jars): ``python benchmarks/row_tracking_table.py PATH ROWS COMMITS [--change
delete|update --where PREDICATE]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.delta_spark.conftest import delta_confs  # noqa: E402

CHANGES = {"delete": "DELETE FROM {table} WHERE {where}",
           "update": "UPDATE {table} SET label = 'changed' WHERE {where}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("rows", type=int)
    parser.add_argument("commits", type=int)
    parser.add_argument("--change", choices=tuple(CHANGES), default="delete")
    parser.add_argument("--where", help="the changed rows (SQL); none without it")
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("row-tracking-table")
    for key, value in {**delta_confs(), "spark.ui.enabled": "false",
                       "spark.driver.memory": "2g"}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    table = f"delta.`{args.path}`"
    spark.sql(f"CREATE TABLE {table} (id long, value long, label string) USING delta "
              "TBLPROPERTIES ('delta.enableRowTracking' = 'true', "
              "'delta.enableDeletionVectors' = 'false')")
    per_commit = args.rows // args.commits
    for number in range(args.commits):
        low = number * per_commit
        spark.sql(f"INSERT INTO {table} SELECT /*+ COALESCE(1) */ id, id * 3, string(id) "
                  f"FROM range({low}, {low + per_commit})")
    if args.where:
        spark.sql(CHANGES[args.change].format(table=table, where=args.where))
    spark.stop()


if __name__ == "__main__":
    main()
