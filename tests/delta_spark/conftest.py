"""Delta's own Spark jars beside this provider: one Delta-enabled SparkSession per test run.

Delta publishes jars per Spark line; the newest, io.delta:delta-spark_2.13:4.4.0, is built for
Spark 4.2 (it fails on 4.3 with a NoSuchMethodError in LogicalRDD). These tests run in
``.venv-delta-spark`` (pyspark 4.2.0, ``bash scripts/dev.sh test-delta-spark``) and skip
elsewhere. The jars come from Maven Central through ``spark.jars.packages`` into ``./.ivy2``
(cold in a fresh clone); what Spark bundles already is excluded.
"""

from __future__ import annotations

import importlib.util
import logging

import pytest

from tests.conftest import S3A_EXCLUDES, S3A_PACKAGES, maven_confs

# Spark line -> the Delta release whose jars are built for it.
DELTA_FOR_SPARK = {"4.2": "4.4.0"}


def _spark_line() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return None
    import pyspark

    return ".".join(pyspark.__version__.split(".")[:2])


DELTA_VERSION = DELTA_FOR_SPARK.get(_spark_line() or "")
HAS_DELTA_JARS = DELTA_VERSION is not None and importlib.util.find_spec("delta") is not None
needs_delta_jars = pytest.mark.skipif(
    not HAS_DELTA_JARS, reason="Delta's jars exist for Spark 4.2 (bash scripts/dev.sh "
    "test-delta-spark runs these on pyspark 4.2.0)")

# Transitive dependencies of delta-spark that Spark ships itself (other versions of them would
# only be downloaded and shadowed).
SPARK_SHIPS = (
    "org.apache.hadoop:hadoop-client-api", "org.apache.hadoop:hadoop-client-runtime",
    "org.apache.parquet:parquet-column", "org.apache.parquet:parquet-common",
    "org.apache.parquet:parquet-encoding", "org.apache.parquet:parquet-format-structures",
    "org.apache.parquet:parquet-hadoop", "org.apache.parquet:parquet-jackson",
    "com.github.luben:zstd-jni", "org.xerial.snappy:snappy-java",
    "org.apache.logging.log4j:log4j-api", "org.apache.logging.log4j:log4j-core",
    "org.apache.logging.log4j:log4j-slf4j2-impl", "org.slf4j:slf4j-api",
    "com.fasterxml.jackson.core:jackson-core", "com.fasterxml.jackson.core:jackson-databind",
    "com.fasterxml.jackson.core:jackson-annotations", "org.roaringbitmap:RoaringBitmap",
    "org.roaringbitmap:shims", "io.airlift:aircompressor", "com.google.code.findbugs:jsr305",
    "org.locationtech.jts:jts-core", "commons-logging:commons-logging", "commons-pool:commons-pool",
)


def delta_confs(with_s3a: bool = False) -> dict[str, str]:
    """The Spark confs that put Delta's jars (and hadoop-aws's), SQL extension and catalog in
    a session."""
    packages = (f"io.delta:delta-spark_2.13:{DELTA_VERSION}",
                *(S3A_PACKAGES if with_s3a else ()))
    return {
        **maven_confs(packages, SPARK_SHIPS + (S3A_EXCLUDES if with_s3a else ())),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Small tables: Delta's state reconstruction defaults to 50 shuffle partitions.
        "spark.databricks.delta.snapshotPartitions": "2",
    }


@pytest.fixture(scope="session")
def delta_spark():
    """One local SparkSession with Delta's jars for the run, in UTC (the jars are fetched
    once, on its start)."""
    if not HAS_DELTA_JARS:
        pytest.skip("no Delta jars for this Spark")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("delta-oracle-tests")
    confs = {**delta_confs(), "spark.sql.session.timeZone": "UTC",
             "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
             "spark.driver.memory": "2g"}
    for key, value in confs.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    assert session.conf.get("spark.sql.extensions") == confs["spark.sql.extensions"], (
        "a SparkSession without Delta's jars was started earlier in this process")
    yield session
    session.stop()
    logging.getLogger("py4j").setLevel(logging.WARNING)
