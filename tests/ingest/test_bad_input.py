"""One broken document fails alone, with its reason in the report; nothing stored is lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ingest.conftest import Ingested, make_workspace


def _failed(report) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """doc id -> failure table row text, from both assets that can fail documents."""
    out: dict[str, str] = {}
    for asset in ("source_documents", "parsed_blocks", "chunks"):
        for row in report.assets.get(asset, {}).get("failed_documents") or []:
            out[row["doc_id"]] = f"{row['reason']}: {row['error']}"
    return out


def test_each_bad_file_fails_alone_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace(tmp_path, monkeypatch, parsing={"max_file_bytes": 20_000})
    bad = ws.corpus / "bad"
    bad.mkdir()
    (bad / "binary.txt").write_bytes(b"\x00\x01\x02PNG\x00" * 100)
    (bad / "empty.md").write_text("   \n\n")
    (bad / "latin1.txt").write_bytes("caf\xe9 cr\xe8me br\xfbl\xe9e".encode("latin-1"))
    (bad / "huge.md").write_text("# Big\n\n" + "word " * 10_000)
    (bad / "folder.md").mkdir()  # a path that matches but cannot be read as a file
    (bad / "dangling.md").symlink_to(bad / "does-not-exist.md")
    (report,) = ws.ingest()
    assert report.success, report.error
    failed = _failed(report)
    expected = {
        "bad/binary.txt": "binary",
        "bad/empty.md": "empty",
        "bad/latin1.txt": "encoding",
        "bad/huge.md": "oversize",
        "bad/dangling.md": "unreadable",
    }
    for doc_id, reason in expected.items():
        assert doc_id in failed, f"{doc_id} not reported; failures: {failed}"
        assert failed[doc_id].startswith(reason), failed[doc_id]
        assert Path(doc_id).name in failed[doc_id]  # the message names the file
    stored = {r["doc_id"] for r in ws.records()}
    assert not stored & set(expected)
    good = {p.relative_to(ws.corpus).as_posix() for p in ws.corpus.rglob("*") if p.is_file()}
    assert good - set(expected) <= stored | {"bad/folder.md"}
    assert len(stored) >= 4


def test_a_document_that_breaks_keeps_its_stored_records(ingested: Ingested) -> None:
    workspace = ingested.workspace
    target = sorted(workspace.corpus.rglob("*.md"))[0]
    doc_id = target.relative_to(workspace.corpus).as_posix()
    before = {r["id"] for r in workspace.records() if r["doc_id"] == doc_id}
    target.write_bytes(b"\x00\x01garbage\xff\x00" * 50)  # binary, no byte-order mark
    (report,) = workspace.ingest()
    assert report.success
    assert doc_id in _failed(report)
    assert {r["id"] for r in workspace.records() if r["doc_id"] == doc_id} == before


def test_jsonl_bad_lines_fail_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = make_workspace(tmp_path, monkeypatch, sources=[{"name": "papers", "path": "papers.jsonl"}])
    lines = [
        json.dumps(
            {
                "_id": "p1",
                "title": "Tokens",
                "text": "Tokens expire after an hour.",
                "metadata": {"year": 2021},
            }
        ),
        "{not json",
        json.dumps({"_id": "p2", "title": "No text"}),
        json.dumps({"_id": "p3", "title": "Sync", "text": "Sync runs every five minutes."}),
    ]
    (ws.root / "papers.jsonl").write_text("\n".join(lines) + "\n")
    (report,) = ws.ingest()
    assert report.success, report.error
    records = ws.records()
    assert {r["doc_id"] for r in records} == {"p1", "p3"}
    assert any(r.get("m_year") in (2021, "2021") for r in records)
    failed = json.dumps(report.assets["source_documents"]["failed_documents"])
    assert "papers.jsonl" in failed and "line 2" in failed
    assert "malformed" in failed
    assert report.assets["source_documents"]["documents_failed"] == 2


def test_a_document_that_breaks_keeps_its_records_beside_another_changed_one(
    ingested: Ingested,
) -> None:
    """The inventory calls both documents changed (from their bytes); one then fails to parse.
    It arrives at the sync with no chunks beside a document that has some, and must keep what
    the store holds (it once lost every record here), while the other is replaced."""
    workspace = ingested.workspace
    broken, edited = sorted(workspace.corpus.rglob("*.md"))[:2]
    doc_id = broken.relative_to(workspace.corpus).as_posix()
    before = {r["id"] for r in workspace.records() if r["doc_id"] == doc_id}
    assert before
    broken.write_bytes(b"\x00\x01garbage\xff\x00" * 50)  # binary, no byte-order mark
    edited.write_text(edited.read_text() + "\n\nOne more paragraph about syncing files.\n")
    (report,) = workspace.ingest()
    assert report.success, report.error
    assert doc_id in _failed(report)
    assert {r["id"] for r in workspace.records() if r["doc_id"] == doc_id} == before
    edited_id = edited.relative_to(workspace.corpus).as_posix()
    assert any(
        "One more paragraph" in r["text"] for r in workspace.records() if r["doc_id"] == edited_id
    )
