"""Operators: incremental and time-travel loads of Delta tables through spark-submit.

The operator classes are imported on first use: Airflow imports the extra link
(:mod:`.links`, listed in the provider info) in every install, also one without the ``spark``
or ``connect`` extra, where importing the operators raises ``MissingSparkExtraError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_delta.operators.delta_load import (
        DeltaIncrementalOperator,
        DeltaTimeTravelOperator,
    )

__all__ = ["DeltaIncrementalOperator", "DeltaTimeTravelOperator"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from airflow_provider_delta.operators import delta_load

        return getattr(delta_load, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
