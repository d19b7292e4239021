"""Object storage (S3, GCS, Azure Blob) and the web, reached through fsspec.

Sources (`sources[].path: s3://bucket/prefix/`), the Parquet intermediates (`data_dir:
s3://bucket/clef`) and LanceDB (`store.lancedb.path: s3://bucket/lancedb`) may live on an
object store. How to reach it is one settings section, `object_store:`; a secret never lives
there: the settings name the environment variables that hold one (`*_env`), and with none
named each cloud's own credential chain applies (AWS_* variables, ~/.aws, instance roles;
GOOGLE_APPLICATION_CREDENTIALS; AZURE_STORAGE_*). Every secret read is registered with the
redactor before anything can print it.

fsspec and the cloud packages are imported only when a URL is used: the embedded defaults
(a local folder, a local LanceDB) never import them.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from clef_pipelines._strict import StrictModel
from clef_pipelines.redact import register_url_secrets, secret_from_env
from clef_pipelines.urls import (  # noqa: F401 - their home was here; importers still use it
    CLOUD_SCHEMES,
    WEB_SCHEMES,
    is_cloud_url,
    is_remote,
    is_web_url,
    scheme_of,
)

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

_PACKAGES = {"s3": "s3fs", "gcs": "gcsfs", "azure": "adlfs"}


class ObjectStoreError(RuntimeError):
    """An object store could not be reached or read; the message names the URL."""


class ObjectStoreConfig(StrictModel):
    """How object-store URLs (s3://, gs://, az://) in sources, data_dir and store.lancedb.path
    are reached. Secrets are never set here: `*_env` settings name the environment variables
    that hold them; with none named, each cloud's standard credential chain applies."""

    endpoint_url: str | None = Field(
        None,
        description="S3-compatible endpoint (MinIO, Ceph, R2, a loopback test server); "
        "default AWS.",
    )
    region: str | None = Field(None, description="S3 region; default the AWS chain's.")
    access_key_id_env: str | None = Field(
        None, description="Env variable holding the S3 access key id; default the AWS chain."
    )
    secret_access_key_env: str | None = Field(
        None, description="Env variable holding the S3 secret key; default the AWS chain."
    )
    session_token_env: str | None = Field(
        None, description="Env variable holding an S3 session token (temporary credentials)."
    )
    anonymous: bool = Field(False, description="Read public buckets without credentials.")
    gcs_project: str | None = Field(
        None, description="GCS project; credentials from GOOGLE_APPLICATION_CREDENTIALS etc."
    )
    azure_account_name: str | None = Field(None, description="Azure storage account name.")
    azure_account_key_env: str | None = Field(
        None, description="Env variable holding the Azure storage account key."
    )
    azure_connection_string_env: str | None = Field(
        None, description="Env variable holding an Azure storage connection string."
    )
    max_attempts: int = Field(
        3, ge=1, le=20, description="Attempts per S3 request before it counts as failed."
    )

    @field_validator("endpoint_url")
    @classmethod
    def _plain_endpoint(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"{v!r} must be an http:// or https:// URL")
        if "@" in v.split("//", 1)[1].split("/", 1)[0]:
            raise ValueError("credentials do not belong in the URL: name them with *_env")
        return v.rstrip("/")


def join(location: str, *parts: str) -> str:
    """`location` (a URL or a local path) with `parts` appended, '/'-separated."""
    out = str(location).rstrip("/")
    for part in parts:
        out = f"{out}/{part.strip('/')}"
    return out


def _s3_options(cfg: ObjectStoreConfig) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "config_kwargs": {"retries": {"max_attempts": cfg.max_attempts, "mode": "standard"}}
    }
    if cfg.endpoint_url:
        opts["endpoint_url"] = cfg.endpoint_url
    if cfg.region:
        opts["client_kwargs"] = {"region_name": cfg.region}
    if cfg.anonymous:
        opts["anon"] = True
    key = _secret(cfg.access_key_id_env, "object_store.access_key_id_env")
    secret = _secret(cfg.secret_access_key_env, "object_store.secret_access_key_env")
    token = _secret(cfg.session_token_env, "object_store.session_token_env")
    if key:
        opts["key"] = key
    if secret:
        opts["secret"] = secret
    if token:
        opts["token"] = token
    return opts


def _azure_options(cfg: ObjectStoreConfig) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    if cfg.azure_account_name:
        opts["account_name"] = cfg.azure_account_name
    key = _secret(cfg.azure_account_key_env, "object_store.azure_account_key_env")
    conn = _secret(cfg.azure_connection_string_env, "object_store.azure_connection_string_env")
    if key:
        opts["account_key"] = key
    if conn:
        opts["connection_string"] = conn
    if cfg.anonymous:
        opts["anon"] = True
    return opts


def _secret(env_name: str | None, setting: str) -> str | None:
    """The secret an `*_env` setting names (registered with the redactor); a named variable
    that is unset is an error naming the setting, not a silent fall back to another chain."""
    if not env_name:
        return None
    value = secret_from_env(env_name)
    if not value:
        raise ObjectStoreError(f"{setting} names {env_name!r}, which is not set")
    return value


