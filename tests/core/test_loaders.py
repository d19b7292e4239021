"""Loaders: folder walking, JSONL records, hashes, and every per-document failure reason."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clef_pipelines.config import ParsingConfig, SourceConfig
from clef_pipelines.parsing import (
    ParseError,
    SourceEntry,
    iter_source_entries,
    load_file,
    parse_document,
)

GOOD_MD = "# Northwind Guide\n\nSync keeps folders in step.\n"


def _entries(path: Path, cfg: ParsingConfig | None = None, **kw: object) -> dict[str, SourceEntry]:
    source = SourceConfig(name="t", path=path.name, **kw)  # type: ignore[arg-type]
    return {e.doc_id: e for e in iter_source_entries(source, path.parent, cfg or ParsingConfig())}


def _reason(entry: SourceEntry, cfg: ParsingConfig | None = None) -> str:
    """The failure reason of an entry, whether found while listing or while loading/parsing."""
    if entry.error is not None:
        return entry.error.reason
    with pytest.raises(ParseError) as info:
        parse_document(entry.load(cfg), cfg)
    return info.value.reason


def test_folder_walk_globs_ids_titles(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    (root / "guide" / "drafts").mkdir(parents=True)
    (root / "guide" / "auth.md").write_text(GOOD_MD)
    (root / "guide" / "drafts" / "wip.md").write_text("# WIP\n\ntext\n")
    (root / "notes.txt").write_text("just a note without heading\n")
    (root / "image.png").write_bytes(b"\x89PNG")
    entries = _entries(root, exclude=["**/drafts/**"])
    assert sorted(entries) == ["guide/auth.md", "notes.txt"]
    doc = entries["guide/auth.md"].load()
    assert doc.title == "Northwind Guide"
    assert doc.format == "md"
    assert doc.source_uri.startswith("file://") and doc.source_uri.endswith("guide/auth.md")
    assert entries["notes.txt"].load().title == "notes"  # no heading: the file stem
    blocks = parse_document(entries["guide/auth.md"])
    assert [b.kind for b in blocks] == ["heading", "paragraph"]


def test_raw_hash_is_sha256_of_bytes_and_tracks_changes(tmp_path: Path) -> None:
    import hashlib

    root = tmp_path / "docs"
    root.mkdir()
    f = root / "a.md"
    f.write_text(GOOD_MD)
    first = _entries(root)["a.md"].raw_hash
    assert first == hashlib.sha256(GOOD_MD.encode()).hexdigest()
    assert _entries(root)["a.md"].raw_hash == first  # stable
    f.write_text(GOOD_MD + "More.\n")
    assert _entries(root)["a.md"].raw_hash != first


def test_bad_files_fail_alone(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "good.md").write_text(GOOD_MD)
    (root / "folder.md").mkdir()  # matches the glob but is not a file: unreadable
    os.symlink(root / "missing-target.md", root / "dangling.md")  # broken link: unreadable
    (root / "binary.txt").write_bytes(b"PK\x03\x04\x00\x00\x01\x02" * 50)
    (root / "empty.md").write_text("")
    (root / "blank.txt").write_text("  \n\n\t\n")
    (root / "latin1.txt").write_bytes("Café crème déjà vu".encode("latin-1"))
    (root / "big.md").write_text("# Big\n\n" + "word " * 400)
    (root / "nav-only.html").write_text("<html><body><nav><a href='/'>Home</a></nav></body></html>")
    cfg = ParsingConfig(max_file_bytes=1000)
    entries = _entries(root, cfg)
    reasons = {doc_id: _reason(e, cfg) for doc_id, e in entries.items() if doc_id != "good.md"}
    assert reasons == {
        "folder.md": "unreadable",
        "dangling.md": "unreadable",
        "binary.txt": "binary",
        "empty.md": "empty",
        "blank.txt": "empty",
        "latin1.txt": "encoding",
        "big.md": "oversize",
        "nav-only.html": "empty",
    }
    # Messages name the file.
    assert "latin1.txt" in str(_err(entries["latin1.txt"], cfg))
    assert "binary.txt" in str(_err(entries["binary.txt"], cfg))
    # The good document still loads.
    assert parse_document(entries["good.md"].load(cfg))[0].text == "Northwind Guide"


def _err(entry: SourceEntry, cfg: ParsingConfig) -> ParseError:
    try:
        parse_document(entry.load(cfg), cfg)
    except ParseError as exc:
        return exc
    raise AssertionError("expected a ParseError")


def test_second_encoding_is_tried(tmp_path: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "latin1.txt").write_bytes("Café crème".encode("latin-1"))
    cfg = ParsingConfig(encodings=["utf-8", "latin-1"])
    doc = _entries(root, cfg)["latin1.txt"].load(cfg)
    assert doc.text == "Café crème"


def test_bom_is_dropped_and_offsets_count_from_text(tmp_path: Path) -> None:
    f = tmp_path / "bom.md"
    f.write_bytes(b"\xef\xbb\xbf" + GOOD_MD.encode())
    doc = load_file(f)
    blocks = parse_document(doc)
    assert doc.text == GOOD_MD
    p = blocks[1]
    assert doc.text[p.char_start : p.char_end] == "Sync keeps folders in step."


def test_missing_source_raises(tmp_path: Path) -> None:
    with pytest.raises(ParseError) as info:
        list(iter_source_entries(SourceConfig(name="x", path="nope"), tmp_path, ParsingConfig()))
    assert info.value.reason == "unreadable"


def test_jsonl_records_and_failures(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    lines = [
        json.dumps(
            {
                "_id": "4983",
                "title": "White matter",
                "text": "Alterations of the brain.",
                "metadata": {"year": 2001, "tags": ["a"]},
            }
        ),
        '{"_id": "5", "title": "Broken", "text": "unterminated',
        json.dumps({"id": "6", "title": "No text"}),
        "",
        json.dumps({"id": "7", "text": "   "}),
        json.dumps({"id": 8, "text": "# Heading\n\nBody.", "format": "md"}),
        json.dumps({"title": "no id", "text": "x"}),
        json.dumps({"id": "4983", "text": "duplicate"}),
    ]
    path.write_text("\n".join(lines) + "\n")
    entries = list(iter_source_entries(SourceConfig(name="s", path=path.name), tmp_path))
    assert len(entries) == 7
    good = entries[0]
    assert good.ok and good.doc_id == "4983" and good.format == "txt"
    doc = good.load()
    assert doc.title == "White matter"
    assert doc.metadata == {"year": 2001, "tags": '["a"]'}
    assert doc.source_uri.endswith("corpus.jsonl#4983")
    assert parse_document(doc)[0].text == "Alterations of the brain."

    broken = entries[1]
    assert broken.error is not None and broken.error.reason == "malformed"
    assert "corpus.jsonl line 2" in str(broken.error) and "invalid JSON" in str(broken.error)
    assert entries[2].error is not None and entries[2].error.reason == "malformed"
    assert "text" in str(entries[2].error) and "line 3" in str(entries[2].error)
    assert entries[3].error is not None and entries[3].error.reason == "empty"
    md_doc = entries[4].load()
    assert md_doc.doc_id == "8" and md_doc.title == "Heading"  # no title: first heading
    assert entries[5].error is not None and entries[5].error.reason == "malformed"
    assert entries[6].error is not None and "duplicate" in str(entries[6].error)


def test_jsonl_hash_is_canonical(tmp_path: Path) -> None:
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.jsonl"
    a.write_text('{"_id": "1", "title": "T", "text": "x"}\n')
    b.write_text('{"text":"x","_id":"1","title":"T"}\n')  # same record, other key order
    ha = next(iter_source_entries(SourceConfig(name="a", path="a.jsonl"), tmp_path)).raw_hash
    hb = next(iter_source_entries(SourceConfig(name="b", path="b.jsonl"), tmp_path)).raw_hash
    assert ha == hb and ha is not None


def test_jsonl_oversize_line(tmp_path: Path) -> None:
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps({"id": "1", "text": "word " * 100}) + "\n")
    cfg = ParsingConfig(max_file_bytes=100)
    (entry,) = iter_source_entries(SourceConfig(name="c", path="c.jsonl"), tmp_path, cfg)
    assert entry.error is not None and entry.error.reason == "oversize"


def test_docx_headings_and_tables(tmp_path: Path) -> None:
    docx = pytest.importorskip("docx")
    d = docx.Document()
    d.add_heading("Northwind Admin", level=1)
    d.add_paragraph("Admins manage seats.")
    d.add_heading("Seats", level=2)
    d.add_paragraph("Add a seat", style="List Bullet")
    t = d.add_table(rows=2, cols=2)
    t.cell(0, 0).text, t.cell(0, 1).text = "Plan", "Seats"
    t.cell(1, 0).text, t.cell(1, 1).text = "Team", "10"
    path = tmp_path / "admin.docx"
    d.save(str(path))
    doc = load_file(path)
    blocks = parse_document(doc)
    assert doc.title == "Northwind Admin"
    assert [b.kind for b in blocks] == ["heading", "paragraph", "heading", "list_item", "table"]
    assert blocks[3].heading_path == ["Northwind Admin", "Seats"]
    assert blocks[4].text == "| Plan | Seats |\n| --- | --- |\n| Team | 10 |"


def _tiny_pdf(text: str) -> bytes:
    """A one-page PDF with one line of text, xref offsets computed."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objs = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    return bytes(out)


