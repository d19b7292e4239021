"""A run whose sync fails after writing reports what it wrote, not 0 records.

Real parts: the pipeline run in-process into LanceDB; the failure is the sync's own test-only
fault injection (an ENOSPC, as a full disk raises it) after three write batches.
"""

from __future__ import annotations

import pytest

from clef_pipelines.ingest.sync import FAIL_AFTER_UPSERTS_ENV
from tests.ingest.conftest import Workspace


def test_a_failed_sync_reports_what_it_wrote(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace.write_config(sync_batch_rows=4)
    monkeypatch.setenv(FAIL_AFTER_UPSERTS_ENV, "3")
    (report,) = workspace.ingest()
    assert not report.success and "No space left on device" in (report.error or "")
    assert len(workspace.records()) == 12  # three batches of four, then the disk was full
    # The summary `ingest` prints, and its --json, say what was written.
    s = report.summary
    assert (s.upserted, s.store_records, s.collection_records) == (12, 12, 12), s
    assert report.as_dict()["failed_steps"]["store_sync"]["upserted"] == 12
