"""Watermarks: the last table version a pipeline has fully processed.

The orchestrator, not the table, owns the watermark. A watermark is the version plus the id of
the table it was written for (``metaData.id``): a table dropped and recreated, or replaced, at
the same path has a new id and counts its versions from 0 again, so a version alone cannot
tell it from the old table once it has grown past the watermark. Stored values are
``{"version": v, "table_id": "..."}``; a plain int ``v`` (written before table ids were
recorded) still reads, without the id check. One small interface, three stores:

``"xcom"``
    An XCom under ``key`` of task ``task_id`` (default: the task that reads it), read across
    DAG runs with ``include_prior_dates=True``. The task that finishes the load writes it. A
    mapped task reads the XCom of its own map index: each mapped load has its own watermark.
``"variable"``
    The Airflow Variable ``<key>:<table_uri>``: one per (consumer, table), so tasks loading
    different tables never overwrite each other's watermarks. Airflow 3.0's spelling of it
    (each "/" as "|") and the older layout, JSON ``{table_uri: watermark, ...}`` in the
    Variable ``key``, still read. A write is read back: a Variable shadowed by a secrets
    backend would otherwise silently keep its old value.
``"asset_state"``
    The asset state store of Airflow >= 3.3 (AIP-103): ``key`` inside the state of ``asset``
    (an :class:`~airflow.sdk.Asset`, or its name), or of the task's only inlet/outlet when
    ``asset`` is not given. It lasts across runs and belongs to the asset, not to a DAG.

Every store returns ``None`` when there is no watermark yet and raises
:class:`~airflow_provider_delta.errors.WatermarkError` for a malformed one. Writes raise on
failure; a lost watermark write would reload (or skip) data silently. A write never moves a
watermark back (a lower version, or another table id) unless it is an explicit reset.

:func:`resolve_load_start` is the one start-version policy: where a load starts given the
watermark, ``initial`` and the sink's txn. The sensor, the trigger and the operator all use it.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Union

from airflow_provider_delta.core.model import LoadStart
from airflow_provider_delta.errors import InvalidParameterError, WatermarkError

if TYPE_CHECKING:
    from airflow_provider_delta.compat import Asset, Context

log = logging.getLogger(__name__)

Initial = Union[Literal["snapshot", "latest", "earliest"], int]
INITIAL_NAMES = ("snapshot", "latest", "earliest")
STORE_KINDS = ("xcom", "variable", "asset_state")
VARIABLE_KEY_LIMIT = 250  # Airflow's variable.key column


class Watermark(NamedTuple):
    """A stored watermark: the last fully processed version, and the table id it belongs to."""

    version: int
    table_id: str | None = None  # None: stored before table ids were recorded


class WatermarkStore(ABC):
    """Where a pipeline keeps the last fully processed version of one table.

    A store only gets and puts a raw JSON value; encoding, validation and logging are here.
    """

    def __init__(self, *, key: str, table_uri: str):
        self.key = key
        self.table_uri = table_uri

    @abstractmethod
    def _get(self, context: Context) -> Any:
        """The raw stored value, ``None`` if there is none."""

    @abstractmethod
    def _put(self, context: Context, value: Any) -> None:
        """Store the raw ``value``; raises if it could not be stored."""

    @abstractmethod
    def where(self, context: Context) -> str:
        """Where the watermark lives, for messages."""

    def read(self, context: Context) -> int | None:
        """The last fully processed version, or ``None`` if nothing was processed yet."""
        watermark = self.read_watermark(context)
        return None if watermark is None else watermark.version

    def read_watermark(self, context: Context) -> Watermark | None:
        """The stored version and table id, or ``None`` if nothing was processed yet."""
        return self._checked(self._get(context), self.where(context))

    def write(self, context: Context, version: int, table_id: str | None = None, *,
              reset: bool = False) -> None:
        """Record ``version`` of the table ``table_id`` as fully processed; raises on failure.

        A watermark never moves back (to a lower version, or from another table id) unless
        ``reset`` says so: a run that loaded less than another must not undo its progress.
        """
        self._require_version(version)
        if not reset:
            self._refuse_moving_back(context, version, table_id)
        self._put(context, encode_watermark(version, table_id))
        log.info("Watermark of %s is now %d, table id %s (%s)",
                 self.table_uri, version, table_id, self.where(context))

    def _refuse_moving_back(self, context: Context, version: int, table_id: str | None) -> None:
        stored = self.read_watermark(context)
        if stored is None or (stored.version <= version and stored.table_id in (None, table_id)):
            return
        raise WatermarkError(
            f"{self.table_uri}: refusing to move the watermark in {self.where(context)} from "
            f"version {stored.version} (table id {stored.table_id}) back to version {version} "
            f"(table id {table_id}); another run loaded further. Set reset_if_ahead=True to "
            "move it back on purpose, or delete the watermark.",
            table_uri=self.table_uri,
            version=version,
        )

    def _checked(self, raw: Any, where: str) -> Watermark | None:
        return parse_watermark(raw, table_uri=self.table_uri, where=where)

    def _require_version(self, version: int) -> None:
        if not _is_version(version):
            raise WatermarkError(
                f"{self.table_uri}: refusing to store watermark {version!r} under {self.key!r}; "
                "a watermark is a table version (an int >= 0).",
                table_uri=self.table_uri,
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key={self.key!r}, table_uri={self.table_uri!r})"


def parse_watermark(raw: Any, *, table_uri: str, where: str) -> Watermark | None:
    """Validate a raw stored value: ``None``, a version >= 0, or ``{"version", "table_id"}``."""
    if raw is None:
        return None
    stored = raw if isinstance(raw, dict) else {"version": raw}  # a plain int: no table id
    version, table_id = stored.get("version"), stored.get("table_id")
    if not _is_version(version) or not isinstance(table_id, (str, type(None))):
        raise WatermarkError(
            f"{table_uri}: the watermark in {where} is {raw!r}, not a table version "
            '(an int >= 0, or {"version": <int >= 0>, "table_id": <str>}). Fix or delete it; '
            "with no watermark the `initial` setting decides where loading starts.",
            table_uri=table_uri,
        )
    return Watermark(version, table_id)


def encode_watermark(version: int, table_id: str | None) -> int | dict[str, Any]:
    """The stored form of a watermark (a plain int only when the table id is unknown)."""
    return version if table_id is None else {"version": version, "table_id": table_id}


def _is_version(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class XComWatermarkStore(WatermarkStore):
    """Watermark in an XCom of ``task_id``, of the reader's map index, from the latest run."""

    def __init__(self, *, key: str, table_uri: str, task_id: str | None = None):
        super().__init__(key=key, table_uri=table_uri)
        self.task_id = task_id

    def where(self, context: Context) -> str:
        return f"XCom {self.key!r} of task {self.task_id or context['ti'].task_id!r}"

    def _get(self, context: Context) -> Any:
        ti = context["ti"]
        # The same map index: each mapped task instance keeps its own watermark (-1: unmapped).
        return ti.xcom_pull(task_ids=self.task_id or ti.task_id, key=self.key,
                            include_prior_dates=True, map_indexes=ti.map_index)

    def _put(self, context: Context, value: Any) -> None:
        context["ti"].xcom_push(key=self.key, value=value)


