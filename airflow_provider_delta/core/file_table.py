"""A plan's files as one Arrow table, built column by column from the log's file actions.

Two shapes. *Raw actions* (:data:`RAW_SCHEMA`): AddFiles (and, for reconciliation,
RemoveFiles) as the log holds them -- encoded paths, serialized partition values, statistics
JSON -- with the version that committed each. The *file table* (:func:`file_table`): what a
reader needs, one row per file in plan order: ``version``, absolute decoded ``path``, ``size``,
``num_records``, ``deletion_vector`` (a struct, null without one) and ``partition_values``
(a struct of the partition columns by logical name, typed by the plan's end metadata).

Per-row Python runs only where values are rare or repeat: partition values are parsed once
per distinct value, paths are decoded only when they hold ``%``, absolute paths and
deletion vectors one by one.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from airflow_provider_delta.core.actions import (
    parse_partition_value, partition_keys, widen_partition_value,
)
from airflow_provider_delta.core.model import PlannedFile, TableMetadata
from airflow_provider_delta.core.storage import TableLocation

RAW_DV_TYPE = pa.struct([
    ("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int64()),
    ("sizeInBytes", pa.int64()), ("cardinality", pa.int64()),
])
RAW_SCHEMA = pa.schema([
    ("version", pa.int64()), ("is_add", pa.bool_()), ("path", pa.string()),
    ("data_change", pa.bool_()), ("size", pa.int64()), ("num_records", pa.int64()),
    ("partitionValues", pa.map_(pa.string(), pa.string())), ("deletionVector", RAW_DV_TYPE),
])
# the fields of an add/remove struct in a checkpoint that planning reads
CHECKPOINT_FIELDS = ("path", "size", "stats", "partitionValues", "deletionVector")
DV_TYPE = pa.struct([
    ("storage_type", pa.string()), ("path_or_inline_dv", pa.string()),
    ("size_in_bytes", pa.int64()), ("cardinality", pa.int64()), ("offset", pa.int64()),
])
_NUM_RECORDS = r'"numRecords"\s*:\s*(?P<n>\d+)'
_PRIMITIVE_TYPES = {
    "string": pa.string(), "long": pa.int64(), "integer": pa.int32(), "short": pa.int16(),
    "byte": pa.int8(), "float": pa.float32(), "double": pa.float64(), "boolean": pa.bool_(),
    "binary": pa.binary(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}


# -- raw actions ---------------------------------------------------------------------------

def raw_actions(actions: Sequence[tuple[int, bool, Mapping[str, Any]]]) -> pa.Table:
    """``(version, is_add, add or remove action)`` triples from JSON as raw actions."""
    def field(name: str) -> list[Any]:
        return [a.get(name) for _, _, a in actions]
    return pa.table({
        "version": pa.array([v for v, _, _ in actions], pa.int64()),
        "is_add": pa.array([is_add for _, is_add, _ in actions], pa.bool_()),
        "path": pa.array(field("path"), pa.string()),
        "data_change": pa.array([a.get("dataChange", True) for _, _, a in actions], pa.bool_()),
        "size": pa.array([int(s or 0) for s in field("size")], pa.int64()),
        "num_records": num_records(pa.array(field("stats"), pa.string())),
        "partitionValues": pa.array([list((p or {}).items()) for p in field("partitionValues")],
                                    RAW_SCHEMA.field("partitionValues").type),
        "deletionVector": pa.array([dv or None for dv in field("deletionVector")], RAW_DV_TYPE),
    }, schema=RAW_SCHEMA)


def raw_checkpoint_actions(struct: pa.StructArray, version: int, is_add: bool) -> pa.Table:
    """The non-null entries of a checkpoint's ``add`` (or ``remove``) column as raw actions."""
    present = struct.filter(struct.is_valid())
    names = {f.name for f in present.type}
    length = len(present)
    columns = {"version": pa.array(np.full(length, version, np.int64)),
               "is_add": pa.array(np.full(length, is_add, bool)),
               "data_change": pa.array(np.ones(length, bool))}
    for name in CHECKPOINT_FIELDS:
        target = pa.string() if name == "stats" else RAW_SCHEMA.field(name).type
        columns[name] = (present.field(name).cast(target) if name in names
                         else pa.nulls(length, target))
    columns["size"] = columns["size"].fill_null(0)
    columns["num_records"] = num_records(columns.pop("stats"))
    return pa.table(columns, schema=RAW_SCHEMA)


