"""How Spark spells a data file's path, so log paths and scanned rows can be matched.

Spark's ``_metadata.file_path`` is Hadoop's ``new Path(p).toUri().toString()`` of the file it
read: the scheme, ``//authority`` only when there is one (``file:/t/x`` for local files), and
the path quoted the way ``java.net.URI`` quotes a path component (``%`` -> ``%25``,
space -> ``%20``, non-ASCII letters kept). We compute the same string on the driver, without a
round trip to the JVM per file.
"""

from __future__ import annotations

import posixpath
import unicodedata

# java.net.URI path characters: unreserved, punctuation allowed in a segment, and "/".
_PATH_SAFE = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.!~*'():@&=+$,;/"
)
_GLOB_CHARS = frozenset("{}[]*?\\")


def spark_file_path(uri: str) -> str:
    """The value Spark's ``_metadata.file_path`` has for the decoded URI ``uri``."""
    scheme, authority, path = _split(uri)
    path = _normalize(path)
    prefix = f"{scheme}:" if scheme else ""
    if authority:
        prefix += f"//{authority}"
    return prefix + "".join(_quote_char(c) for c in path)


def spark_read_path(uri: str) -> str:
    """``uri`` as a path argument to ``spark.read``: glob characters escaped to match literally."""
    if not _GLOB_CHARS.intersection(uri):
        return uri
    return "".join("\\" + c if c in _GLOB_CHARS else c for c in uri)


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
