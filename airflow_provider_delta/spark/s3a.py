"""Spark's own S3 access (hadoop-aws's ``s3a``) configured from a connection's storage options.

The driver reads the log and deletion vectors through object_store with the storage options;
Spark reads and writes the data files through Hadoop's S3A file system, which takes its own
settings. Each S3 table's bucket gets per-bucket S3A settings (``fs.s3a.bucket.<bucket>.*``)
set on the job's session, so a source and a target in two buckets keep their own keys, and
nothing reaches a command line. Spark's redaction hides the keys (``secret``, ``access.key``).
"""

from __future__ import annotations

from collections.abc import Mapping

from airflow_provider_delta.storage import to_uri

# object_store option (lower case, with or without the ``aws_`` prefix) -> S3A setting.
S3A_SETTINGS = {
    "access_key_id": "access.key",
    "secret_access_key": "secret.key",
    "session_token": "session.token",
    "endpoint": "endpoint",
    "endpoint_url": "endpoint",
    "region": "endpoint.region",
}
TEMPORARY_CREDENTIALS = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
# The plans name data files by their table's URI (``s3://``): S3A serves that scheme too.
S3_SCHEME = {"fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}


def s3a_settings(table_uri: str, storage_options: Mapping[str, str] | None) -> dict[str, str]:
    """The S3A settings for ``table_uri``'s bucket from its storage options; none for other
    stores, or without options (the cluster's own S3A configuration then applies)."""
    scheme, _, rest = to_uri(table_uri).partition("://")
    if scheme not in ("s3", "s3a") or not storage_options:
        return {}
    bucket = rest.split("/", 1)[0]
    options = {k.lower().removeprefix("aws_"): str(v) for k, v in storage_options.items()}
    prefix = f"fs.s3a.bucket.{bucket}."
    settings = {**S3_SCHEME,
                **{prefix + S3A_SETTINGS[k]: v for k, v in options.items() if k in S3A_SETTINGS}}
    if "session_token" in options:
        settings[prefix + "aws.credentials.provider"] = TEMPORARY_CREDENTIALS
    endpoint = options.get("endpoint_url") or options.get("endpoint")
    if endpoint:  # S3-compatible stores: no virtual-host buckets
        settings[prefix + "path.style.access"] = "true"
        if endpoint.startswith("http://"):
            settings[prefix + "connection.ssl.enabled"] = "false"
    return settings