def json_adds(lines: Sequence[bytes], version: int, partition_names: Sequence[str]) -> pa.Table:
    """AddFile lines of commit ``version`` parsed by Arrow's JSON reader, as raw actions.

    ``partition_names`` are the keys to read from ``partitionValues`` (Arrow reads a JSON
    object into a struct of known fields). Raises ArrowInvalid on anything unexpected; the
    caller then parses the commit as Python objects, which also names a damaged line.
    """
    values_type = pa.struct([(name, pa.string()) for name in dict.fromkeys(partition_names)])
    add_type = pa.struct([
        ("path", pa.string()), ("dataChange", pa.bool_()), ("size", pa.int64()),
        ("stats", pa.string()), ("deletionVector", RAW_DV_TYPE),
        ("partitionValues", values_type)])
    data = b"\n".join(lines)
    parsed = pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(
        use_threads=False, block_size=len(data) + 1), parse_options=pj.ParseOptions(
        explicit_schema=pa.schema([("add", add_type)]), unexpected_field_behavior="ignore"))
    add = parsed.column("add").combine_chunks()
    if add.null_count or pc.any(pc.is_null(add.field("path"))).as_py():
        raise pa.ArrowInvalid("an add line without an add action or a path")
    length = len(add)
    return pa.table({
        "version": pa.array(np.full(length, version, np.int64)),
        "is_add": pa.array(np.ones(length, bool)),
        "path": add.field("path"),
        "data_change": pc.fill_null(add.field("dataChange"), True),
        "size": pc.fill_null(add.field("size"), 0),
        "num_records": num_records(add.field("stats")),
        "partitionValues": _struct_to_map(add.field("partitionValues")),
        "deletionVector": add.field("deletionVector"),
    }, schema=RAW_SCHEMA)


def _struct_to_map(values: pa.StructArray) -> pa.MapArray:
    """A struct of string fields as a map with one entry per field in every row."""
    names = values.type.names
    rows, width = len(values), len(names)
    keys = pa.array(names, pa.string()).take(pa.array(np.tile(np.arange(width), rows)))
    interleave = (np.arange(rows)[:, None] + np.arange(width)[None, :] * rows).ravel()
    fields = [pc.struct_field(values, [i]) for i in range(width)]
    items = (pa.concat_arrays(fields).take(pa.array(interleave)) if fields
             else pa.array([], pa.string()))
    offsets = pa.array((np.arange(rows + 1) * width).astype(np.int32))
    return pa.MapArray.from_arrays(offsets, keys, items)


def num_records(stats: pa.Array) -> pa.Array:
    """``numRecords`` from statistics JSON, without parsing the column statistics."""
    return pc.struct_field(pc.extract_regex(stats, _NUM_RECORDS), "n").cast(pa.int64())


def empty_raw_actions() -> pa.Table:
    return RAW_SCHEMA.empty_table()


def file_keys(raw: pa.Table) -> pa.Array:
    """Each action's logical-file identity: decoded path, plus the deletion vector's unique
    id when it has one (Delta's (path, dvId) key)."""
    paths = decoded_paths(raw.column("path").combine_chunks())
    vector = raw.column("deletionVector").combine_chunks()
    if vector.null_count == len(vector):
        return paths
    offset = vector.field("offset").cast(pa.string())
    dv_id = pc.binary_join_element_wise(
        vector.field("storageType"), vector.field("pathOrInlineDv"),
        pc.if_else(offset.is_null(), "", pc.binary_join_element_wise("@", offset, "")), "")
    return pc.if_else(vector.is_null(), paths,
                      pc.binary_join_element_wise(paths, dv_id, "\x00"))