def test_pdf_text_and_malformed(tmp_path: Path) -> None:
    pytest.importorskip("pypdf")
    good = tmp_path / "sync.pdf"
    good.write_bytes(_tiny_pdf("Northwind Sync keeps folders in step."))
    blocks = parse_document(load_file(good))
    assert blocks[0].text == "Northwind Sync keeps folders in step."
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"%PDF-1.4 this is not really a pdf")
    with pytest.raises(ParseError) as info:
        parse_document(load_file(bad))
    assert info.value.reason == "malformed" and "bad.pdf" in str(info.value)


def test_missing_extra_is_unsupported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pypdf", None)  # makes `import pypdf` fail
    f = tmp_path / "x.pdf"
    f.write_bytes(_tiny_pdf("hello"))
    with pytest.raises(ParseError) as info:
        load_file(f)
    assert info.value.reason == "unsupported"
    assert "clef-pipelines[pdf]" in str(info.value)


def test_parse_error_pickles_with_reason() -> None:
    import pickle

    err = pickle.loads(pickle.dumps(ParseError("binary", "x.bin: binary")))
    assert err.reason == "binary" and str(err) == "x.bin: binary"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_with_a_bom_decode(tmp_path: Path, encoding: str) -> None:
    """Text that is half NUL bytes is not `binary` when a byte-order mark says what it is."""
    text = "# Northwind Guide\n\nSync keeps folders in step: café.\n"
    f = tmp_path / "wide.md"
    bom = {"utf-16-be": b"\xfe\xff"}.get(encoding, b"")  # (utf-16 and utf-32 write their own)
    f.write_bytes(bom + text.encode(encoding))
    doc = load_file(f)
    assert doc.text == text
    p = parse_document(doc)[1]
    assert doc.text[p.char_start : p.char_end] == "Sync keeps folders in step: café."
    # Without the mark, NUL bytes are still a binary file.
    f.write_bytes(text.encode("utf-16-le"))
    with pytest.raises(ParseError) as info:
        load_file(f)
    assert info.value.reason == "binary"


