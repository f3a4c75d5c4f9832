"""The incremental operator's range, decided by pure functions: where the load starts (one
:class:`LoadStart`) and its last version, a snapshot ending at its own version."""

from __future__ import annotations

import re

import pytest

from airflow_provider_delta.core import LoadStart
from airflow_provider_delta.errors import InvalidParameterError
from airflow_provider_delta.operators.load_range import (
    caught_up_unrecorded,
    explicit_range,
    sensor_range,
    watermark_range,
)
from airflow_provider_delta.watermarks import Watermark

WHERE = {"task_id": "load", "table_uri": "/data/source"}


def test_an_explicit_range_ends_at_end_version_else_at_the_latest():
    assert explicit_range(2, 4, None, **WHERE) == (LoadStart("changes", 2), 4)
    assert explicit_range(2, None, 7, **WHERE) == (LoadStart("changes", 2), 7)
    assert explicit_range(7, None, 7, **WHERE) == (LoadStart("changes", 7), 7)


@pytest.mark.parametrize(("end", "latest", "bound"), [
    (1, None, "end_version (1)"), (None, 3, "the latest version (3)")])
def test_an_empty_explicit_range_is_refused(end, latest, bound):
    with pytest.raises(InvalidParameterError, match=re.escape(f"start_version=4 is after {bound}")
                       ) as e:
        explicit_range(4, end, latest, **WHERE)
    assert e.value.parameter == "start_version" and "/data/source" in str(e.value)


def test_the_sensor_s_snapshot_goes_on_after_what_the_sink_holds():
    snapshot = {"mode": "snapshot", "start_version": 5, "end_version": 5}
    assert sensor_range(snapshot, None) == (LoadStart("snapshot", 5), 5)
    assert sensor_range(snapshot, 5) == (LoadStart("changes", 6), 5)  # nothing left to load
    changes = {"start_version": 3, "end_version": 8}  # written before the sensor named modes
    assert sensor_range(changes, 9) == (LoadStart("changes", 3), 8)  # the sink skips itself


def test_the_watermark_s_start_reads_up_to_the_latest_version():
    assert watermark_range(LoadStart("changes", 4), 9) == (LoadStart("changes", 4), 9)
    assert watermark_range(LoadStart("snapshot", 9), 9) == (LoadStart("snapshot", 9), 9)
    assert watermark_range(LoadStart("changes", 10), 9) is None


def test_catching_up_without_a_watermark_saying_so_is_recorded():
    start = LoadStart("changes", 10)
    assert caught_up_unrecorded(start, 9, None, "t1")
    assert caught_up_unrecorded(start, 9, Watermark(9, None), "t1")  # an id-less older write
    assert not caught_up_unrecorded(start, 9, Watermark(9, "t1"), "t1")
    assert not caught_up_unrecorded(LoadStart("changes", 12), 9, None, "t1")  # waits for 12
