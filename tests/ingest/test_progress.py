"""Progress on every long stage: drawn live on a terminal (a real pseudo-terminal around the
real CLI), written to the Dagster run log, and ending with each stage's right totals."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import threading
import time

import dagster as dg

from clef_pipelines.ingest import progress
from tests.ingest.conftest import REPO, Ingested, Workspace

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_FRAME = re.compile(r"\b(list|parse|screen|chunk|embed|sync)\s+[━╸╺ ]*\s*(\d+)/(\d+)")


def _ingest_under_a_terminal(ws: Workspace) -> str:
    """`clef-pipelines ingest` in a child process whose stdin, stdout and stderr are a pty."""
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "120", "TERM": "xterm"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "clef_pipelines", "ingest", "-c", str(ws.config_path)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=ws.root,
    )
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                out += data
            elif proc.poll() is not None:
                break
        assert proc.wait(timeout=30) == 0, bytes(out).decode(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return _ANSI.sub("", bytes(out).decode("utf-8", errors="replace"))


def test_ingest_under_a_terminal_draws_every_stage_live_with_right_totals(
    workspace: Workspace,
) -> None:
    shown = _ingest_under_a_terminal(workspace)
    frames = _FRAME.findall(shown)
    last = {stage: (int(done), int(total)) for stage, done, total in frames}
    chunks = int(re.search(r"^chunks\s+(\d+)", shown, re.M).group(1))  # type: ignore[union-attr]
    blocks = last["screen"][1]
    assert blocks > 0 and chunks > 0
    # Totals right at the end (the run parsed 5 documents of the sample corpus in one batch).
    assert last == {
        "list": (5, 5),
        "parse": (5, 5),
        "screen": (blocks, blocks),
        "chunk": (blocks, blocks),
        "embed": (chunks, chunks),
        "sync": (1, 1),
    }
    # Drawn while the run worked, not replayed at its end: the screen's bar was on the
    # terminal before a block was judged. (Drawn on the stderr that Dagster captures during
    # a step, no frame of a running stage reached the terminal.)
    assert ("screen", "0", str(blocks)) in frames


def test_the_run_log_says_each_stages_totals(ingested: Ingested) -> None:
    report = ingested.report  # the copy's Dagster instance holds the run
    assert report.success
    logs = dg.DagsterInstance.get().all_logs(report.run_id)
    lines = [e.user_message for e in logs if e.user_message]
    for stage, unit in [("parse", "documents"), ("screen", "blocks"), ("chunk", "blocks")]:
        assert any(re.match(rf"{stage}: (\d+)/\1 {unit}", line) for line in lines), stage
    assert any(re.match(r"embed: (\d+)/\1 chunks", line) for line in lines)
    assert any(line.startswith("sync: 1/1 batches") for line in lines)
    # The index step too (issue 57): the collection's rows, logged while the build runs.
    assert any(re.match(r"index: (\d+)/\1 rows", line) for line in lines), lines


def test_a_running_stage_is_logged_on_a_heartbeat_then_with_its_totals() -> None:
    lines: list[str] = []
    seen = threading.Event()

    def log(line: str) -> None:
        lines.append(line)
        if "40/100" in line:
            seen.set()

    with progress.logged(log, every_s=0.05):
        progress.report("screen", 40, 100)
        # The heartbeat writes a moving stage without any further report.
        assert seen.wait(10), lines
        progress.report("screen", 100, 100)
    assert lines[0].startswith("screen: 40/100 blocks (") and "left" in lines[0]
    assert lines[-1].startswith("screen: 100/100 blocks (") and "done in" in lines[-1]
    assert sum("100/100" in line for line in lines) == 1  # the totals once