def live_adds(checkpoint_adds: pa.Table, commit_actions: pa.Table) -> pa.Table:
    """The AddFiles live after the checkpoint's adds and then the commits' actions, in order.

    The last action on a (path, dvId) key wins: a checkpoint add is live unless a commit acts
    on its key, and a commit add is live unless a later commit action has its key.
    """
    if not len(commit_actions):
        return checkpoint_adds
    commit_keys = file_keys(commit_actions)
    winners = commit_actions.column("is_add")
    if pc.count_distinct(commit_keys).as_py() < len(commit_keys):
        order = pa.array(np.arange(len(commit_actions)))
        last = pa.table({"key": commit_keys, "order": order}).group_by("key").aggregate(
            [("order", "max")]).column("order_max")
        winners = pc.and_(pc.is_in(order, value_set=last), winners)
    survivors = pc.invert(pc.is_in(file_keys(checkpoint_adds), value_set=commit_keys))
    return pa.concat_tables([checkpoint_adds.filter(survivors), commit_actions.filter(winners)])


# -- the file table ------------------------------------------------------------------------

def file_table(raw: pa.Table, location: TableLocation, metadata_changes: Mapping[int, TableMetadata],
               end_metadata: TableMetadata) -> pa.Table:
    """Raw AddFiles (in plan order) as the file table; ``metadata_changes`` gives the metadata
    taking effect at each version, which types the partition values of the files from then on."""
    return pa.table({
        "version": raw.column("version"),
        "path": resolved_paths(raw.column("path").combine_chunks(), location),
        "size": raw.column("size"),
        "num_records": raw.column("num_records"),
        "deletion_vector": _deletion_vectors(raw.column("deletionVector").combine_chunks(),
                                             location),
        "partition_values": _partition_values(raw, metadata_changes, end_metadata),
    })


def objects_file_table(files: Sequence[PlannedFile], metadata: TableMetadata) -> pa.Table:
    """The file table of :class:`PlannedFile` objects (the change feed's plans), partition
    values typed by ``metadata``."""
    keys = partition_keys(metadata)
    vectors = [None if f.deletion_vector is None else vars(f.deletion_vector) for f in files]
    partitions = [{logical: widen_partition_value(f.partition_values.get(logical), type_name)
                   for logical, _, type_name in keys} for f in files]
    return pa.table({
        "version": pa.array([f.version for f in files], pa.int64()),
        "path": pa.array([f.path for f in files], pa.string()),
        "size": pa.array([f.size for f in files], pa.int64()),
        "num_records": pa.array([f.num_records for f in files], pa.int64()),
        "deletion_vector": pa.array(vectors, DV_TYPE),
        "partition_values": pa.array(partitions, pa.struct(_partition_types(metadata))),
    })


def decoded_paths(paths: pa.Array) -> pa.Array:
    """URI-decoded paths; only paths holding ``%`` go through Python."""
    encoded = pc.match_substring(paths, "%")
    if not pc.any(encoded).as_py():
        return paths
    decoded = [unquote(p) for p in paths.filter(encoded).to_pylist()]
    return pc.replace_with_mask(paths, encoded, pa.array(decoded, pa.string()))


def resolved_paths(paths: pa.Array, location: TableLocation) -> pa.Array:
    """Log paths as absolute decoded URIs (:meth:`TableLocation.resolve`, column-wise)."""
    decoded = decoded_paths(paths)
    absolute = pc.or_(pc.match_substring(paths, ":"), pc.starts_with(decoded, "/"))
    joined = pc.binary_join_element_wise(location.root_uri, decoded, "/")
    if not pc.any(absolute).as_py():
        return joined
    resolved = [location.resolve(p) for p in paths.filter(absolute).to_pylist()]
    return pc.replace_with_mask(joined, absolute, pa.array(resolved, pa.string()))


def _deletion_vectors(raw: pa.StructArray, location: TableLocation) -> pa.Array:
    present = raw.is_valid()
    if not pc.any(present).as_py():
        return pa.nulls(len(raw), DV_TYPE)
    storage = raw.field("storageType")
    path_or_inline = raw.field("pathOrInlineDv")
    absolute = pc.fill_null(pc.equal(storage, "p"), False)
    if pc.any(absolute).as_py():
        resolved = [location.resolve(p) for p in path_or_inline.filter(absolute).to_pylist()]
        path_or_inline = pc.replace_with_mask(path_or_inline, absolute,
                                              pa.array(resolved, pa.string()))
    children = [storage, path_or_inline, raw.field("sizeInBytes"), raw.field("cardinality"),
                raw.field("offset")]
    return pa.StructArray.from_arrays(children, fields=list(DV_TYPE), mask=pc.invert(present))