class VariableWatermarkStore(WatermarkStore):
    """Watermark in the Airflow Variable ``<key>:<table_uri>`` (each "/" as "|" on Airflow 3.0:
    :func:`~airflow_provider_delta.compat.variable_key`), one per (consumer, table).

    One Variable per table: two tasks writing the watermarks of two tables never
    read-modify-write the same Variable, so neither can undo the other's write.

    A read takes the first of: the Variable ``<key>:<table_uri>``; on every Airflow but 3.0,
    the Variable Airflow 3.0 wrote (each "/" as "|"), so an upgrade from 3.0 keeps the
    watermark; the older layout, JSON ``{table_uri: watermark}`` in the Variable ``key``. A
    write stores ``<key>:<table_uri>`` and, once that reads back, deletes the 3.0 Variable:
    left behind, it would come back as the watermark when ``<key>:<table_uri>`` is deleted to
    start over with ``initial``. The older layout is left as it is (other tables may still
    read it).

    Airflow 3.0's spelling cannot tell "/" from "|": table URIs that differ only there (``a/b``
    and ``a|b``) shared one Variable on 3.0, and after the upgrade each of them reads it and
    the first write deletes it. A watermark with a table id of the other table fails the id
    check (:func:`watermark_for_table`); a plain int cannot be checked.
    """

    def __init__(self, *, key: str, table_uri: str):
        from airflow_provider_delta.compat import variable_key, variable_key_of_airflow_3_0

        super().__init__(key=key, table_uri=table_uri)
        self.variable = variable_key(f"{key}:{table_uri}")
        on_3_0 = variable_key_of_airflow_3_0(f"{key}:{table_uri}")
        self.variable_of_3_0 = None if on_3_0 == self.variable else on_3_0  # None: on 3.0 itself
        if len(self.variable) > VARIABLE_KEY_LIMIT:
            raise WatermarkError(
                f"{table_uri}: the watermark Variable {self.variable!r} would be longer than "
                f"Airflow's {VARIABLE_KEY_LIMIT} characters; choose a shorter watermark_key.",
                table_uri=table_uri,
            )

    def where(self, context: Context) -> str:
        return f"Airflow Variable {self.variable!r}"

    def _get(self, context: Context) -> Any:
        for variable in filter(None, (self.variable, self.variable_of_3_0)):
            text = _variable_text(variable)
            if text is not None:
                return self._decoded(text, variable)
        return self._shared_layout().get(self.table_uri)

    def _shared_layout(self) -> dict[str, Any]:
        """The older layout: ``{table_uri: watermark}`` in the Variable ``key``."""
        text = _variable_text(self.key)
        value = {} if text is None else self._decoded(text, self.key)
        if not isinstance(value, dict):
            raise self._malformed(self.key, f"holds {type(value).__name__} {value!r}, not an object")
        return value

    def _decoded(self, text: str, variable: str) -> Any:
        try:
            return json.loads(text)
        except (TypeError, ValueError) as err:
            raise self._malformed(variable, f"is not JSON ({err})") from None

    def _malformed(self, variable: str, problem: str) -> WatermarkError:
        return WatermarkError(
            f"{self.table_uri}: Airflow Variable {variable!r} {problem}; it must hold JSON like "
            f'{{"version": 42, "table_id": "<id>"}} (Variable {self.variable!r}) or '
            f'{{"{self.table_uri}": 42}} (Variable {self.key!r}). Fix the Variable, or delete '
            "it to start over with the `initial` setting.",
            table_uri=self.table_uri,
        )

    def _put(self, context: Context, value: Any) -> None:
        from airflow_provider_delta.compat import Variable

        Variable.set(self.variable, json.dumps(value, sort_keys=True))
        stored = self._get(context)
        if stored != value:
            raise WatermarkError(
                f"{self.table_uri}: wrote watermark {value!r} to Airflow Variable "
                f"{self.variable!r} but it reads back as {stored!r}. A secrets backend defining "
                f"{self.variable!r} takes precedence over the metadata DB; remove it there or "
                "choose another key.",
                table_uri=self.table_uri,
            )
        self._delete_variable_of_3_0()

    def _delete_variable_of_3_0(self) -> None:
        """Delete the Variable Airflow 3.0 wrote, now that ``self.variable`` holds the watermark.
        A failed delete only warns: the watermark is written and takes precedence."""
        from airflow_provider_delta.compat import Variable

        if self.variable_of_3_0 is None or _variable_text(self.variable_of_3_0) is None:
            return
        try:
            Variable.delete(self.variable_of_3_0)
        except Exception as err:  # noqa: BLE001 - the watermark itself is stored
            log.warning("%s: the watermark is now in Airflow Variable %r, but Airflow 3.0's "
                        "Variable %r could not be deleted (%s). Delete it by hand: deleting "
                        "%r would otherwise bring its watermark back.", self.table_uri,
                        self.variable, self.variable_of_3_0, err, self.variable)
        else:
            log.info("%s: moved the watermark from Airflow 3.0's Variable %r to %r",
                     self.table_uri, self.variable_of_3_0, self.variable)


