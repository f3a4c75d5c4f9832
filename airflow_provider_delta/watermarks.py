"""Watermarks: the last table version a pipeline has fully processed.

The orchestrator, not the table, owns the watermark. One small interface, three stores:

``"xcom"``
    An XCom under ``key`` of task ``task_id`` (default: the task that reads it), read across
    DAG runs with ``include_prior_dates=True``. The task that finishes the load writes it.
``"variable"``
    The Airflow Variable ``key`` holding JSON ``{table_uri: version, ...}``, so one Variable can
    carry the watermarks of several tables. A write is read back: a Variable shadowed by a
    secrets backend would otherwise silently keep its old value.
``"asset_state"``
    The asset state store of Airflow >= 3.3 (AIP-103): ``key`` inside the state of ``asset``
    (an :class:`~airflow.sdk.Asset`, or its name), or of the task's only inlet/outlet when
    ``asset`` is not given. It lasts across runs and belongs to the asset, not to a DAG.

Every store returns ``None`` when there is no watermark yet and raises
:class:`~airflow_provider_delta.errors.WatermarkError` for a malformed one. Writes raise on
failure; a lost watermark write would reload (or skip) data silently.

:func:`resolve_start_version` turns a stored watermark into the first version to read.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Union

from airflow_provider_delta.errors import WatermarkError

if TYPE_CHECKING:
    from airflow.sdk import Asset, Context

log = logging.getLogger(__name__)

Initial = Union[Literal["latest", "earliest"], int]
STORE_KINDS = ("xcom", "variable", "asset_state")


class WatermarkStore(ABC):
    """Where a pipeline keeps the last fully processed version of one table."""

    def __init__(self, *, key: str, table_uri: str):
        self.key = key
        self.table_uri = table_uri

    @abstractmethod
    def read(self, context: Context) -> int | None:
        """The last fully processed version, or ``None`` if nothing was processed yet."""

    @abstractmethod
    def write(self, context: Context, version: int) -> None:
        """Record ``version`` as fully processed; raises if the value could not be stored."""

    def _checked(self, raw: Any, where: str) -> int | None:
        """Validate a raw stored value: ``None`` (no watermark) or a version >= 0."""
        if raw is None:
            return None
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
            raise WatermarkError(
                f"{self.table_uri}: the watermark in {where} is {raw!r}, not a table version "
                "(an int >= 0). Fix or delete it; with no watermark the `initial` setting decides "
                "where loading starts.",
                table_uri=self.table_uri,
            )
        return raw

    def _require_version(self, version: int) -> None:
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise WatermarkError(
                f"{self.table_uri}: refusing to store watermark {version!r} under {self.key!r}; "
                "a watermark is a table version (an int >= 0).",
                table_uri=self.table_uri,
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key={self.key!r}, table_uri={self.table_uri!r})"


class XComWatermarkStore(WatermarkStore):
    """Watermark in an XCom of ``task_id``, read from the latest run that has one."""

    def __init__(self, *, key: str, table_uri: str, task_id: str | None = None):
        super().__init__(key=key, table_uri=table_uri)
        self.task_id = task_id

    def read(self, context: Context) -> int | None:
        ti = context["ti"]
        task_id = self.task_id or ti.task_id
        # map_indexes=-1 asks for the single, newest matching value of an unmapped task.
        raw = ti.xcom_pull(task_ids=task_id, key=self.key, include_prior_dates=True, map_indexes=-1)
        return self._checked(raw, f"XCom {self.key!r} of task {task_id!r}")

    def write(self, context: Context, version: int) -> None:
        self._require_version(version)
        context["ti"].xcom_push(key=self.key, value=version)
        log.info("Watermark of %s is now %d (XCom %r)", self.table_uri, version, self.key)


class VariableWatermarkStore(WatermarkStore):
    """Watermark in an Airflow Variable holding JSON ``{table_uri: version}``."""

    def _load(self) -> dict[str, Any]:
        from airflow.sdk import Variable

        text = Variable.get(self.key, default=None)
        if text is None or text == "":
            return {}
        try:
            value = json.loads(text)
        except (TypeError, ValueError) as err:
            raise self._malformed(f"is not JSON ({err})") from None
        if not isinstance(value, dict):
            raise self._malformed(f"holds {type(value).__name__} {value!r}, not an object")
        return value

    def _malformed(self, problem: str) -> WatermarkError:
        return WatermarkError(
            f"{self.table_uri}: Airflow Variable {self.key!r} {problem}; it must hold JSON like "
            f'{{"{self.table_uri}": 42}}. Fix the Variable, or delete it to start over with '
            "the `initial` setting.",
            table_uri=self.table_uri,
        )

    def read(self, context: Context) -> int | None:
        return self._checked(self._load().get(self.table_uri), f"Airflow Variable {self.key!r}")

    def write(self, context: Context, version: int) -> None:
        from airflow.sdk import Variable

        self._require_version(version)
        watermarks = self._load()
        watermarks[self.table_uri] = version
        Variable.set(self.key, json.dumps(watermarks, sort_keys=True))
        stored = self._load().get(self.table_uri)
        if stored != version:
            raise WatermarkError(
                f"{self.table_uri}: wrote watermark {version} to Airflow Variable {self.key!r} but "
                f"it reads back as {stored!r}. A secrets backend defining {self.key!r} takes "
                "precedence over the metadata DB; remove it there or choose another key.",
                table_uri=self.table_uri,
                version=version,
            )
        log.info("Watermark of %s is now %d (Variable %r)", self.table_uri, version, self.key)


class AssetStateWatermarkStore(WatermarkStore):
    """Watermark in the asset state store (Airflow >= 3.3, AIP-103)."""

    def __init__(self, *, key: str, table_uri: str, asset: Asset | str | None = None):
        super().__init__(key=key, table_uri=table_uri)
        self.asset = asset

    def read(self, context: Context) -> int | None:
        raw = self._with_state(context, lambda state: state.get(self.key))
        return self._checked(raw, f"asset state {self.key!r}")

    def write(self, context: Context, version: int) -> None:
        self._require_version(version)
        self._with_state(context, lambda state: state.set(self.key, version))
        log.info("Watermark of %s is now %d (asset state %r)", self.table_uri, version, self.key)

    def _with_state(self, context: Context, action: Callable[[Any], Any]) -> Any:
        """Run ``action`` on the asset's state accessor, explaining why it is out of reach."""
        accessors = context.get("asset_state_store")
        if accessors is None:
            raise WatermarkError(
                f"{self.table_uri}: watermark store 'asset_state' needs the asset state store of "
                "Airflow >= 3.3, which this task's context lacks. Use watermark_store='xcom' or "
                "'variable', or upgrade Airflow.",
                table_uri=self.table_uri,
            )
        try:
            # Without an asset, the accessors forward to the task's only inlet/outlet.
            return action(accessors if self.asset is None else accessors[self._asset()])
        except (KeyError, ValueError) as err:
            raise WatermarkError(
                f"{self.table_uri}: watermark store 'asset_state' cannot reach the asset's state "
                f"({err}). Add the asset to the task's inlets or outlets, and name it with "
                "watermark_asset when the task has more than one.",
                table_uri=self.table_uri,
            ) from None

    def _asset(self) -> Asset:
        from airflow.sdk import Asset

        return Asset(name=self.asset) if isinstance(self.asset, str) else self.asset


