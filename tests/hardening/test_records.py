"""Issue 54: one record never sinks a source, in any store; archives are bounded by what they
unpack to, and a DOCX parses in time linear in its paragraphs.

Any string a JSON parser accepts (lone surrogates, NUL, control characters) in any field of a
JSONL record either is stored faithfully, and its id addressed by a where-filter and `delete
--doc`, or fails that document alone with a reason naming the field, on LanceDB and pgvector
alike. The property runs the core steps the Dagster assets call (as test_properties.py does);
the bomb runs through the real ingestion job.
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from clef_pipelines.cli.main import app
from clef_pipelines.config import ParsingConfig, Settings, SourceConfig, load_settings
from clef_pipelines.embedding import make_embedder
from clef_pipelines.ingest import stages
from clef_pipelines.ingest.documents import (
    FAILED,
    pipeline_fingerprint,
    plan_inventory,
    stored_documents,
)
from clef_pipelines.ingest.metadata import stored_field_types
from clef_pipelines.ingest.sync import embed_chunks, sync_source
from clef_pipelines.parsing import load_file, parse_document
from clef_pipelines.parsing.docx import parse_docx
from clef_pipelines.parsing.loaders import iter_source_entries
from clef_pipelines.parsing.models import ParseError
from clef_pipelines.stores import open_store
from tests.hardening.test_inputs import _cli
from tests.ingest.conftest import make_workspace

runner = CliRunner()

# --- records holding any string JSON accepts --------------------------------------------------

_SPECIAL = ["\x00", "\ud800", "\udfff", "\udc80", "\x01", "\x1f", "\x7f", "\n", "\t", "'", '"']
# Any code point, surrogates included, with one of the hard ones planted in most strings.
_chars = st.characters(codec=None, blacklist_categories=())
_strings = st.builds(
    lambda a, special, b: a + special + b,
    st.text(alphabet=_chars, max_size=4),
    st.sampled_from(["", "", *_SPECIAL]),
    st.text(alphabet=_chars, max_size=4),
)
_records = st.lists(
    st.fixed_dictionaries({"id": _strings, "title": _strings, "text": _strings, "meta": _strings}),
    min_size=1,
    max_size=3,
)


def _unstorable(value: str) -> bool:
    return "\x00" in value or any(0xD800 <= ord(c) <= 0xDFFF for c in value)


def _jsonl(records: list[dict[str, str]]) -> tuple[str, list[dict[str, Any]]]:
    """The JSONL text (ASCII: surrogates and NUL as \\u escapes) and the documents it holds."""
    docs = []
    for i, r in enumerate(records):
        docs.append(
            {
                "id": f"{r['id']}#{i}",  # unique and never blank
                "title": r["title"],
                "text": f"Words to index {i}. {r['text']}",
                "metadata": {"note": r["meta"]},
            }
        )
    return "".join(json.dumps(d) + "\n" for d in docs), docs


def _expected_fields(doc: dict[str, Any]) -> list[str]:
    """The fields of `doc` no store can hold: one of them must be named by its failure."""
    fields = [f for f in ("id", "title", "text") if _unstorable(doc[f])]
    return fields + (["metadata.note"] if _unstorable(doc["metadata"]["note"]) else [])


def _config(root: Path, store: dict[str, Any]) -> Path:
    raw = {
        "data_dir": str(root / "state"),
        "collection": "c" + uuid.uuid4().hex[:12],
        "sources": [{"name": "records", "path": "records.jsonl"}],
        "embedder": {"kind": "hash", "dimension": 16},
        "store": store,
        "steering": {"guard": {"mode": "off"}},
    }
    path = root / "clef-pipelines.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _ingest(cfg: Settings, source: SourceConfig) -> pl.DataFrame:
    """One source through the core steps; the inventory (status, reason, error per doc_id),
    with the later steps' failures folded in."""
    collection = cfg.collection_of(source)
    store = open_store(cfg.store, cfg.data_path)
    embedder = make_embedder(cfg.embedder)
    try:
        fingerprint = pipeline_fingerprint(cfg, embedder.name)
        inventory = plan_inventory(
            source.name,
            stages.list_entries(cfg, source, fingerprint),
            stored_documents(store, collection, source.name),
        )
        blocks, parse_failed = stages.parse_source(cfg, source, inventory, fingerprint)
        steering = stages.open_steering(cfg, None)
        try:
            screened, _ = stages.screen_paragraphs(blocks, steering)
            chunks, chunk_failed = stages.chunk_documents(
                cfg, source.name, screened, field_types=stored_field_types(store, collection)
            )
            enriched, _ = stages.enrich_chunks(chunks, steering)
        finally:
            steering.close()
        embedded, _ = embed_chunks(enriched, embedder, store, collection)
        sync_source(
            store, collection, source.name, inventory, embedded, embedder, chunker="structural"
        )
    finally:
        store.close()
    later = pl.concat([parse_failed, chunk_failed], how="diagonal_relaxed")
    assert later.is_empty(), later.to_dicts()  # every such record fails while listing
    return inventory