def _variable_text(name: str) -> str | None:
    from airflow_provider_delta.compat import Variable

    text = Variable.get(name, None)  # default: `default` on 3.x, `default_var` on 2.x
    return None if text == "" else text


class AssetStateWatermarkStore(WatermarkStore):
    """Watermark in the asset state store (Airflow >= 3.3, AIP-103)."""

    def __init__(self, *, key: str, table_uri: str, asset: Asset | str | None = None):
        super().__init__(key=key, table_uri=table_uri)
        self.asset = asset

    def where(self, context: Context) -> str:
        return f"asset state {self.key!r}"

    def _get(self, context: Context) -> Any:
        return self._with_state(context, lambda state: state.get(self.key))

    def _put(self, context: Context, value: Any) -> None:
        self._with_state(context, lambda state: state.set(self.key, value))

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
        from airflow_provider_delta.compat import Asset

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


def validate_store_kind(kind: str, task_id: str | None, table_uri: str | None = None) -> str:
    """Check a ``watermark_store`` name when the DAG is parsed."""
    if kind not in STORE_KINDS:
        raise InvalidParameterError(task_id, "watermark_store", kind, "is unknown",
                                    f"choose one of {', '.join(STORE_KINDS)}", table_uri)
    if kind == "asset_state":
        from airflow_provider_delta.compat import ASSET_STATE, require_airflow

        require_airflow(ASSET_STATE, f"give {task_id} watermark_store='xcom' or 'variable'")
    return kind


