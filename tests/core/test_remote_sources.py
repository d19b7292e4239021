"""Remote sources without Dagster: the listing of an S3 prefix (moto on loopback, tests/
objectstore.py) and of a web file (a loopback HTTP server), and the settings that reach them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from clef_pipelines.config import ConfigError, settings_from_dict
from clef_pipelines.objectstore import ObjectStoreConfig, ObjectStoreError, filesystem
from clef_pipelines.parsing.loaders import iter_source_entries
from clef_pipelines.parsing.models import ParseError
from clef_pipelines.redact import redact
from tests.objectstore import SECRET, S3Server


def _entries(settings, name: str = "s"):  # noqa: ANN001, ANN202
    source = settings.source(name)
    return list(
        iter_source_entries(source, settings.base_dir, settings.parsing, settings.object_store)
    )


def test_listing_reads_no_object_and_names_failures(s3: S3Server, tmp_path: Path) -> None:
    client = s3.client()
    for key in ("docs/a.md", "docs/sub/b.txt", "docs/c.html", "docs/skip.bin", "other/x.md"):
        client.put_object(Bucket=s3.bucket_name, Key=key, Body=b"# Title\n\nSome text here.\n")
    client.put_object(Bucket=s3.bucket_name, Key="docs/big.md", Body=b"x" * 2000)
    settings = settings_from_dict(
        {
            "sources": [{"name": "s", "path": f"s3://{s3.bucket_name}/docs", "exclude": ["c.*"]}],
            "object_store": s3.settings(),
            "parsing": {"max_file_bytes": 1000},
        },
        base_dir=tmp_path,
    )
    entries = {e.doc_id: e for e in _entries(settings)}
    assert sorted(entries) == ["a.md", "big.md", "sub/b.txt"]
    assert s3.traffic.object_gets() == []  # the listing alone: no object was read
    assert entries["big.md"].error is not None and entries["big.md"].error.reason == "oversize"
    doc = entries["sub/b.txt"].load()
    assert doc.title == "b" and doc.source_uri == f"s3://{s3.bucket_name}/docs/sub/b.txt"
    assert doc.raw_hash == entries["sub/b.txt"].raw_hash  # what the next listing compares

    # Same bytes uploaded again: same ETag, same hash; other bytes: another hash.
    before = entries["a.md"].raw_hash
    client.put_object(Bucket=s3.bucket_name, Key="docs/a.md", Body=b"# Title\n\nSome text here.\n")
    assert {e.doc_id: e.raw_hash for e in _entries(settings)}["a.md"] == before
    client.put_object(Bucket=s3.bucket_name, Key="docs/a.md", Body=b"# Title\n\nNew text.\n")
    assert {e.doc_id: e.raw_hash for e in _entries(settings)}["a.md"] != before

    # A 500 and a 403 on one object each: that object fails alone, with the HTTP status.
    s3.fail(r"/docs/a\.md$", 500)
    s3.fail(r"/docs/sub/b\.txt$", 403)
    entries = {e.doc_id: e for e in _entries(settings)}
    for doc_id, said in (("a.md", "internal error"), ("sub/b.txt", "Access Denied")):
        with pytest.raises(ParseError) as err:
            entries[doc_id].load()
        assert err.value.reason == "unreadable"
        assert doc_id in str(err.value) and said in str(err.value)
        assert SECRET not in str(err.value)

    # A listing that fails is one failure, `unlisted`, and nothing else.
    s3.fail(r"list-type=", 403)
    (only,) = _entries(settings)
    assert only.error is not None and only.error.reason == "unlisted"
    assert "PermissionError" in str(only.error)  # the 403, as the client saw it


def test_each_s3_filesystem_has_its_own_session_and_the_one_parsed_botocore_data(
    s3: S3Server,
) -> None:
    """`filesystem` is fresh each time (a refresh sees the bucket as it is): a new session
    (credentials and region read again), but botocore's parsed data files are loaded once."""
    s3.client().put_object(Bucket=s3.bucket_name, Key="docs/a.md", Body=b"# A\n\na\n")
    cfg = ObjectStoreConfig(**s3.settings())
    first, second = (filesystem(f"s3://{s3.bucket_name}/docs", cfg) for _ in range(2))
    assert first is not second and first.session is not second.session
    loader = first.session.get_component("data_loader")
    assert second.session.get_component("data_loader") is loader
    for fs in (first, second):
        assert fs.cat_file(f"{s3.bucket_name}/docs/a.md") == b"# A\n\na\n"
    # Loaded through that loader, not beside it: S3's service model is in its cache.
    assert any("s3" in str(key) for key in loader._cache)


@pytest.fixture
def web_root(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "site"
    root.mkdir()
    handler = partial(SimpleHTTPRequestHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def test_web_file_and_web_jsonl(web_root: tuple[str, Path], tmp_path: Path) -> None:
    url, root = web_root
    (root / "guide.md").write_text("# Guide\n\nRotate the token.\n")
    (root / "docs.jsonl").write_text(
        '{"id": "one", "text": "First."}\n{"id": "two", "text": "Second."}\nnot json\n'
    )
    settings = settings_from_dict(
        {
            "sources": [
                {"name": "page", "path": f"{url}/guide.md"},
                {"name": "lines", "path": f"{url}/docs.jsonl"},
                {"name": "gone", "path": f"{url}/missing.md"},
            ]
        },
        base_dir=tmp_path,
    )
    (page,) = _entries(settings, "page")
    assert page.doc_id == "guide.md" and page.error is None
    assert page.load().title == "Guide"
    lines = _entries(settings, "lines")
    assert [e.doc_id for e in lines if e.ok] == ["one", "two"]
    assert [e.error.reason for e in lines if e.error is not None] == ["malformed"]
    (gone,) = _entries(settings, "gone")
    assert gone.error is not None and gone.error.reason == "unlisted" and "404" in str(gone.error)


def test_settings_refuse_secrets_in_urls_and_name_unset_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match="sources.0.path"):
        settings_from_dict({"sources": [{"name": "s", "path": "s3://key:secret@bucket/p"}]})
    with pytest.raises(ConfigError, match="unknown URL scheme 'ftp'"):
        settings_from_dict({"sources": [{"name": "s", "path": "ftp://host/p"}]})
    with pytest.raises(ConfigError, match="object_store.endpoint_url"):
        settings_from_dict({"object_store": {"endpoint_url": "http://k:s@127.0.0.1:9000"}})
    monkeypatch.delenv("CLEF_TEST_UNSET_KEY", raising=False)
    cfg = ObjectStoreConfig(access_key_id_env="CLEF_TEST_UNSET_KEY")
    with pytest.raises(ObjectStoreError, match="access_key_id_env names 'CLEF_TEST_UNSET_KEY'"):
        filesystem("s3://bucket/p", cfg)
    # A secret read from a named variable is masked wherever it is printed afterwards.
    monkeypatch.setenv("CLEF_TEST_SET_KEY", "a-secret-key-value-123")
    filesystem("s3://bucket/p", ObjectStoreConfig(secret_access_key_env="CLEF_TEST_SET_KEY"))
    assert "a-secret-key-value-123" not in redact("failed with a-secret-key-value-123")
    # The embedded defaults stay local: no URL, nothing of fsspec's needed.
    defaults = settings_from_dict({}, base_dir=tmp_path)
    assert defaults.data_url is None
    assert defaults.intermediates_location == str(tmp_path / ".clef" / "intermediates")
