"""Issue 57, must-hold 6: SIGTERM to `clef-pipelines ui` stops every process it started (the
`dg dev` process, the webserver, the daemon, the code server) within 10 s."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.ingest.conftest import REPO, Workspace
from tests.pg import free_port

# Many processes at once: the stress lane (`make test-stress`), after the suite.
pytestmark = pytest.mark.stress


def _children() -> dict[int, list[int]]:
    """Every live process's children, from /proc (zombies left out: they have stopped)."""
    out: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z":
            continue
        out.setdefault(int(fields[1]), []).append(int(entry.name))
    return out


def _descendants(pid: int) -> set[int]:
    children, found, todo = _children(), set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pids: set[int]) -> set[int]:
    live = set()
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] != "Z":
            live.add(pid)
    return live


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
@pytest.mark.timeout(400)
def test_sigterm_to_ui_stops_every_process_it_started(workspace: Workspace) -> None:
    port = free_port()
    env = dict(os.environ)
    env.update(
        DAGSTER_HOME=str(workspace.root / "dagster"),
        DAGSTER_DG_UPDATE_CHECK_ENABLED="0",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
    )
    env.pop("CLEF_PIPELINES_CONFIG", None)
    log = (workspace.root / "dagster-dev.log").open("wb")
    ui = subprocess.Popen(
        [sys.executable, "-m", "clef_pipelines", "ui", "--port", str(port)]
        + ["--config", str(workspace.config_path)],
        env=env,
        cwd=str(workspace.root),
        stdout=subprocess.DEVNULL,
        # A file, not a pipe: the runs it starts inherit the stream, and a pipe nobody reads
        # fills up and blocks a run's next log line for good.
        stderr=log,
        start_new_session=True,  # so that the test can clean up whatever is left
    )
    started: set[int] = set()
    try:
        deadline = time.monotonic() + 240
        while True:
            assert ui.poll() is None, (workspace.root / "dagster-dev.log").read_text()[-3000:]
            started |= _descendants(ui.pid)
            names = " | ".join(_cmdline(p) for p in _alive(started))
            try:
                r = httpx.post(
                    f"http://127.0.0.1:{port}/graphql",
                    json={"query": "{ assetNodes { assetKey { path } } }"},
                    timeout=10,
                )
                ready = r.status_code == 200 and r.json()["data"]["assetNodes"]
            except (httpx.HTTPError, KeyError, TypeError, ValueError):
                ready = False
            # The webserver answers with the code location's assets, and the daemon runs.
            if ready and "dagster._daemon" in names:
                break
            assert time.monotonic() < deadline, f"the UI did not start: {names}"
            time.sleep(1)
        started |= _descendants(ui.pid)
        assert len(_alive(started)) >= 3, names  # dg dev, webserver, daemon, code server

        ui.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        ui.wait(timeout=15)
        while _alive(started) and time.monotonic() - sent < 10:
            time.sleep(0.1)
        left = {p: _cmdline(p) for p in _alive(started)}
        assert not left, f"still running 10 s after SIGTERM: {left}"
    finally:
        for pid in _alive(started | {ui.pid}):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if ui.poll() is None:
            ui.kill()
