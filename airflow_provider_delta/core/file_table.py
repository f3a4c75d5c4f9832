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

import datetime as dt
import functools
import io
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from airflow_provider_delta.core.actions import (
    parse_partition_value, partition_keys, widen_partition_value,
)
from airflow_provider_delta.core.arrow import (
    combined, from_numpy, full, holds_character, nulls, scalar, strings, to_numpy,
)
from airflow_provider_delta.core.model import TableMetadata
from airflow_provider_delta.core.delta_log import TableLocation

RAW_DV_TYPE = pa.struct([
    ("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int64()),
    ("sizeInBytes", pa.int64()), ("cardinality", pa.int64()),
])
RAW_SCHEMA = pa.schema([
    ("version", pa.int64()), ("kind", pa.string()), ("path", pa.string()),
    ("data_change", pa.bool_()), ("size", pa.int64()), ("num_records", pa.int64()),
    ("partitionValues", pa.map_(pa.string(), pa.string())), ("deletionVector", RAW_DV_TYPE),
])
# a deletion vector's field that tells whether a file action has one
_DV_SENTINEL = pa.struct([("storageType", pa.string())])
# the fields of an add/remove struct in a checkpoint that planning reads
CHECKPOINT_FIELDS = ("path", "size", "stats", "partitionValues", "deletionVector")
# where a checkpoint has statistics as a struct too, the one field of them planning reads
PARSED_NUM_RECORDS = ("stats_parsed", "numRecords")
# rows of file actions converted at a time where a plan is big (a snapshot's checkpoint)
CHUNK_ROWS = 1 << 16
# the columns of a plan's file table
PLAN_COLUMNS = ("version", "path", "size", "num_records", "deletion_vector", "partition_values")
DV_TYPE = pa.struct([
    ("storage_type", pa.string()), ("path_or_inline_dv", pa.string()),
    ("size_in_bytes", pa.int64()), ("cardinality", pa.int64()), ("offset", pa.int64()),
])
_NUM_RECORDS = r'"numRecords"\s*:\s*(?P<n>\d+)'
# the statistics writers put numRecords first in: matched anchored, several times faster
_LEADING_NUM_RECORDS = r'^\{"numRecords":(?P<n>\d+)'
_JSON_BLOCK = 1 << 20  # bytes of JSON lines Arrow parses per block
_ALONE_BYTES = 1 << 18  # a commit this big is parsed alone (a call costs less than counting)
_PARSERS = 2  # threads parsing big commits: the reader's own threads split a commit less well
_PRIMITIVE_TYPES = {
    "string": pa.string(), "long": pa.int64(), "integer": pa.int32(), "short": pa.int16(),
    "byte": pa.int8(), "float": pa.float32(), "double": pa.float64(), "boolean": pa.bool_(),
    "binary": pa.binary(), "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}


# -- raw actions ---------------------------------------------------------------------------

def json_file_actions(commits: Sequence[tuple[int, bytes]], partition_names: Iterable[str],
                      kinds: Sequence[str] = ("add", "remove"),
                      long_fields: Sequence[str] = (), vectors: bool = True) -> pa.Table:
    """The file actions of ``kinds`` (``add``, ``remove``, ``cdc``) in ``(version, text)``
    commits (newline-delimited actions; the others are skipped) as raw actions, parsed by
    Arrow's JSON reader in one pass; plus a column per name of ``long_fields`` (integer
    fields of the actions, such as row tracking's ``baseRowId``; null where absent).

    ``partition_names`` are the keys to read from ``partitionValues`` (Arrow reads a JSON
    object into a struct of known fields). Raises ArrowInvalid on anything unexpected (for
    several commits: also when their lines cannot be told apart); the caller then parses the
    commits one by one. ``vectors=False`` (no protocol in force allows deletion vectors) reads
    one field of them instead of five, and reads again with all if a vector shows up anyway.
    """
    commits = [(version, text) for version, text in commits if not blank(text)]
    if not commits:
        return empty_raw_actions(long_fields)
    if len(commits) > 1 and any(len(text) >= _ALONE_BYTES for _, text in commits):
        def parsed_batch(batch: list[tuple[int, bytes]]) -> pa.Table:
            return json_file_actions(batch, partition_names, kinds, long_fields, vectors)
        # Arrow's reader lets go of the GIL: big commits are parsed side by side (in order,
        # the first failure raised, as one after another would)
        with ThreadPoolExecutor(_PARSERS, thread_name_prefix="delta-provider-parse") as pool:
            return pa.concat_tables(pool.map(parsed_batch, _batches(commits)))
    values_type = pa.struct([(name, pa.string()) for name in dict.fromkeys(partition_names)])
    # a field costs Arrow's reader a value (or null) on every line: an empty struct too
    action_type = pa.struct([
        ("path", pa.string()), ("dataChange", pa.bool_()), ("size", pa.int64()),
        ("stats", pa.string()), ("deletionVector", RAW_DV_TYPE if vectors else _DV_SENTINEL),
        *([("partitionValues", values_type)] if values_type.num_fields else []),
        *((name, pa.int64()) for name in long_fields)])
    parsed = _read_json(b"\n".join(text for _, text in commits),
                        pa.schema([(kind, action_type) for kind in kinds]))
    versions = _line_versions(commits, parsed.num_rows)
    actions = [parsed.column(kind) for kind in kinds]
    if not vectors and any(pc.struct_field(action, "deletionVector").null_count < len(action)
                           for action in actions):
        return json_file_actions(commits, partition_names, kinds, long_fields)
    present = [pc.is_valid(action) for action in actions]
    code = np.select([to_numpy(valid) for valid in present], range(len(kinds)), default=-1)
    is_file = from_numpy(code >= 0)

    def field(name: str) -> pa.ChunkedArray:
        """The field of each file action (no copy of the other fields, as ``if_else`` on the
        structs would make)."""
        value = pc.struct_field(actions[0], name)
        for action, valid in zip(actions[1:], present[1:]):
            if action.null_count < len(action):
                value = pc.if_else(valid, pc.struct_field(action, name), value)
        return value.filter(is_file)

    path = field("path")
    if path.null_count:
        raise pa.ArrowInvalid("a file action without a path")
    return pa.table({
        "version": versions.filter(is_file),
        "kind": strings(kinds).take(from_numpy(code[code >= 0])),
        "path": path,
        "data_change": pc.fill_null(field("dataChange"), scalar(True)),
        "size": pc.fill_null(field("size"), scalar(0)),
        # only an AddFile's statistics matter (RemoveFiles only take files away)
        "num_records": num_records(pc.struct_field(actions[0], "stats")).filter(is_file),
        "partitionValues": (_struct_to_map(field("partitionValues").combine_chunks())
                            if values_type.num_fields else _empty_maps(len(path))),
        "deletionVector": field("deletionVector") if vectors else nulls(RAW_DV_TYPE, len(path)),
        **{name: field(name) for name in long_fields},
    }, schema=raw_schema(long_fields))


def blank(text: bytes) -> bool:
    """Whether ``text`` is empty or whitespace (``strip()`` would copy a big commit)."""
    return not text or text.isspace()


def _batches(commits: Sequence[tuple[int, bytes]]) -> Iterator[list[tuple[int, bytes]]]:
    """The commits in order, runs of small ones together and each big one alone: a big
    commit's lines need no counting to tell their version (a pass over its text)."""
    batch: list[tuple[int, bytes]] = []
    for commit in commits:
        if len(commit[1]) < _ALONE_BYTES:
            batch.append(commit)
            continue
        if batch:
            yield batch
        batch = []
        yield [commit]
    if batch:
        yield batch


def _read_json(data: bytes, schema: pa.Schema) -> pa.Table:
    """Newline-delimited JSON read into ``schema`` block by block (in one block if a line is
    longer than a block). Threads make it slower on a loaded machine, and no quicker on two
    quiet cores."""
    def read(block_size: int) -> pa.Table:
        return pj.read_json(io.BytesIO(data), read_options=pj.ReadOptions(
            use_threads=False, block_size=block_size),
            parse_options=pj.ParseOptions(explicit_schema=schema,
                                          unexpected_field_behavior="ignore"))
    try:
        return read(_JSON_BLOCK)
    except pa.ArrowInvalid as exc:
        if "block" not in str(exc) or len(data) < _JSON_BLOCK:
            raise
        return read(len(data) + 1)


def _line_versions(commits: Sequence[tuple[int, bytes]], rows: int) -> pa.Array:
    """The version of each row Arrow read from the commits' text (one per line that is not
    blank); ArrowInvalid if the rows cannot be told apart that way."""
    if len(commits) == 1:
        return full(rows, commits[0][0])
    lines = np.array([_lines(text) for _, text in commits])
    if lines.sum() != rows:
        raise pa.ArrowInvalid("blank lines: the commits' rows cannot be told apart")
    return from_numpy(np.repeat(np.array([version for version, _ in commits], np.int64), lines))


def _lines(text: bytes) -> int:
    """Lines in ``text`` (exact unless some are blank: Arrow skips those)."""
    end = len(text)
    while end and text[end - 1] in b" \t\n\r\x0b\x0c":  # rstrip() would copy the text
        end -= 1
    return text.count(b"\n", 0, end) + 1 - text.count(b"\n\n", 0, end)


def checkpoint_add_columns(add_type: pa.StructType) -> list[str]:
    """The leaves of a checkpoint's ``add`` column that :func:`raw_checkpoint_adds` needs:
    of the statistics, ``stats_parsed.numRecords`` where the checkpoint has it (8 bytes a
    file), else the JSON (hundreds)."""
    names = {f.name for f in add_type}
    parsed, count = PARSED_NUM_RECORDS
    with_parsed = parsed in names and add_type.field(parsed).type.get_field_index(count) >= 0
    fields = [name for name in CHECKPOINT_FIELDS if name in names
              and not (with_parsed and name == "stats")]
    return [f"add.{name}" for name in fields] + ([f"add.{parsed}.{count}"] if with_parsed else [])


def raw_checkpoint_adds(struct: pa.StructArray, version: int) -> pa.Table:
    """The non-null entries of a checkpoint's ``add`` column (the leaves
    :func:`checkpoint_add_columns` names) as raw actions."""
    present = struct.filter(struct.is_valid())
    names = {f.name for f in present.type}
    length = len(present)
    columns = {"version": full(length, version),
               "kind": strings(["add"]).take(full(length, 0)),
               "data_change": full(length, True, bool)}
    for name in CHECKPOINT_FIELDS:
        target = pa.string() if name == "stats" else RAW_SCHEMA.field(name).type
        value = present.field(name) if name in names else None
        columns[name] = (value.cast(target) if value is not None and value.null_count < length
                         else nulls(target, length))
    columns["size"] = columns["size"].fill_null(scalar(0))
    parsed, count = PARSED_NUM_RECORDS
    stats = columns.pop("stats")
    columns["num_records"] = (present.field(parsed).field(count).cast(pa.int64())
                              if parsed in names else num_records(stats))
    return pa.table(columns, schema=RAW_SCHEMA)


def _empty_maps(rows: int) -> pa.MapArray:
    return pa.MapArray.from_arrays(from_numpy(np.zeros(rows + 1, np.int32)), strings([]),
                                   strings([]))


def _struct_to_map(values: pa.StructArray) -> pa.MapArray:
    """A struct of string fields as a map with one entry per field in every row."""
    names = values.type.names
    rows, width = len(values), len(names)
    keys = strings(names).take(from_numpy(np.tile(np.arange(width), rows)))
    interleave = (np.arange(rows)[:, None] + np.arange(width)[None, :] * rows).ravel()
    fields = [pc.struct_field(values, [i]) for i in range(width)]
    items = pa.concat_arrays(fields).take(from_numpy(interleave)) if fields else strings([])
    offsets = from_numpy((np.arange(rows + 1) * width).astype(np.int32))
    return pa.MapArray.from_arrays(offsets, keys, items)


def num_records(stats: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``numRecords`` from statistics JSON, without parsing the column statistics (only
    statistics naming the key twice, as a column named ``numRecords`` does, are parsed)."""
    if isinstance(stats, pa.ChunkedArray):
        return pa.chunked_array([num_records(chunk) for chunk in stats.chunks], pa.int64())
    leading = pc.struct_field(pc.extract_regex(stats, _LEADING_NUM_RECORDS), "n")
    missed = pc.and_(leading.is_null(), stats.is_valid())
    if not pc.any(missed).as_py():
        return leading.cast(pa.int64())
    found = pc.struct_field(pc.extract_regex(stats, _NUM_RECORDS), "n")
    named_twice = pc.greater(pc.count_substring(stats, '"numRecords"'), scalar(1))
    nested = pc.and_kleene(missed, named_twice)
    if pc.any(nested).as_py():
        top_level = [_top_level_num_records(text) for text in stats.filter(nested).to_pylist()]
        found = pc.replace_with_mask(found, nested, strings(top_level))
    return pc.if_else(missed, found, leading).cast(pa.int64())


def _top_level_num_records(stats: str) -> str | None:
    try:
        value = json.loads(stats).get("numRecords")
    except (ValueError, AttributeError):
        return None
    return None if value is None else str(value)


def raw_schema(long_fields: Sequence[str] = ()) -> pa.Schema:
    """:data:`RAW_SCHEMA` plus integer columns of the actions' ``long_fields``."""
    return pa.schema([*RAW_SCHEMA, *(pa.field(name, pa.int64()) for name in long_fields)])


def empty_raw_actions(long_fields: Sequence[str] = ()) -> pa.Table:
    schema = raw_schema(long_fields)
    return pa.Table.from_arrays([pa.nulls(0, f.type) for f in schema], schema=schema)


def file_keys(raw: pa.Table) -> pa.Array:
    """Each action's logical-file identity: decoded path, plus the deletion vector's unique
    id when it has one (Delta's (path, dvId) key)."""
    paths = decoded_paths(combined(raw.column("path")))
    vector = combined(raw.column("deletionVector"))
    if vector.null_count == len(vector):
        return paths
    offset = vector.field("offset").cast(pa.string())
    dv_id = pc.binary_join_element_wise(
        vector.field("storageType"), vector.field("pathOrInlineDv"),
        pc.if_else(offset.is_null(), scalar(""),
                   pc.binary_join_element_wise(scalar("@"), offset, scalar(""))), scalar(""))
    return pc.if_else(vector.is_null(), paths,
                      pc.binary_join_element_wise(paths, dv_id, scalar("\x00")))


def live_adds(checkpoint_adds: list[pa.Table], commit_actions: pa.Table
              ) -> Iterator[pa.Table]:
    """The AddFiles live after the checkpoint's adds and then the commits' actions, in order,
    a chunk at a time: each checkpoint chunk is taken out of ``checkpoint_adds`` as it is
    yielded, so that a caller converting chunk by chunk holds one form of each file at a time.

    The last action on a (path, dvId) key wins: a checkpoint add is live unless a commit acts
    on its key, and a commit add is live unless a later commit action has its key.
    """
    commit_keys = file_keys(commit_actions)
    winners = pc.equal(commit_actions.column("kind"), scalar("add"))
    if pc.count_distinct(commit_keys).as_py() < len(commit_keys):
        codes = to_numpy(commit_keys.dictionary_encode().indices)
        last = np.zeros(len(codes), bool)
        last[len(codes) - 1 - np.unique(codes[::-1], return_index=True)[1]] = True
        winners = pc.and_(from_numpy(last), winners)
    acted_on = None
    if len(commit_keys) and checkpoint_adds:  # one lookup, one hash table of the commits' keys
        keys = pa.chunked_array([file_keys(chunk) for chunk in checkpoint_adds], pa.string())
        acted_on = pc.is_in(keys, value_set=commit_keys).combine_chunks()
        del keys  # views of the chunks' paths, which must go as each chunk is yielded
    row = 0
    while checkpoint_adds:
        chunk = checkpoint_adds.pop(0)
        if acted_on is not None:
            gone = acted_on.slice(row, len(chunk))
            row += len(chunk)
            if pc.any(gone).as_py():
                chunk = chunk.filter(pc.invert(gone))
        yield chunk
    live = commit_actions.filter(winners)
    yield from [live.slice(start, CHUNK_ROWS) for start in range(0, len(live), CHUNK_ROWS)
                ] or [live]


# -- the file table ------------------------------------------------------------------------

def file_table(raw: pa.Table, location: TableLocation, metadata_changes: Mapping[int, TableMetadata],
               end_metadata: TableMetadata) -> pa.Table:
    """Raw AddFiles (in plan order) as the file table; ``metadata_changes`` gives the metadata
    taking effect at each version, which types the partition values of the files from then on."""
    return pa.table({
        "version": raw.column("version"),
        "path": resolved_paths(combined(raw.column("path")), location),
        "size": raw.column("size"),
        "num_records": raw.column("num_records"),
        "deletion_vector": resolved_deletion_vectors(raw.column("deletionVector"), location),
        "partition_values": _partition_values(raw, metadata_changes, end_metadata),
    })


def with_partition_values(files: pa.Table, values: Mapping[str, pa.Array]) -> pa.Table:
    """The file table with ``values`` set among its ``partition_values`` (a field of the same
    name replaced, a new one last): per-file constants the reader attaches to each row."""
    current = files.column("partition_values").combine_chunks()
    merged = {**{n: current.field(n) for n in current.type.names if n not in values}, **values}
    return files.set_column(files.schema.get_field_index("partition_values"), "partition_values",
                            pa.StructArray.from_arrays(list(merged.values()), names=list(merged)))


def decoded_paths(paths: pa.Array) -> pa.Array:
    """URI-decoded paths; only paths holding ``%`` go through Python."""
    if not holds_character(paths, "%"):
        return paths
    encoded = pc.match_substring(paths, "%")
    decoded = [unquote(p) for p in paths.filter(encoded).to_pylist()]
    return pc.replace_with_mask(paths, encoded, strings(decoded))


def resolved_paths(paths: pa.Array, location: TableLocation) -> pa.Array:
    """Log paths as absolute decoded URIs (:meth:`TableLocation.resolve`, column-wise)."""
    decoded = decoded_paths(paths)
    absolute = pc.starts_with(decoded, "/")
    if holds_character(paths, ":"):
        absolute = pc.or_(pc.match_substring(paths, ":"), absolute)
    joined = pc.binary_join_element_wise(scalar(location.root_uri), decoded, scalar("/"))
    if not pc.any(absolute).as_py():
        return joined
    resolved = [location.resolve(p) for p in paths.filter(absolute).to_pylist()]
    return pc.replace_with_mask(joined, absolute, strings(resolved))


def resolved_deletion_vectors(raw: pa.ChunkedArray | pa.StructArray, location: TableLocation
                              ) -> pa.Array:
    """Deletion vectors of raw actions as the file table has them, absolute paths resolved."""
    raw = combined(raw)
    present = raw.is_valid()
    if not pc.any(present).as_py():
        return nulls(DV_TYPE, len(raw))
    storage = raw.field("storageType")
    path_or_inline = raw.field("pathOrInlineDv")
    absolute = pc.fill_null(pc.equal(storage, scalar("p")), scalar(False))
    if pc.any(absolute).as_py():
        resolved = [location.resolve(p) for p in path_or_inline.filter(absolute).to_pylist()]
        path_or_inline = pc.replace_with_mask(path_or_inline, absolute, strings(resolved))
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
        return pa.Array.from_buffers(pa.struct([]), len(raw), [None], children=[])
    starts = sorted(metadata_changes)
    versions = to_numpy(raw.column("version"))
    segment = np.maximum(np.searchsorted(np.array(starts), versions, side="right") - 1, 0)
    values = combined(raw.column("partitionValues"))
    if not len(raw) or (segment == segment[0]).all():
        start = starts[segment[0]] if len(raw) else starts[-1]
        return _typed_struct(values, metadata_changes[start], end_types)
    rows_per_segment = [np.flatnonzero(segment == index) for index in range(len(starts))]
    parts = [_typed_struct(values.take(from_numpy(rows)), metadata_changes[start], end_types)
             for start, rows in zip(starts, rows_per_segment) if len(rows)]
    back = np.argsort(np.concatenate([rows for rows in rows_per_segment if len(rows)]))
    return pa.concat_arrays(parts).take(from_numpy(back))


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
    texts = [_partition_text(v, type_name, end_name) for v in encoded.dictionary.to_pylist()]
    return _from_text(texts, end_type).take(encoded.indices)


@functools.lru_cache(maxsize=1 << 14)  # a big plan's chunks repeat the same few values
def _partition_text(raw: str | None, type_name: str, end_name: str) -> str | None:
    return _text(widen_partition_value(parse_partition_value(raw, type_name), end_name))


def _text(value: Any) -> str | None:
    """A parsed partition value in the text Arrow's cast reads back as the same value."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value.isoformat(sep=" ", timespec="microseconds")
    if isinstance(value, dt.date):
        return value.isoformat()
    return repr(value) if isinstance(value, float) else str(value)  # int, Decimal


def _from_text(texts: list[str | None], arrow: pa.DataType) -> pa.Array:
    """Values of type ``arrow`` from their :func:`_text` (a UTC wall time for a timestamp
    with a time zone)."""
    if pa.types.is_timestamp(arrow) and arrow.tz is not None:
        return strings(texts).cast(pa.timestamp(arrow.unit)).cast(arrow)
    return strings(texts).cast(arrow)


def _map_value(values: pa.MapArray, key: str) -> pa.Array:
    """Each row's first value under ``key`` (null without one): the same as
    ``pc.map_lookup``, over the flattened entries, several times faster."""
    if values.offset and values.null_count:  # Arrow cannot mask a slice's offsets
        values = values.take(from_numpy(np.arange(len(values))))
    mask = values.is_null() if values.null_count else None
    as_list = pa.ListArray.from_arrays(values.offsets, values.values, mask=mask)
    entries = pc.list_flatten(as_list)
    matches = pc.indices_nonzero(pc.equal(entries.field("key"), scalar(key)))
    rows = to_numpy(pc.list_parent_indices(as_list).take(matches))
    first_match = np.full(len(values), -1)
    firsts = np.unique(rows, return_index=True)[1]
    first_match[rows[firsts]] = firsts
    found = entries.field("value").take(matches)
    return found.take(from_numpy(first_match, valid=first_match >= 0))


def _delta_name(arrow: pa.DataType) -> str:
    """The Delta type name ``widen_partition_value`` expects for an Arrow partition type."""
    if pa.types.is_decimal(arrow):
        return f"decimal({arrow.precision},{arrow.scale})"
    return next(name for name, known in _PRIMITIVE_TYPES.items() if known == arrow)
