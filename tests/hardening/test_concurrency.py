"""Issue 7: two ingests at once, in real second processes: they wait for each other (saying
so) or, past the configured wait, fail in one line with nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clef_pipelines.ingest.locks import lock_path
from tests.ingest.conftest import make_workspace

REPO = Path(__file__).resolve().parents[2]


def _ingest(cfg: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "DAGSTER_DG_UPDATE_CHECK_ENABLED": "0"}
    return subprocess.Popen(
        [sys.executable, "-m", "clef_pipelines", "ingest", "--json", "--config", str(cfg), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.stress  # a CLI subprocess timed by the test: the lane after the suite
def test_an_ingest_waits_for_the_collection_or_fails_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from filelock import FileLock

    ws = make_workspace(tmp_path, monkeypatch)
    data = ws.settings().data_path
    holder = FileLock(str(lock_path(data, "collection-docs")))  # another ingest, in effect
    holder.acquire()
    try:
        waiting = _ingest(ws.config_path)
        seen = ""
        deadline = time.monotonic() + 240
        while "waiting" not in seen and waiting.poll() is None and time.monotonic() < deadline:
            seen += os.read(waiting.stderr.fileno(), 4096).decode(errors="replace")  # type: ignore[union-attr]
        assert "another ingest is writing to collection 'docs'" in seen, seen
        assert waiting.poll() is None  # still waiting, and nothing written meanwhile
        assert ws.records() == []
    finally:
        holder.release()
    out, err = waiting.communicate(timeout=300)
    assert waiting.returncode == 0, err[-2000:]
    assert json.loads(out)[0]["success"] and ws.records()

    # Past the configured wait: one line, a failed run, nothing written. (flock locks are per
    # open file, so this process's own run waits on `holder` like another process would.)
    ws.write_config(ingest_lock_timeout_s=1)
    (ws.corpus / "new.md").write_text("# New\n\nA document the busy run must not write.\n")
    holder.acquire()
    try:
        (report,) = ws.ingest()
    finally:
        holder.release()
    assert not report.success and report.error and "busy" in report.error
    assert "\n" not in report.error
    assert "new.md" not in {r["doc_id"] for r in ws.records()}


@pytest.mark.stress  # a CLI subprocess timed by the test: the lane after the suite
def test_two_first_ingests_into_one_collection_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace(tmp_path, monkeypatch)  # a fresh data folder and Dagster home
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.md").write_text("# Notes\n\nThe second source's only document.\n")
    first = _ingest(ws.config_path, str(ws.corpus), "--collection", "shared")
    second = _ingest(ws.config_path, str(other), "--collection", "shared")
    results = [p.communicate(timeout=400) for p in (first, second)]
    for proc, (out, err) in zip((first, second), results, strict=True):
        assert proc.returncode == 0, err[-3000:]
        assert json.loads(out)[0]["success"], out
    sources = {r["source"] for r in ws.records("shared")}
    assert sources == {"sample", "other"}  # the corpus path is the configured source
