"""Where a batch's rows go, each write committed exactly once.

* ``delta`` (:mod:`.delta_append`): Spark stages Parquet files inside the target, ``deltalake``
  commits them with the batch's ``txn``; ``delta-merge`` (:mod:`.delta_merge`): a change feed
  applied by key in one MERGE; ``delta-spark`` (:mod:`.delta_spark`): Delta's own writer with
  its idempotent-write options. All keep what they record in the target, and the rules on it,
  in :mod:`.target_log`, and refuse bad targets with :mod:`.targets`.
* ``format`` (:mod:`.format`): any Spark format, one folder per batch, overwritten on re-run;
  ``none``: the transform wrote by itself.
"""

from __future__ import annotations

from airflow_provider_delta.job.sinks.base import Sink, SinkWrite
from airflow_provider_delta.job.sinks.delta_append import DeltaAppendSink
from airflow_provider_delta.job.sinks.delta_merge import DeltaMergeSink
from airflow_provider_delta.job.sinks.delta_spark import DeltaSparkSink
from airflow_provider_delta.job.sinks.format import FormatSink, NoSink
from airflow_provider_delta.job.spec import SinkKind, SinkSpec

__all__ = ["DeltaAppendSink", "DeltaMergeSink", "DeltaSparkSink", "FormatSink", "NoSink", "Sink",
           "SinkWrite", "make_sink"]


def make_sink(spec: SinkSpec) -> Sink:
    """The sink a :class:`SinkSpec` describes."""
    kinds: dict[SinkKind, type[Sink]] = {
        SinkKind.DELTA: DeltaAppendSink, SinkKind.DELTA_MERGE: DeltaMergeSink,
        SinkKind.FORMAT: FormatSink,
    }
    if spec.kind == SinkKind.DELTA and spec.use_delta_spark:
        return DeltaSparkSink(spec)
    return kinds[spec.kind](spec) if spec.kind in kinds else NoSink()