@pytest.mark.parametrize(
    ("name", "body", "first"),
    [
        ("a.txt", "Hello world.\n\nSecond paragraph.\n", "Hello world."),
        ("a.md", "# Title\n\nSome text.\n", "Some text."),
        ("a.rst", "Title\n=====\n\nSome text.\n", "Some text."),
        ("a.html", "<html><body><h1>Title</h1><p>Some text.</p></body></html>", "Some text."),
    ],
)
def test_a_utf8_bom_shifts_no_offset(tmp_path: Path, name: str, body: str, first: str) -> None:
    """Offsets are those of the text without the mark, in every text format."""
    f = tmp_path / name
    f.write_bytes(b"\xef\xbb\xbf" + body.encode())
    doc = load_file(f)
    assert doc.text == body
    block = next(b for b in parse_document(doc) if b.text == first)
    assert (block.char_start, block.char_end) == (body.index(first), body.index(first) + len(first))


def _docx_with_entity(path: Path, entity_decl: str) -> None:
    """A .docx whose body text uses the entity ``&corp;``, with `entity_decl` as its DTD."""
    import io
    import zipfile

    docx = pytest.importorskip("docx")
    d = docx.Document()
    d.add_paragraph("Hello XENTX world after it.")
    t = d.add_table(rows=1, cols=2)
    t.cell(0, 0).text, t.cell(0, 1).text = "cell XENTX tail", "x"
    buf = io.BytesIO()
    d.save(buf)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zin, zipfile.ZipFile(out, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "word/document.xml":
                head, rest = data.decode().split("?>", 1)
                data = f"{head}?>{entity_decl}{rest}".replace("XENTX", "&corp;").encode()
            zout.writestr(item, data)
    path.write_bytes(out.getvalue())


def test_docx_text_after_an_entity_is_kept(tmp_path: Path) -> None:
    """python-docx leaves entity references unresolved and its text stopped at the first one:
    the rest of the run was dropped. A declared internal entity is its text; the text after
    it is kept."""
    path = tmp_path / "entity.docx"
    _docx_with_entity(path, '<!DOCTYPE w:document [<!ENTITY corp "Northwind">]>')
    blocks = parse_document(load_file(path))
    assert [b.text for b in blocks] == [
        "Hello Northwind world after it.",
        "| cell Northwind tail | x |",
    ]
    # An external entity is never read (no XXE): it stays as written, and the text after it too.
    _docx_with_entity(path, '<!DOCTYPE w:document [<!ENTITY corp SYSTEM "file:///etc/hostname">]>')
    blocks = parse_document(load_file(path))
    assert blocks[0].text == "Hello &corp; world after it."


def test_a_bom_opening_a_jsonl_text_is_dropped(tmp_path: Path) -> None:
    """A JSONL text that starts with U+FEFF (a file's mark exported as it was): the mark is
    not content, and offsets count from the first character after it."""
    f = tmp_path / "docs.jsonl"
    body = "BOM inside text.\n\nMore here."
    f.write_bytes(
        b"\xef\xbb\xbf" + (json.dumps({"id": "b", "text": "\ufeff" + body}) + "\n").encode()
    )
    (entry,) = _entries(f).values()
    doc = entry.load(ParsingConfig())
    assert doc.text == body
    first = parse_document(doc)[0]
    assert (first.char_start, first.char_end, first.text) == (0, 16, "BOM inside text.")