def validate_initial(initial: Initial, table_uri: str, task_id: str | None = None) -> Initial:
    """Check an ``initial`` setting early, so a typo fails at DAG parse time, not at run time."""
    if initial in INITIAL_NAMES:
        return initial
    if isinstance(initial, int) and not isinstance(initial, bool) and initial >= 0:
        return initial
    raise InvalidParameterError(
        task_id, "initial", initial, "is not a start without a watermark",
        "use 'snapshot' (load the current snapshot, then its changes), 'latest' (start after "
        "the current version), 'earliest' (start at version 0) or a version number >= 0",
        table_uri)


def resolve_load_start(
    stored: Watermark | None,
    *,
    table_id: str | None,
    latest: int,
    initial: Initial,
    table_uri: str,
    reset_if_ahead: bool = False,
    sink_held_through: Callable[[int | None], int | None] | None = None,
    latest_for_initial: Callable[[int], int] | None = None,
) -> LoadStart:
    """The start-version policy of the sensor, the trigger and the operator, in this order:

    1. A watermark ``w`` of this table: the changes from ``w + 1``.
    2. Otherwise ``initial``, as Delta's streaming source: ``"snapshot"`` (Delta's default)
       the snapshot at ``latest``, then its changes; ``"latest"`` the changes after
       ``latest`` (``latest_for_initial(latest)``: a sensor keeps the version of its first
       poke); ``"earliest"`` the changes from version 0; an int the changes from there.
    3. Unless the sink already holds what ``initial`` would load first (a run committed, then
       died before storing its watermark, or the watermark was lost or cleared since):
       ``sink_held_through(first)`` is the last version this task's commits hold without a
       hole from ``first`` (``None``: from its first commit). A snapshot (``first`` = 0) and
       ``"latest"`` (from the first commit: the latest version of the first run is not known
       any more) go on with the changes after it. ``"earliest"`` and an int need nothing
       here: the sink resumes after its commits from their start itself.

    A watermark above ``latest`` or written for another table id (dropped and recreated, or
    replaced) raises :class:`WatermarkError`, unless ``reset_if_ahead`` drops it (step 2).
    """
    validate_initial(initial, table_uri)
    watermark = _watermark_in_force(stored, table_id, latest=latest, table_uri=table_uri,
                                    reset_if_ahead=reset_if_ahead)
    if watermark is not None:
        return LoadStart("changes", watermark + 1)
    if initial in ("snapshot", "latest") and sink_held_through is not None:
        held = sink_held_through(0 if initial == "snapshot" else None)
        if held is not None:
            return _after_sink(held, latest=latest, table_uri=table_uri)
    if initial == "snapshot":
        return LoadStart("snapshot", latest)
    if initial == "latest":
        return LoadStart("changes", (latest_for_initial or int)(latest) + 1)
    return LoadStart("changes", 0 if initial == "earliest" else initial)


