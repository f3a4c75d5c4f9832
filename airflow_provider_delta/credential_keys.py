"""Which option and conf keys hold a credential, decided once, and what hides their values.

One rule (:func:`is_credential_key`) serves every place that must tell a credential from a
setting: the storage error that names the keys used, the split of ``conf`` and ``sink_options``
between the command line and the driver's environment, the values registered with Airflow's
secrets masker, and the pattern Spark's UI redacts by. Pure: imports neither Airflow nor Spark.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

# Spark's default spark.redaction.regex (Spark 4): a pattern we set must keep every word of it.
SPARK_REDACTION_WORDS = r"secret|password|token|access[.]?key|credential"
# Spark's default spark.sql.redaction.options.regex, the one a Spark Connect session can set.
SPARK_SQL_OPTIONS_REDACTION_WORDS = r"url"
# The names object stores and Hadoop give their keys beyond Spark's words
# (fs.azure.account.key.*, AZURE_STORAGE_SAS_KEY, *.json.keyfile, private_key).
_STORE_KEY_WORDS = r"passwd|private[._-]?key|(^|[._-])(key|keyfile|sas)([._-]|$)"
_CREDENTIAL_KEY = re.compile(f"{SPARK_REDACTION_WORDS}|{_STORE_KEY_WORDS}", re.IGNORECASE)
# Settings that say how credentials are found or whether they are used, not a credential.
_CREDENTIAL_SETTING = re.compile(r"[._-](provider|type|class|impl|enabled)$", re.IGNORECASE)
# Both patterns are Java regexes too: Spark redacts every key (and value) they match.
_REDACTION_WORDS = f"{SPARK_REDACTION_WORDS}|{_STORE_KEY_WORDS}"
# Fields of a service account key file that are secrets by themselves.
_KEY_FILE_SECRETS = ("private_key", "private_key_id")

REDACTION_CONF = "spark.redaction.regex"
SQL_OPTIONS_REDACTION_CONF = "spark.sql.redaction.options.regex"


def is_credential_key(key: str) -> bool:
    """Whether an option or conf named ``key`` holds a credential."""
    return bool(_CREDENTIAL_KEY.search(key)) and not _CREDENTIAL_SETTING.search(key)


def credential_entries(options: Mapping[str, Any] | None) -> dict[str, str]:
    """The entries of ``options`` that hold credentials, as strings."""
    return {key: str(value) for key, value in (options or {}).items()
            if is_credential_key(key)}


def without_credential_entries(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` without the entries that hold credentials."""
    return {key: value for key, value in (options or {}).items() if not is_credential_key(key)}


def credential_key_names(options: Mapping[str, Any] | None) -> list[str]:
    """The sorted names (never the values) of the entries of ``options`` holding credentials."""
    return sorted(credential_entries(options))


def secret_forms(options: Mapping[str, Any] | None) -> list[str]:
    """Every text a credential of ``options`` can show as: the value; as JSON, Python's repr
    and URLs escape it; and the secrets inside a service account key's JSON. Registered with a
    masker by value, they hide the credential whatever Airflow thinks of the key's name."""
    forms: dict[str, None] = {}
    for value in credential_entries(options).values():
        for secret in (value, *_key_file_secrets(value)):
            forms.update(dict.fromkeys(_escaped(secret)))
    return list(forms)


def _escaped(secret: str) -> Iterator[str]:
    yield secret
    yield json.dumps(secret)[1:-1]
    yield repr(secret)[1:-1]
    yield quote(secret, safe="")


def _key_file_secrets(value: str) -> list[str]:
    """The private key (and its id) of a service account key given as JSON."""
    if not value.lstrip().startswith("{"):
        return []
    try:
        key_file = json.loads(value)
    except ValueError:
        return []
    if not isinstance(key_file, dict):
        return []
    return [str(key_file[name]) for name in _KEY_FILE_SECRETS if key_file.get(name)]


def redaction_regex(given: str | None) -> str:
    """The ``spark.redaction.regex`` of a job: ``given`` (the user's, else Spark's default)
    extended by every key :func:`is_credential_key` calls a credential."""
    return _extended(given, f"(?i){SPARK_REDACTION_WORDS}")


def sql_options_redaction_regex(given: str | None) -> str:
    """The ``spark.sql.redaction.options.regex`` of a job: ``given`` (else Spark's default)
    extended likewise. A Spark Connect session can set this one, not ``spark.redaction.regex``;
    it hides the session's own confs and the writer's options in the SQL tab and its API."""
    return _extended(given, f"(?i){SPARK_SQL_OPTIONS_REDACTION_WORDS}")


def _extended(given: str | None, default: str) -> str:
    # One more top-level alternative, its flag scoped: valid in Java (Spark) and Python alike.
    ours = f"|(?i:{_REDACTION_WORDS})"
    base = given or default
    if base.endswith(ours):  # extended already (a retry, or the same conf given twice)
        return base
    return base + ours


def with_redaction(conf: Mapping[str, Any] | None) -> dict[str, Any]:
    """A spark-submit ``conf`` without its credentials, with the extended redaction pattern:
    the driver's UI, logs and event log hide every credential it is given by any route."""
    conf = conf or {}
    return {**without_credential_entries(conf),
            REDACTION_CONF: redaction_regex(conf.get(REDACTION_CONF))}


def with_sql_options_redaction(conf: Mapping[str, Any] | None) -> dict[str, Any]:
    """A Spark Connect session's ``conf`` with the extended SQL options redaction first."""
    conf = conf or {}
    pattern = sql_options_redaction_regex(conf.get(SQL_OPTIONS_REDACTION_CONF))
    return {SQL_OPTIONS_REDACTION_CONF: pattern,
            **{key: value for key, value in conf.items() if key != SQL_OPTIONS_REDACTION_CONF}}
