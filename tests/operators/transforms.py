"""Transforms the driver imports by name (``operators.transforms:...``) in the tests."""

from __future__ import annotations

from pyspark.sql import functions as F
from pyspark.sql.types import LongType


def add_batch_end(spark, df, context):
    """Tag rows with the batch's last source version (and check the context arrives)."""
    return df.withColumn("batch_end", F.lit(context["end_version"]).cast("long"))


def fail_inside_write(spark, df, context):
    """Rows of id 6 make the Spark tasks fail while the sink writes (a job killed mid-write)."""

    def explode(value):
        if value == 6:
            raise RuntimeError("injected failure during the Spark write")
        return value

    return add_batch_end(spark, df, context).withColumn("id", F.udf(explode, LongType())("id"))


def raise_error(spark, df, context):
    raise ValueError("the transform found bad data")