def make_watermark_store(
    kind: str,
    *,
    key: str,
    table_uri: str,
    task_id: str | None = None,
    asset: Asset | str | None = None,
) -> WatermarkStore:
    """Build the store named ``kind`` (``"xcom"``, ``"variable"`` or ``"asset_state"``).

    ``task_id`` only applies to ``"xcom"`` (whose XCom holds the watermark; default: the task
    reading it), ``asset`` only to ``"asset_state"``.
    """
    if not key:
        raise WatermarkError(
            f"{table_uri}: watermark store {kind!r} needs a non-empty key.", table_uri=table_uri
        )
    if kind == "xcom":
        return XComWatermarkStore(key=key, table_uri=table_uri, task_id=task_id)
    if kind == "variable":
        return VariableWatermarkStore(key=key, table_uri=table_uri)
    if kind == "asset_state":
        return AssetStateWatermarkStore(key=key, table_uri=table_uri, asset=asset)
    raise WatermarkError(
        f"{table_uri}: unknown watermark store {kind!r}; choose one of {', '.join(STORE_KINDS)}.",
        table_uri=table_uri,
    )


def validate_store_kind(kind: str, task_id: str) -> str:
    """Check a ``watermark_store`` name when the DAG is parsed."""
    if kind not in STORE_KINDS:
        raise ValueError(
            f"{task_id}: watermark_store={kind!r} is unknown; choose one of {', '.join(STORE_KINDS)}."
        )
    return kind


def validate_initial(initial: Initial, table_uri: str) -> Initial:
    """Check an ``initial`` setting early, so a typo fails at DAG parse time, not at run time."""
    if initial in ("latest", "earliest"):
        return initial
    if isinstance(initial, int) and not isinstance(initial, bool) and initial >= 0:
        return initial
    raise WatermarkError(
        f"{table_uri}: initial={initial!r} is not valid; use 'latest' (start after the current "
        "version), 'earliest' (start at version 0) or a version number >= 0.",
        table_uri=table_uri,
    )


def resolve_start_version(
    store_value: int | None,
    *,
    initial: Initial,
    latest: int,
    table_uri: str,
    reset_if_ahead: bool = False,
) -> int:
    """The first version still to process, given the stored watermark and the latest version.

    With a watermark ``w`` this is ``w + 1``. Without one, ``initial`` decides, as Delta's
    streaming ``startingVersion`` does: ``"latest"`` starts after the current version (the
    current snapshot counts as done; only later commits are new), ``"earliest"`` starts at
    version 0, an int starts at that version.

    A watermark above ``latest`` means the table was recreated or replaced (or the watermark
    belongs to another table): that raises :class:`WatermarkError`, unless ``reset_if_ahead``
    asks to drop the watermark and apply ``initial`` instead.
    """
    validate_initial(initial, table_uri)
    if store_value is not None and store_value > latest:
        if not reset_if_ahead:
            raise WatermarkError(
                f"{table_uri}: the watermark says version {store_value} was processed, but the "
                f"table's latest version is {latest}; the table was probably recreated or "
                "replaced. Reset the watermark (delete it, or set reset_if_ahead=True to restart "
                "with the `initial` setting) after checking the table.",
                table_uri=table_uri,
                version=store_value,
            )
        log.warning(
            "%s: watermark %d is above latest version %d; resetting it as asked (initial=%r)",
            table_uri, store_value, latest, initial,
        )
        store_value = None
    if store_value is not None:
        return store_value + 1
    if initial == "latest":
        return latest + 1
    if initial == "earliest":
        return 0
    return initial