def _check_source(root: Path, store_cfg: dict[str, Any], records: list[dict[str, str]]) -> None:
    text, docs = _jsonl(records)
    (root / "records.jsonl").write_text(text, encoding="ascii")
    config = _config(root, store_cfg)
    cfg = load_settings(config)
    inventory = _ingest(cfg, cfg.source("records"))  # never raises: the source does not fail
    store = open_store(cfg.store, cfg.data_path)
    try:
        for lineno, doc in enumerate(docs, start=1):
            bad = _expected_fields(doc)
            if bad:
                failed = [r for r in inventory.iter_rows(named=True) if r["status"] == FAILED]
                match = [r for r in failed if r["source_uri"].endswith(f"#L{lineno}")]
                assert match, (doc, inventory.to_dicts())
                (row,) = match
                assert row["reason"] in ("invalid_text", "binary"), row
                assert any(f"field '{f}'" in row["error"] for f in bad), (bad, row)
                assert "position" in row["error"], row
                continue
            got = list(store.scan(cfg.collection, where={"doc_id": doc["id"]}))
            assert got, (doc, inventory.to_dicts())
            assert {r["doc_id"] for r in got} == {doc["id"]}
            assert all(r["title"] == doc["title"].strip() or not doc["title"].strip() for r in got)
            assert all(r["m_note"] == doc["metadata"]["note"] for r in got), got
    finally:
        store.close()
    stored = [d for d in docs if not _expected_fields(d)]
    if stored:  # the CLI addresses a stored id, whatever characters it holds
        out = runner.invoke(
            app,
            [
                "delete",
                "--collection",
                cfg.collection,
                "--doc",
                stored[0]["id"],
                "--config",
                str(config),
            ],
        )
        assert out.exit_code == 0, out.output
        store = open_store(cfg.store, cfg.data_path)
        try:
            assert not list(store.scan(cfg.collection, where={"doc_id": stored[0]["id"]}))
            for d in stored[1:]:
                assert list(store.scan(cfg.collection, where={"doc_id": d["id"]}))
        finally:
            store.close()