def arrow_type(type_name: str) -> pa.DataType:
    """The Arrow type of a primitive Delta type (as partition values use them)."""
    if type_name.startswith("decimal"):
        precision, scale = type_name[len("decimal("):-1].split(",")
        return pa.decimal128(int(precision), int(scale))
    return _PRIMITIVE_TYPES[type_name]


def _partition_values(raw: pa.Table, metadata_changes: Mapping[int, TableMetadata],
                      end_metadata: TableMetadata) -> pa.StructArray:
    """The partition columns by logical name, typed by the end metadata; each file's value is
    parsed under the metadata in force at its version, then widened."""
    end_types = _partition_types(end_metadata)
    if not end_types:
        return pa.repeat(pa.scalar({}, pa.struct([])), len(raw))
    starts = sorted(metadata_changes)
    versions = raw.column("version").to_numpy()
    segment = np.maximum(np.searchsorted(np.array(starts), versions, side="right") - 1, 0)
    values = raw.column("partitionValues").combine_chunks()
    if not len(raw) or (segment == segment[0]).all():
        start = starts[segment[0]] if len(raw) else starts[-1]
        return _typed_struct(values, metadata_changes[start], end_types)
    rows_per_segment = [np.flatnonzero(segment == index) for index in range(len(starts))]
    parts = [_typed_struct(values.take(pa.array(rows)), metadata_changes[start], end_types)
             for start, rows in zip(starts, rows_per_segment) if len(rows)]
    back = np.argsort(np.concatenate([rows for rows in rows_per_segment if len(rows)]))
    return pa.concat_arrays(parts).take(pa.array(back))


def _typed_struct(values: pa.MapArray, metadata: TableMetadata,
                  end_types: Mapping[str, pa.DataType]) -> pa.StructArray:
    arrays = [_typed(values, physical, logical, type_name, end_types[logical])
              for logical, physical, type_name in partition_keys(metadata)]
    return pa.StructArray.from_arrays(arrays, names=list(end_types))


def _partition_types(metadata: TableMetadata) -> dict[str, pa.DataType]:
    return {logical: arrow_type(type_name) for logical, _, type_name in partition_keys(metadata)}


def _typed(values: pa.MapArray, physical: str, logical: str, type_name: str,
           end_type: pa.DataType) -> pa.Array:
    """One partition column parsed once per distinct serialized value."""
    raw = _map_value(values, physical)
    if physical != logical:  # writers without column mapping keys may use the logical name
        raw = pc.coalesce(raw, _map_value(values, logical))
    encoded = raw.cast(pa.string()).dictionary_encode()
    end_name = _delta_name(end_type)
    parsed = [widen_partition_value(parse_partition_value(v, type_name), end_name)
              for v in encoded.dictionary.to_pylist()]
    return pa.array(parsed, end_type).take(encoded.indices)


def _map_value(values: pa.MapArray, key: str) -> pa.Array:
    """Each row's first value under ``key`` (null without one): the same as
    ``pc.map_lookup``, over the flattened entries, several times faster."""
    if values.offset and values.null_count:  # Arrow cannot mask a slice's offsets
        values = values.take(pa.array(np.arange(len(values))))
    mask = values.is_null() if values.null_count else None
    as_list = pa.ListArray.from_arrays(values.offsets, values.values, mask=mask)
    entries = pc.list_flatten(as_list)
    matches = pc.indices_nonzero(pc.equal(entries.field("key"), key))
    rows = pc.list_parent_indices(as_list).take(matches).to_numpy()
    first_match = np.full(len(values), -1)
    firsts = np.unique(rows, return_index=True)[1]
    first_match[rows[firsts]] = firsts
    found = entries.field("value").take(matches)
    return found.take(pa.array(first_match, mask=first_match < 0))


def _delta_name(arrow: pa.DataType) -> str:
    """The Delta type name ``widen_partition_value`` expects for an Arrow partition type."""
    if pa.types.is_decimal(arrow):
        return f"decimal({arrow.precision},{arrow.scale})"
    return next(name for name, known in _PRIMITIVE_TYPES.items() if known == arrow)
