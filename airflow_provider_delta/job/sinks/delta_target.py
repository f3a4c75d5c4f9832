"""What the two Delta sinks share: the target's log, asked through :class:`.target_log.TargetLog`,
and the refusals of a target that must not be written."""

from __future__ import annotations

from airflow_provider_delta.job.sinks.base import Sink
from airflow_provider_delta.job.sinks.target_log import TargetLog, require_app_id
from airflow_provider_delta.job.sinks.targets import (
    refuse_delta_target, refuse_source_table_id, refuse_unwritable_target,
)
from airflow_provider_delta.job.spec import SinkSpec
from airflow_provider_delta.storage import to_uri


class DeltaTargetSink(Sink):
    """A sink whose target is a Delta table carrying this provider's txn records.

    The target is opened once per job and brought up to date (only the commits since the last
    look) before each question on its log.
    """

    def __init__(self, spec: SinkSpec):
        require_app_id(spec)
        self.spec = spec
        self.uri = to_uri(spec.path)
        self._target = TargetLog(spec)

    def committed_version(self) -> int | None:
        return self._target.latest().committed_version()

    def held_through(self, first: int | None) -> int | None:
        return self._target.latest().held_through(first)

    def check_target(self, source_uri: str) -> None:
        """Not the source's location, not a file, not a folder of files of another kind, no
        table feature that nothing here can write (read from the log: before any Spark)."""
        refuse_delta_target(source_uri, self.uri, self.spec.storage_options,
                            lambda: self._target.latest().version)  # no deltalake handle
        self.refuse_unwritable(self._target.latest())

    def refuse_unwritable(self, target: TargetLog) -> None:
        """A target with a feature its commits cannot write (here: deltalake's merge)."""
        view = target.view()
        if view is not None:
            refuse_unwritable_target(self.uri, view.protocol, None, merge=True)

    def check_not_source(self, source_uri: str, source_table_id: str) -> None:
        refuse_source_table_id(self.uri, self._target.latest().table_id, source_uri,
                               source_table_id)