def fsspec_options(cfg: ObjectStoreConfig, scheme: str) -> dict[str, Any]:
    """The fsspec storage options for a URL of `scheme` under these settings."""
    extra = CLOUD_SCHEMES.get(scheme)
    if extra == "s3":
        return _s3_options(cfg)
    if extra == "gcs":
        opts: dict[str, Any] = {"project": cfg.gcs_project} if cfg.gcs_project else {}
        if cfg.anonymous:
            opts["token"] = "anon"
        return opts
    if extra == "azure":
        return _azure_options(cfg)
    return {}


def filesystem(location: str, cfg: ObjectStoreConfig | None = None) -> AbstractFileSystem:
    """A fresh fsspec filesystem for `location`'s scheme (no listing cache shared between
    callers: a refresh must see the bucket as it is now, not as a cached listing had it)."""
    scheme = scheme_of(location)
    if scheme is None:
        from fsspec.implementations.local import LocalFileSystem

        return LocalFileSystem()
    cfg = cfg or ObjectStoreConfig()
    extra = CLOUD_SCHEMES.get(scheme)
    try:
        import fsspec

        cls = fsspec.get_filesystem_class(scheme)
    except ImportError:
        package = _PACKAGES.get(extra or "", "aiohttp")
        hint = f"pip install 'clef-pipelines[{extra}]'" if extra else f"pip install {package}"
        raise ObjectStoreError(
            f"{scheme}:// URLs need {package}, which is not installed: {hint}"
        ) from None
    except ValueError:
        raise ObjectStoreError(f"{location}: unknown URL scheme {scheme!r}") from None
    register_url_secrets(location)
    opts = fsspec_options(cfg, scheme)
    if extra == "s3":
        opts["session"] = _aws_session()
    return cls(skip_instance_cache=True, use_listings_cache=False, **opts)


#: botocore's data loader per data path, shared by every S3 filesystem of the process.
_AWS_LOADERS: dict[Any, Any] = {}
_AWS_LOADERS_LOCK = threading.Lock()


def _aws_session() -> Any:
    """A fresh aiobotocore session (what s3fs makes itself without one: credentials, region
    and profile read now, nothing cached from an earlier filesystem) whose data loader, the
    parsed botocore files (endpoints, S3's service model; read-only once loaded), is the
    process's one.

    Why: each `filesystem` is fresh (see there), and each fresh session parsed those JSON
    files again: about 150 ms of CPU per filesystem, and an ingest from or into a bucket opens
    dozens (`python -m lab.bench.suite_costs s3`, moto on loopback, one `exists` each: 173 ms
    of CPU a filesystem with data of its own, 45 ms with the shared loader)."""
    import aiobotocore.session
    from botocore.loaders import create_loader

    session = aiobotocore.session.AioSession()
    data_path = session.get_config_variable("data_path")
    with _AWS_LOADERS_LOCK:
        loader = _AWS_LOADERS.get(data_path)
        if loader is None:
            loader = _AWS_LOADERS[data_path] = create_loader(data_path)
    session.register_component("data_loader", loader)
    return session


def strip_scheme(location: str) -> str:
    """`bucket/key` of `s3://bucket/key` (fsspec's own path form); a web URL stays whole."""
    if is_web_url(location):
        return location
    return location.split("://", 1)[1] if "://" in location else location


def lancedb_storage_options(cfg: ObjectStoreConfig, uri: str) -> dict[str, str]:
    """LanceDB's (the Rust object_store crate's) options for a table folder at `uri`: the
    endpoint and region of the settings, and the secrets the `*_env` settings name. With none
    named, LanceDB reads the cloud's own variables (AWS_ACCESS_KEY_ID...) itself."""
    extra = CLOUD_SCHEMES.get(scheme_of(uri) or "")
    opts: dict[str, str] = {}
    if extra == "s3":
        if cfg.endpoint_url:
            opts["aws_endpoint"] = cfg.endpoint_url
            if cfg.endpoint_url.startswith("http://"):
                opts["allow_http"] = "true"
        if cfg.region:
            opts["aws_region"] = cfg.region
        for env_setting, option in (
            ("access_key_id_env", "aws_access_key_id"),
            ("secret_access_key_env", "aws_secret_access_key"),
            ("session_token_env", "aws_session_token"),
        ):
            value = _secret(getattr(cfg, env_setting), f"object_store.{env_setting}")
            if value:
                opts[option] = value
        if cfg.anonymous:
            opts["aws_skip_signature"] = "true"
    elif extra == "azure":
        if cfg.azure_account_name:
            opts["azure_storage_account_name"] = cfg.azure_account_name
        key = _secret(cfg.azure_account_key_env, "object_store.azure_account_key_env")
        if key:
            opts["azure_storage_account_key"] = key
    return opts


def local_or_url(base_dir: str | os.PathLike[str], location: str) -> str:
    """A URL as it is; a local path made absolute against `base_dir`."""
    if is_remote(location):
        return location
    p = Path(location).expanduser()
    return str(p if p.is_absolute() else (Path(base_dir) / p).resolve())
