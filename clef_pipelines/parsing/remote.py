"""Sources on an object store (s3://, gs://, az://) or the web (http(s):// of one file).

The listing decides what changed without downloading: an object's entry carries, as its
`raw_hash`, a hash of what the object store says of it (its ETag, or version, and its size),
and the inventory compares that hash (folded into the document hash) with the one the store
keeps for the document. An unchanged object is therefore never downloaded; a new or changed
one is downloaded once, by the parse step (`entry.load()`). ETags are content hashes on S3
(MD5 of a single-part upload), GCS and Azure, so the same bytes uploaded again keep their
ETag and are not processed again; a multipart upload of other part sizes changes it, and
such an object is processed again, never missed.

Failures are those of a local source: an object that cannot be read (HTTP 403, 404, 500 after
the client's retries) fails alone with reason `unreadable`, and a listing that fails yields
one failure with reason `unlisted`: the inventory then keeps every stored document of the
source (none counts as removed because a failed listing came back empty).
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath
from typing import Any

from clef_pipelines.config import ParsingConfig, SourceConfig
from clef_pipelines.objectstore import (
    ObjectStoreConfig,
    ObjectStoreError,
    filesystem,
    is_web_url,
    scheme_of,
    strip_scheme,
)
from clef_pipelines.parsing.models import Document, ParseError, SourceEntry
from clef_pipelines.records import sha256_hex

#: The version of how listing facts become a raw hash (a change re-processes remote sources).
_IDENTITY_VERSION = "listing-v1"

#: The id of a source's failed listing in the inventory (one row; the stored documents stay).
LISTING_ID = "(listing)"

#: Seconds a web source's request may take.
WEB_TIMEOUT_S = 60.0


def listing_identity(info: dict[str, Any]) -> str | None:
    """A hash of what the object store says of an object that changes when its bytes do:
    a content hash (ETag, GCS md5/crc32c, Azure content MD5) and the size, else a version or
    generation, else the last-modified time; None when the listing says none of these."""
    size = info.get("size")
    content = _first(info, ("ETag", "etag", "md5Hash", "crc32c", "content_md5"))
    if content is None:
        settings = info.get("content_settings")
        md5 = getattr(settings, "content_md5", None) if settings is not None else None
        content = md5.hex() if isinstance(md5, bytes | bytearray) else None
    marker = content or _first(
        info, ("VersionId", "version_id", "generation", "LastModified", "last_modified", "mtime")
    )
    if marker is None:
        return None
    return sha256_hex(f"{_IDENTITY_VERSION}\x1f{marker}\x1f{size}")


def _first(info: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = info.get(key)
        if value not in (None, ""):
            return str(value).strip('"')
    return None


def _failure_text(exc: BaseException) -> str:
    """An object store's error in a few words: the HTTP status and message, no traceback."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{type(exc).__name__}: {text[:300]}"


def _object_entry(
    source: SourceConfig,
    rel: str,
    uri: str,
    size: int | None,
    identity: str | None,
    read: Callable[[], bytes],
    cfg: ParsingConfig,
) -> SourceEntry:
    """One object's entry: failures found from the listing alone, or its lazy loader."""
    from clef_pipelines.parsing.entries import SUFFIX_FORMATS

    fmt = SUFFIX_FORMATS.get(PurePosixPath(rel).suffix.lower())

    def failed(err: ParseError) -> SourceEntry:
        return SourceEntry(source.name, rel, uri, fmt, None, err)  # type: ignore[arg-type]

    if fmt is None:
        suffix = PurePosixPath(rel).suffix or "files without a suffix"
        return failed(ParseError("unsupported", f"{rel}: no parser for {suffix!r}"))
    if size is not None and size > cfg.max_file_bytes:
        return failed(
            ParseError("oversize", f"{rel}: {size} bytes, over the {cfg.max_file_bytes} limit")
        )

    # Bytes fetched ahead by `prefetch` (with other objects', concurrently), taken once.
    fetched: dict[str, bytes | BaseException] = {}

    def fetch() -> bytes:
        ahead = fetched.pop("data", None)
        try:
            if isinstance(ahead, BaseException):
                raise ahead
            return ahead if ahead is not None else read()
        except ParseError:
            raise
        except Exception as exc:  # 403, 404, 500 after retries, a reset connection
            raise ParseError(
                "unreadable", f"{rel}: cannot read {uri} ({_failure_text(exc)})"
            ) from None

    def fetch_ahead() -> None:
        try:
            fetched["data"] = read()
        except Exception as exc:  # kept for `fetch` to report, in its own words
            fetched["data"] = exc

    if identity is None:  # the listing says nothing that changes with the bytes: hash them
        try:
            data = fetch()
        except ParseError as exc:
            return failed(exc)
        identity = sha256_hex(data)
        del data
    raw_hash = identity

    def load(override: ParsingConfig | None) -> Document:
        parsing_cfg = override or cfg
        from clef_pipelines.parsing.entries import file_document

        # The listing's hash, not the bytes': the next listing compares with it.
        return file_document(rel, uri, fmt, fetch(), raw_hash, parsing_cfg)  # type: ignore[arg-type]

    load.fetch_ahead = fetch_ahead  # type: ignore[attr-defined]
    return SourceEntry(source.name, rel, uri, fmt, raw_hash, None, load)  # type: ignore[arg-type]


