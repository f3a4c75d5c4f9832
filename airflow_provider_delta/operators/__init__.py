"""Operators: incremental and time-travel loads of Delta tables through spark-submit."""

from airflow_provider_delta.operators.delta_load import (
    DeltaIncrementalOperator,
    DeltaTimeTravelOperator,
)

__all__ = ["DeltaIncrementalOperator", "DeltaTimeTravelOperator"]
