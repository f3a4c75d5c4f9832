"""Every bad input of the table in docs/mistakes.rst: the error it gives, where, and that nothing was
written. Where no Spark job is needed the error comes in under a second."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .bad_inputs import CASES, DAG_PARSE, SPARK_JOB, Scene, case_id, rst_table


def _param(case):
    marks = [pytest.mark.xfail(strict=True, reason=case.in_progress)] if case.in_progress else []
    return pytest.param(case, id=case_id(case), marks=marks)


@pytest.mark.parametrize("case", [_param(case) for case in CASES])
def test_bad_input_is_refused_clearly_and_writes_nothing(case, tmp_path, monkeypatch, request,
                                                         private_tmp):
    scene = Scene(tmp_path / "scene", monkeypatch, request)

    with pytest.raises(case.error) as caught:
        case.attempt(scene)
    elapsed = time.perf_counter() - scene.started

    assert case.message.replace("{source}", scene.source) in str(caught.value)
    assert getattr(caught.value, "permanent", True)  # a retry cannot help any of these
    if case.stage != SPARK_JOB:
        assert scene.constructed == (case.stage != DAG_PARSE)
        assert elapsed < 1.0
    assert scene.files() == scene.files_at_start
    assert list(private_tmp.iterdir()) == []


def test_at_least_sixty_bad_inputs():
    assert len(CASES) >= 60


def test_the_docs_show_every_case():
    page = (Path(__file__).resolve().parents[2] / "docs" / "mistakes.rst").read_text()
    assert rst_table() in page, "run scripts/bad_inputs_table.py and paste its table"