@pytest.mark.parametrize("kind", ["lancedb", "pgvector"])
def test_any_json_string_in_any_field_never_sinks_the_source(
    kind: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    store_cfg: dict[str, Any] = {"kind": kind}
    if kind == "pgvector":
        monkeypatch.setenv("CLEF_PG_DSN", request.getfixturevalue("pg_dsn"))

    @settings(
        max_examples=10,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(records=_records)
    def check(records: list[dict[str, str]]) -> None:
        root = Path(tempfile.mkdtemp(prefix="clef-rec-"))
        try:
            if kind == "pgvector":
                store_cfg["pgvector"] = {"schema_name": "rec_" + uuid.uuid4().hex[:10]}
            _check_source(root, store_cfg, records)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    check()


def _failed(report: Any) -> dict[str, str]:
    """doc id -> "reason: error", from every asset that can fail documents."""
    out: dict[str, str] = {}
    for asset in ("source_documents", "parsed_blocks", "chunks"):
        for row in report.assets.get(asset, {}).get("failed_documents") or []:
            out[row["doc_id"]] = f"{row['reason']}: {row['error']}"
    return out


@pytest.mark.parametrize("kind", ["lancedb", "pgvector"])
def test_the_issue_records_fail_alone_through_the_job(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Issue 54's records (a lone surrogate in id, text or metadata; NUL in id, title or
    metadata; NUL in a file past the sniffed 8 KiB) fail alone; the source syncs the rest."""
    store: dict[str, Any] = {"kind": kind}
    if kind == "pgvector":
        monkeypatch.setenv("CLEF_PG_DSN", request.getfixturevalue("pg_dsn"))
        store["pgvector"] = {"schema_name": "rec_" + uuid.uuid4().hex[:10]}
    ws = make_workspace(
        tmp_path,
        monkeypatch,
        store=store,
        sources=[{"name": "records", "path": "records.jsonl"}, {"name": "files", "path": "corpus"}],
    )
    records = [
        {
            "id": "ok",
            "title": "Fine",
            "text": "Tokens expire after an hour.",
            "metadata": {"a": "\x01"},
        },
        {"id": "ab\ud800c", "text": "A lone surrogate in the id."},
        {"id": "t", "text": "A lone surrogate \udfff in the text."},
        {"id": "m", "text": "In the metadata.", "metadata": {"author": "x\ud800"}},
        {"id": "nul\x00id", "text": "NUL in the id."},
        {"id": "nt", "title": "a\x00b", "text": "NUL in the title."},
        {"id": "nm", "text": "NUL in the metadata.", "metadata": {"author": "x\x00"}},
        {"id": "ctl\x07\n", "text": "Control characters in the id are kept."},
    ]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (ws.corpus / "late-nul.txt").write_text("plain words " * 1000 + "\x00 and more")

    reports = ws.ingest()
    assert all(r.success for r in reports), [r.error for r in reports]
    failed = {k: v for r in reports for k, v in _failed(r).items()}
    expected = {
        "records.jsonl#L2": "invalid_text: records.jsonl line 2: field 'id' holds a lone "
        "surrogate (U+D800) at position 2",
        "t": "invalid_text: records.jsonl line 3: field 'text' holds a lone surrogate (U+DFFF)",
        "m": "invalid_text: records.jsonl line 4: field 'metadata.author' holds a lone surrogate",
        "records.jsonl#L5": "invalid_text: records.jsonl line 5: field 'id' holds a NUL",
        "nt": "invalid_text: records.jsonl line 6: field 'title' holds a NUL character (U+0000) "
        "at position 1",
        "nm": "invalid_text: records.jsonl line 7: field 'metadata.author' holds a NUL",
        "late-nul.txt": "binary: late-nul.txt: the text holds a NUL character (U+0000) at "
        "position 12000",
    }
    for doc_id, message in expected.items():
        assert failed.get(doc_id, "").startswith(message), (doc_id, failed)
    stored = {r["doc_id"] for r in ws.records()}
    assert {"ok", "ctl\x07\n"} <= stored
    assert not stored & set(expected)
    assert any(d.endswith(".md") for d in stored)  # the folder source synced its files
    ok = [r for r in ws.records() if r["doc_id"] == "ok"]
    assert ok and all(r["m_a"] == "\x01" for r in ok)  # other controls are kept as written


def test_a_file_name_that_is_not_utf8_fails_alone(tmp_path: Path) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "ok.md").write_text("# Fine\n\nText.\n")
    with open(bytes(folder) + b"/caf\xe9.md", "w") as fh:
        fh.write("# Latin-1 name\n")
    entries = {e.doc_id: e for e in iter_source_entries(SourceConfig(name="f", path="f"), tmp_path)}
    assert entries["ok.md"].ok
    bad = entries["caf\\udce9.md"]
    assert bad.error is not None and bad.error.reason == "invalid_text"
    assert "lone surrogate (U+DCE9) at position 3" in str(bad.error)


# --- archives ------------------------------------------------------------------------------

_W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
_CT = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
    'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-'
    'officedocument.wordprocessingml.document.main+xml"/></Types>'
)
_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
    'relationships/officeDocument" Target="word/document.xml"/></Relationships>'
)
_PARA = "<w:p><w:r><w:t>a</w:t></w:r></w:p>"


def _docx(body: str, repeat: int = 1, extra_entries: int = 0) -> bytes:
    """A minimal DOCX whose body is `body` `repeat` times (written a slice at a time)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("[Content_Types].xml", _CT)
        z.writestr("_rels/.rels", _RELS)
        with z.open("word/document.xml", "w", force_zip64=True) as part:
            part.write(f'<?xml version="1.0"?><w:document {_W}><w:body>'.encode())
            left = repeat
            while left > 0:
                part.write(body.encode() * min(left, 100_000))
                left -= 100_000
            part.write(b"</w:body></w:document>")
        for i in range(extra_entries):
            z.writestr(f"media/{i}.txt", "")
    return buf.getvalue()


def test_a_docx_bomb_fails_alone_as_too_large_quickly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bomb = _docx(_PARA, repeat=3_000_000)  # about 105 MB of XML, well under 1 MB on disk
    assert len(bomb) < 1_000_000
    ws = make_workspace(tmp_path, monkeypatch)
    (ws.corpus / "bomb.docx").write_bytes(bomb)
    (ws.corpus / "fine.docx").write_bytes(
        _docx("<w:p><w:r><w:t>Rotate the API key every month.</w:t></w:r></w:p>")
    )
    # The issue's `inspect`, in a child process: a parser that inflates the bomb fails the
    # test on the timeout instead of hanging the suite.
    out = _cli(
        "inspect",
        str(ws.corpus / "bomb.docx"),
        "--config",
        str(ws.config_path),
        cwd=tmp_path,
        timeout=60,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "parsing.max_unpacked_bytes (64000000)" in out.stdout + out.stderr
    start = time.monotonic()
    with pytest.raises(ParseError) as info:
        parse_document(load_file(ws.corpus / "bomb.docx"))
    assert time.monotonic() - start < 5
    assert info.value.reason == "too_large"

    (report,) = ws.ingest()
    assert report.success, report.error
    failed = _failed(report)
    assert failed["bomb.docx"].startswith("too_large: "), failed
    assert "parsing.max_unpacked_bytes" in failed["bomb.docx"]
    stored = {r["doc_id"] for r in ws.records()}
    assert "fine.docx" in stored and "bomb.docx" not in stored


def test_archive_limits_are_settings_and_a_lying_directory_is_caught(tmp_path: Path) -> None:
    from clef_pipelines.parsing.archive import check_zip

    data = _docx(_PARA, repeat=1000, extra_entries=20)
    with pytest.raises(ParseError) as info:
        check_zip(data, "x.docx", max_unpacked_bytes=10**9, max_entries=10)
    assert info.value.reason == "too_large" and "parsing.max_archive_entries (10)" in str(
        info.value
    )
    with pytest.raises(ParseError) as info:
        check_zip(data, "x.docx", max_unpacked_bytes=20_000, max_entries=100)
    assert info.value.reason == "too_large"
    # A directory that understates an entry's size: the bytes read are cut at the declared
    # size and fail the CRC (malformed), or are counted and stop at the limit; never unbounded.
    big = _docx(_PARA, repeat=100_000)
    lying = bytearray(big)
    central = lying.rfind(b"PK\x01\x02", 0, lying.rfind(b"word/document.xml") + 1)
    assert central > 0
    lying[central + 24 : central + 28] = (100).to_bytes(4, "little")  # uncompressed size
    with pytest.raises(ParseError) as info:
        check_zip(bytes(lying), "lying.docx", max_unpacked_bytes=10**9, max_entries=100)
    assert info.value.reason in ("malformed", "too_large")
    doc = tmp_path / "limits.docx"
    doc.write_bytes(_docx(_PARA, repeat=1000))
    cfg = ParsingConfig(max_unpacked_bytes=1_000)
    with pytest.raises(ParseError) as info:
        parse_document(load_file(doc, cfg))
    assert info.value.reason == "too_large" and "(1000)" in str(info.value)


def test_a_docx_of_many_tiny_paragraphs_parses_in_linear_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import docx
    from docx.text.paragraph import Paragraph

    made = docx.Document()  # python-docx's template: real styles to resolve
    made.add_heading("Top", 1)
    buf = io.BytesIO()
    made.save(buf)
    out = io.BytesIO()
    with zipfile.ZipFile(buf) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "word/document.xml":
                data = data.replace(b"</w:p>", b"</w:p>" + _PARA.encode() * 50_000, 1)
            dst.writestr(info, data)

    def per_paragraph_lookup(self: Any) -> None:  # two XPath queries a paragraph
        raise AssertionError("Paragraph.style looked up per paragraph")

    monkeypatch.setattr(Paragraph, "style", property(per_paragraph_lookup))
    blocks = parse_docx(out.getvalue(), "many.docx")
    assert len(blocks) == 50_001
    assert (blocks[0].kind, blocks[0].level, blocks[0].text) == ("heading", 1, "Top")
    assert blocks[-1].text == "a" and blocks[-1].heading_path == ["Top"]
    assert blocks[-1].char_start == blocks[-2].char_end + 2