#: Objects downloaded at once ahead of parsing (their bytes are held until parsed: at most
#: this many times `parsing.max_file_bytes`).
PREFETCH = 16


def prefetch(entries: list[SourceEntry]) -> None:
    """Download the objects of `entries` concurrently, ahead of their `load()`: one object
    at a time costs a round trip each (tens of milliseconds on S3), which a source of
    thousands of changed objects would pay in series. Entries of a local source, and
    entries loaded before, are left alone."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = [f for e in entries if (f := getattr(e._load, "fetch_ahead", None)) is not None]
    if len(jobs) < 2:
        return
    with ThreadPoolExecutor(max_workers=min(PREFETCH, len(jobs))) as pool:
        list(pool.map(lambda job: job(), jobs))


def _listing_failed(source: SourceConfig, exc: BaseException) -> SourceEntry:
    error = ParseError(
        "unlisted",
        f"source {source.name!r}: cannot list {source.path} ({_failure_text(exc)}); its "
        "stored documents are kept until a listing succeeds",
    )
    return SourceEntry(source.name, LISTING_ID, source.path, None, None, error)


def remote_kind(source: SourceConfig) -> str:
    """folder, jsonl or file, from the settings or, for `auto`, the URL alone (no request)."""
    if source.kind != "auto":
        return source.kind
    suffix = PurePosixPath(source.path.split("?", 1)[0].rstrip("/")).suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if is_web_url(source.path):
        return "file"
    from clef_pipelines.parsing.entries import SUFFIX_FORMATS

    if not source.path.endswith("/") and suffix in SUFFIX_FORMATS:
        return "file"
    return "folder"


def iter_remote_entries(
    source: SourceConfig, cfg: ParsingConfig, store_cfg: ObjectStoreConfig
) -> Iterator[SourceEntry]:
    """List a remote source (sorted by key), as `loaders.iter_source_entries` a local one."""
    kind = remote_kind(source)
    if is_web_url(source.path):
        yield from _web_entries(source, kind, cfg)
        return
    try:
        fs = filesystem(source.path, store_cfg)
    except ObjectStoreError as exc:
        raise ParseError("unreadable", f"source {source.name!r}: {exc}") from None
    root = strip_scheme(source.path).rstrip("/")
    scheme = scheme_of(source.path)
    if kind == "folder":
        yield from _folder_entries(source, fs, root, scheme or "s3", cfg)
        return
    try:
        info = fs.info(root)
    except Exception as exc:
        yield _listing_failed(source, exc)
        return
    identity = listing_identity(info)

    def read() -> bytes:
        return bytes(fs.cat_file(root))

    if kind == "jsonl":
        yield from _jsonl_object(source, read, source.path, cfg)
        return
    rel = PurePosixPath(root).name
    yield _object_entry(source, rel, source.path, info.get("size"), identity, read, cfg)


def _folder_entries(
    source: SourceConfig, fs: Any, root: str, scheme: str, cfg: ParsingConfig
) -> Iterator[SourceEntry]:
    from clef_pipelines.parsing.globs import matches

    try:
        listing: dict[str, dict[str, Any]] = fs.find(root, detail=True)
    except Exception as exc:  # denied, 500 after retries, no such bucket
        yield _listing_failed(source, exc)
        return
    prefix = root + "/"
    for path in sorted(listing):
        info = listing[path]
        if info.get("type") == "directory" or path.endswith("/") or not path.startswith(prefix):
            continue
        rel = path[len(prefix) :]
        if not matches(rel, source.include) or matches(rel, source.exclude):
            continue

        def read(path: str = path) -> bytes:
            return bytes(fs.cat_file(path))

        uri = f"{scheme}://{path}"
        size = info.get("size")
        yield _object_entry(source, rel, uri, size, listing_identity(info), read, cfg)


def _jsonl_object(
    source: SourceConfig, read: Callable[[], bytes], uri: str, cfg: ParsingConfig
) -> Iterator[SourceEntry]:
    """A JSONL object's records: the object is read once per listing (its records' hashes
    come from their text), as a local JSONL file is."""
    from clef_pipelines.parsing.entries import jsonl_entry

    try:
        data = read()
    except Exception as exc:
        yield _listing_failed(source, exc)
        return
    name = PurePosixPath(uri.split("?", 1)[0]).name
    seen: set[str] = set()
    for lineno, raw_line in enumerate(data.splitlines(keepends=True), start=1):
        if raw_line.strip():
            yield jsonl_entry(source, raw_line, f"{name} line {lineno}", lineno, uri, cfg, seen)


def _web_head(url: str) -> dict[str, Any]:
    """What a web server says of a file without sending it: ETag, size, last-modified."""
    request = urllib.request.Request(url, method="HEAD")
    with urllib.request.urlopen(request, timeout=WEB_TIMEOUT_S) as resp:
        headers = resp.headers
        info: dict[str, Any] = {"etag": headers.get("ETag")}
        if headers.get("Content-Length") is not None:
            info["size"] = int(headers["Content-Length"])
        modified = headers.get("Last-Modified")
        if modified:
            parsed = email.utils.parsedate_to_datetime(modified)
            info["last_modified"] = parsed.isoformat()
        return info


def _web_get(url: str, limit: int) -> bytes:
    with urllib.request.urlopen(url, timeout=WEB_TIMEOUT_S) as resp:
        data: bytes = resp.read(limit + 1)
    if len(data) > limit:
        raise ParseError("oversize", f"{url}: over the {limit} byte limit")
    return data


def _web_entries(source: SourceConfig, kind: str, cfg: ParsingConfig) -> Iterator[SourceEntry]:
    url = source.path
    if kind == "folder":
        raise ParseError(
            "unsupported",
            f"source {source.name!r}: {url}: a web URL is one file (a document or a .jsonl)",
        )
    limit = cfg.max_file_bytes if kind == "file" else 2**62

    def read() -> bytes:
        return _web_get(url, limit)

    if kind == "jsonl":
        yield from _jsonl_object(source, read, url, cfg)
        return
    try:
        info = _web_head(url)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        yield _listing_failed(source, exc)
        return
    rel = PurePosixPath(url.split("?", 1)[0].rstrip("/")).name or "index.html"
    yield _object_entry(source, rel, url, info.get("size"), listing_identity(info), read, cfg)


def remote_fingerprint(source: SourceConfig, store_cfg: ObjectStoreConfig) -> str:
    """The sensor's cheap change signal of a remote source: a hash of its listing (keys and
    listing identities; no object is read, a web JSONL file is asked for its headers)."""
    if is_web_url(source.path):
        try:
            info = _web_head(source.path)
        except (urllib.error.URLError, OSError, ValueError):
            return "unlisted"
        return listing_identity(info) or "unknown"
    try:
        fs = filesystem(source.path, store_cfg)
        root = strip_scheme(source.path).rstrip("/")
        if remote_kind(source) == "folder":
            listing = fs.find(root, detail=True)
        else:
            listing = {root: fs.info(root)}
    except Exception:  # the run reports why; the sensor keeps ticking
        return "unlisted"
    lines = json.dumps([[k, listing_identity(v)] for k, v in sorted(listing.items())])
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()[:16]
