"""How Spark spells a data file's path, so log paths and scanned rows can be matched.

Spark's ``_metadata.file_path`` is Hadoop's ``new Path(p).toUri().toString()`` of the file it
read: the scheme, ``//authority`` only when there is one (``file:/t/x`` for local files), and
the path quoted the way ``java.net.URI`` quotes a path component (``%`` -> ``%25``,
space -> ``%20``, non-ASCII letters kept). We compute the same string on the driver, without a
round trip to the JVM per file.
"""

from __future__ import annotations

import posixpath
import re
import unicodedata

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_delta.storage import UNKNOWN, SharedFolder, common_folder

# java.net.URI path characters: unreserved, punctuation allowed in a segment, and "/".
_PATH_SAFE = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!~*'():@&=+$,;/"
)
# A URI Spark spells as it is (but ``scheme:///`` as ``scheme:/``): scheme, authority, then
# segments of characters java.net.URI leaves alone, none empty, "." or "..".
_SAFE = r"[A-Za-z0-9\-_.!~*'():@&=+$,;]"
# Its leading dots, then its first other character: one way to match a segment, so a path
# that fails does not backtrack through every split of every segment (exponential in depth).
_SEGMENT = rf"\.*[A-Za-z0-9\-_!~*'():@&=+$,;]{_SAFE}*"
_AS_SPARK_SPELLS_IT = rf"^[A-Za-z][A-Za-z0-9+.\-]*://[A-Za-z0-9\-_.!~*'():@&=+$,;]*(/{_SEGMENT})+$"
_TRIPLE_SLASH = r"^([^:]*):///"


def spark_file_path(uri: str) -> str:
    """The value Spark's ``_metadata.file_path`` has for the decoded URI ``uri``."""
    scheme, authority, path = _split(uri)
    path = _normalize(path)
    prefix = f"{scheme}:" if scheme else ""
    if authority:
        prefix += f"//{authority}"
    return prefix + "".join(_quote_char(c) for c in path)


def spark_file_paths(uris: pa.Array | pa.ChunkedArray, *,
                     common: SharedFolder | object = UNKNOWN) -> pa.Array:
    """:func:`spark_file_path` of every URI, column-wise: only URIs that need quoting or
    normalising go through Python. ``common``: their
    :func:`~airflow_provider_delta.storage.common_folder`, where the caller has it already."""
    if isinstance(uris, pa.ChunkedArray):
        uris = uris.combine_chunks()
    plain, spelled = _spelled_as_they_are(uris, common_folder(uris) if common is UNKNOWN
                                          else common)
    if pc.all(plain).as_py() is not False:
        return spelled
    others = [spark_file_path(uri) for uri in uris.filter(pc.invert(plain)).to_pylist()]
    return pc.replace_with_mask(spelled, pc.invert(plain), pa.array(others, pa.string()))


def _spelled_as_they_are(uris: pa.Array, common: SharedFolder) -> tuple[pa.Array, pa.Array]:
    """Which of ``uris`` Spark spells as they are (but ``scheme:///`` as ``scheme:/``), and
    that spelling. Where they share a folder (``common``), the folder is tested once and each
    name alone."""
    if common is None or not re.fullmatch(_AS_SPARK_SPELLS_IT, common[0] + "x"):
        return (pc.match_substring_regex(uris, _AS_SPARK_SPELLS_IT),
                pc.replace_substring_regex(uris, _TRIPLE_SLASH, r"\1:/"))
    folder, names = common
    spelled = re.sub(_TRIPLE_SLASH, r"\1:/", folder)
    if spelled != folder:
        uris = pc.replace_substring(uris, folder, spelled, max_replacements=1)
    return pc.match_substring_regex(names, rf"^{_SEGMENT}$"), uris


def spark_read_paths(uris: pa.Array) -> pa.Array:
    """``uris`` as path arguments to ``spark.read``: glob characters escaped to match
    literally."""
    return pc.replace_substring_regex(uris, r"([{}\[\]*?\\])", r"\\\1")


def _split(uri: str) -> tuple[str, str, str]:
    """Scheme, authority and path, split the way Hadoop's ``Path(String)`` does."""
    scheme, rest = "", uri
    colon, slash = uri.find(":"), uri.find("/")
    if colon != -1 and (slash == -1 or colon < slash):
        scheme, rest = uri[:colon], uri[colon + 1 :]
    authority = ""
    if rest.startswith("//") and len(rest) > 2:
        end = rest.find("/", 2)
        end = len(rest) if end == -1 else end
        authority, rest = rest[2:end], rest[end:]
    return scheme, authority, rest


def _normalize(path: str) -> str:
    """Collapse repeated slashes and ``.``/``..`` segments, as Hadoop and ``URI.normalize`` do."""
    normalized = posixpath.normpath(path) if path else path
    return normalized[1:] if normalized.startswith("//") else normalized


def _quote_char(char: str) -> str:
    if char in _PATH_SAFE:
        return char
    if char.isascii() or unicodedata.category(char) in ("Zs", "Zl", "Zp", "Cc"):
        return "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))
    return char