def continue_after_sink(start: LoadStart, held: int | None) -> LoadStart:
    """A snapshot whose rows the sink holds already (this task's commits up to ``held``, from
    version 0) goes on with the changes after them."""
    if start.mode == "snapshot" and held is not None:
        log.info("The sink holds the source up to version %d already; loading the changes "
                 "after it instead of a new snapshot", held)
        return LoadStart("changes", held + 1)
    return start


def _after_sink(held: int, *, latest: int, table_uri: str) -> LoadStart:
    """Without a watermark, the changes after what the sink holds (``held``)."""
    if held > latest:
        raise WatermarkError(
            f"{table_uri}: there is no watermark, and the sink holds this task's load of "
            f"version {held}, but the table's latest version is {latest}; the table was "
            "probably recreated or replaced. Write to a new target, or give an explicit "
            "start_version, after checking the table.",
            table_uri=table_uri, version=held,
        )
    log.info("No watermark, but the sink holds the source up to version %d already (this "
             "task's commits); loading the changes after it", held)
    return LoadStart("changes", held + 1)


def _watermark_in_force(
    stored: Watermark | None, table_id: str | None, *, latest: int, table_uri: str,
    reset_if_ahead: bool,
) -> int | None:
    """The stored version, unless it belongs to another table or lies above ``latest``."""
    version = watermark_for_table(stored, table_id, table_uri=table_uri,
                                  reset_if_ahead=reset_if_ahead)
    if version is None or version <= latest:
        return version
    if not reset_if_ahead:
        raise WatermarkError(
            f"{table_uri}: the watermark says version {version} was processed, but the "
            f"table's latest version is {latest}; the table was probably recreated or "
            "replaced. Reset the watermark (delete it, or set reset_if_ahead=True to restart "
            "with the `initial` setting) after checking the table.",
            table_uri=table_uri,
            version=version,
        )
    log.warning("%s: watermark %d is above latest version %d; resetting it as asked",
                table_uri, version, latest)
    return None


def watermark_for_table(
    stored: Watermark | None,
    table_id: str | None,
    *,
    table_uri: str,
    reset_if_ahead: bool = False,
) -> int | None:
    """The stored version, if the watermark was written for the table now at ``table_uri``.

    Another table id means the table was dropped and recreated, or replaced, at the same path:
    its versions count from 0 again, so reading from the old watermark would skip them. That
    raises :class:`WatermarkError`, unless ``reset_if_ahead`` asks to drop the watermark
    (``None``: ``initial`` decides). A watermark stored without an id (older writes) or an
    unknown current id is not checked.
    """
    if stored is None or None in (stored.table_id, table_id) or stored.table_id == table_id:
        return None if stored is None else stored.version
    if not reset_if_ahead:
        raise WatermarkError(
            f"{table_uri}: the watermark (version {stored.version}) was written for table id "
            f"{stored.table_id}, but the table there now has id {table_id}; it was dropped and "
            "recreated, or replaced. Set reset_if_ahead=True to restart with the `initial` "
            "setting, or clear the watermark, after checking the table.",
            table_uri=table_uri,
            version=stored.version,
        )
    log.warning(
        "%s: watermark %d belongs to table id %s, the table now has id %s; resetting it as asked",
        table_uri, stored.version, stored.table_id, table_id,
    )
    return None
