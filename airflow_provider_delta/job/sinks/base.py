"""What every sink answers: which source versions the target holds, and how a batch is written.

Kept apart from :mod:`.` (which picks the sink for a spec) so that the sinks import it without
importing each other.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class SinkWrite:
    """What one batch's write left in the target."""

    rows: int | None
    sink_version: int | None = None


class Sink(ABC):
    """One target. ``committed_version`` tells the driver which source versions are in already."""

    def committed_version(self) -> int | None:
        """The last source version the target holds for this job, None if unknown or none."""
        return None

    def held_through(self, first: int | None) -> int | None:
        """The last source version this job holds contiguously from ``first`` (None: from its
        first write); None if it holds none. Here, without ranges to tell: the last one."""
        return self.committed_version()

    def check(self, df: DataFrame) -> None:  # noqa: B027 - optional hook
        """Refuse rows that cannot be written, before anything is written."""

    def check_target(self, source_uri: str) -> None:  # noqa: B027 - optional hook
        """Refuse a target that must not be written, before any Spark starts."""

    def check_not_source(self, source_uri: str, source_table_id: str) -> None:  # noqa: B027
        """Refuse a target that is the source table under another name (its table id)."""

    def first_unwritten(self, start: int, end: int | None) -> int:
        """The first source version of ``start..end`` the target does not hold yet
        (``end + 1``: all of it)."""
        committed = self.committed_version()
        return start if committed is None else max(start, committed + 1)

    @abstractmethod
    def write(self, df: DataFrame | None, start_version: int, end_version: int) -> SinkWrite:
        """Write one batch (source versions ``start_version..end_version``)."""
