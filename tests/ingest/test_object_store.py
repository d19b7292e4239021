"""Sources, intermediates and LanceDB on an object store: a real S3 API (moto's server on
loopback, behind the proxy of tests/objectstore.py that fails chosen requests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clef_pipelines.ingest import stages
from clef_pipelines.ingest.documents import (
    FAILED,
    REMOVED,
    listing_frame,
    plan_inventory_frame,
    stored_document_facts,
)
from tests.ingest.conftest import make_workspace
from tests.objectstore import SECRET, S3Server

#: Objects in the test bucket: a few hundred, small.
OBJECTS = 200


def _body(i: int, version: int = 1) -> bytes:
    return f"# Note {i}\n\nVersion {version} of note {i} about token rotation {i % 7}.\n".encode()


def _fill(s3: S3Server, prefix: str = "docs") -> None:
    client = s3.client()
    for i in range(OBJECTS):
        client.put_object(Bucket=s3.bucket_name, Key=f"{prefix}/n{i:03d}.md", Body=_body(i))
    # Not a document format (left out by the include globs), and two the proxy will refuse.
    client.put_object(Bucket=s3.bucket_name, Key=f"{prefix}/image.bin", Body=b"\x00\x01")
    client.put_object(Bucket=s3.bucket_name, Key=f"{prefix}/broken.md", Body=b"# B\n\nb\n")
    client.put_object(Bucket=s3.bucket_name, Key=f"{prefix}/denied.md", Body=b"# D\n\nd\n")


def _failures(report: Any, step: str) -> dict[str, str]:
    table = report.assets[step].get("failed_documents") or []
    rows = table if isinstance(table, list) else json.loads(json.dumps(table))
    return {r["doc_id"]: r["reason"] for r in rows}


def test_s3_source_refresh_downloads_only_changed_objects(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(s3)
    s3.fail(r"/docs/broken\.md$", 500)
    s3.fail(r"/docs/denied\.md$", 403)
    # The intermediates and LanceDB in the bucket too (through the same failing proxy).
    ws = make_workspace(
        tmp_path,
        monkeypatch,
        sources=[{"name": "bucket", "path": f"s3://{s3.bucket_name}/docs/"}],
        data_dir=f"s3://{s3.bucket_name}/clef",
        local_dir=str(tmp_path / "scratch"),
        object_store=s3.settings(),
    )

    (first,) = ws.ingest()
    assert first.success, first.error
    inventory = first.assets["source_documents"]
    assert inventory["documents_new"] == OBJECTS + 2
    parsed = _failures(first, "parsed_blocks")
    assert parsed == {"broken.md": "unreadable", "denied.md": "unreadable"}
    records = ws.records()
    assert {r["doc_id"] for r in records} == {f"n{i:03d}.md" for i in range(OBJECTS)}
    assert {r["source_uri"] for r in records if r["doc_id"] == "n001.md"} == {
        f"s3://{s3.bucket_name}/docs/n001.md"
    }

    # An edit and a delete; then a refresh reads the listing and downloads only the edited
    # object and the two that failed (never stored, so new again), nothing unchanged.
    client = s3.client()
    client.put_object(Bucket=s3.bucket_name, Key="docs/n005.md", Body=_body(5, version=2))
    client.delete_object(Bucket=s3.bucket_name, Key="docs/n007.md")
    s3.traffic.reset()
    (second,) = ws.ingest()
    assert second.success, second.error
    counts = second.assets["source_documents"]
    assert counts["documents_unchanged"] == OBJECTS - 2
    assert counts["documents_changed"] == 1
    assert counts["documents_removed"] == 1
    docs = f"/{s3.bucket_name}/docs/"
    fetched = {p.rsplit("/", 1)[-1] for p in s3.traffic.object_gets() if p.startswith(docs)}
    assert fetched == {"n005.md", "broken.md", "denied.md"}
    records = ws.records()
    assert "n007.md" not in {r["doc_id"] for r in records}
    assert any("Version 2 of note 5" in r["text"] for r in records if r["doc_id"] == "n005.md")
    # The keys came from the environment: no report carries them.
    assert SECRET not in json.dumps([first.assets, second.assets], default=str)
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=s3.bucket_name)["Contents"]}
    assert any(k.startswith("clef/lancedb/docs.lance/") for k in keys)
    assert any(k.startswith("clef/intermediates/") for k in keys)
    assert not (tmp_path / "scratch" / "lancedb").exists()

    # A listing that fails keeps every stored document (failed, not removed).
    s3.fail(r"list-type=2&prefix=docs", 500)
    settings = ws.settings()
    source = settings.sources[0]
    store = ws.store()
    try:
        plan = plan_inventory_frame(
            source.name,
            listing_frame(stages.iter_entries(settings, source, "fp")),
            stored_document_facts(store, "docs", source.name),
        )
    finally:
        store.close()
    assert REMOVED not in plan["status"].to_list()
    assert set(plan["status"].to_list()) == {FAILED}
    assert set(plan["reason"].to_list()) == {"unlisted"}
    assert plan.height == OBJECTS  # every stored document, and the listing's own failure


def _store_contents(ws: Any) -> dict[str, tuple[str, np.ndarray]]:
    store = ws.store()
    try:
        ids = store.list_ids("docs")
        return {
            r["id"]: (r["text"], np.asarray(r["vector"], dtype=np.float32))
            for r in store.get("docs", ids, with_vectors=True)
        }
    finally:
        store.close()


def _run_multiprocess(ws: Any, source: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    import dagster as dg

    from clef_pipelines.jobs.ingestion import PARTITIONS
    from clef_pipelines.jobs.launch import ensure_dagster_home, run_config
    from clef_pipelines.jobs.location import configured_ingestion_job

    # The settings' `executor: multiprocess`: each step in a process of its own, as a
    # production deployment runs them; the job is the code location's own.
    monkeypatch.setenv("CLEF_PIPELINES_CONFIG", str(ws.config_path))
    ensure_dagster_home(ws.settings())
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(PARTITIONS, [source])
        config = run_config()
        # Children forked from a server that imported the package once: each step is still
        # a process of its own, without paying the imports again (minutes on a busy machine).
        preload = ["dagster", "polars", "lancedb", "s3fs", "clef_pipelines.jobs.location"]
        config["execution"] = {
            "config": {"start_method": {"forkserver": {"preload_modules": preload}}}
        }
        with dg.execute_job(
            dg.reconstructable(configured_ingestion_job),
            instance=instance,
            tags={"dagster/partition": source},
            run_config=config,
        ) as result:
            steps = {
                e.step_key: e.pid
                for e in result.all_events
                if e.event_type_value == "STEP_START" and e.step_key
            }
            return result.success, steps


@pytest.mark.stress  # 14 step processes, one after another: minutes on a busy machine
def test_steps_in_separate_processes_on_object_storage_match_a_local_run(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.ingest.conftest import SAMPLE_CORPUS

    client = s3.client()
    for path in sorted(SAMPLE_CORPUS.rglob("*")):
        if path.is_file():
            key = f"corpus/{path.relative_to(SAMPLE_CORPUS).as_posix()}"
            client.put_object(Bucket=s3.bucket_name, Key=key, Body=path.read_bytes())

    local = make_workspace(
        tmp_path / "local", monkeypatch, sources=[{"name": "s", "path": "corpus"}]
    )
    (report,) = local.ingest()
    assert report.success, report.error

    remote = make_workspace(
        tmp_path / "remote",
        monkeypatch,
        sources=[{"name": "s", "path": f"s3://{s3.bucket_name}/corpus/"}],
        data_dir=f"s3://{s3.bucket_name}/clef",
        local_dir=str(tmp_path / "remote" / "scratch"),
        object_store=s3.settings(),
        executor="multiprocess",
    )
    ok, steps = _run_multiprocess(remote, "s", monkeypatch)
    assert ok
    assert len(set(steps.values())) == len(steps) > 5  # each step in a process of its own

    # Intermediates and the store live in the bucket, not under the local folder.
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=s3.bucket_name)["Contents"]}
    assert any(k.startswith("clef/intermediates/clef/chunks/") for k in keys), sorted(keys)[:20]
    assert any(k.startswith("clef/lancedb/docs.lance/") for k in keys)
    assert not (tmp_path / "remote" / "scratch" / "lancedb").exists()

    want, got = _store_contents(local), _store_contents(remote)
    assert sorted(got) == sorted(want) and len(want) > 5
    for record_id, (text, vector) in want.items():
        assert got[record_id][0] == text
        np.testing.assert_array_equal(got[record_id][1], vector)
