"""A real webserver and daemon (`dagster dev` on a workspace.yaml) for one test workspace, and
a GraphQL client for it: what the UI does, done through the same API."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from clef_pipelines.jobs.launch import ensure_dagster_home
from tests.ingest.conftest import REPO, Workspace
from tests.pg import free_port

LOCATION = "clef_pipelines"
REPOSITORY = "__repository__"


def gql(port: int, query: str, **variables: Any) -> dict[str, Any]:
    r = httpx.post(
        f"http://127.0.0.1:{port}/graphql",
        json={"query": query, "variables": variables},
        timeout=60,
    )
    assert r.status_code == 200, r.text[-2000:]
    body = r.json()
    assert not body.get("errors"), body["errors"]
    return body["data"]


@contextmanager
def dagster_dev(workspace: Workspace, *, write_instance: bool = True) -> Iterator[int]:
    """Start `dagster dev` (webserver and daemon) on the workspace's config and Dagster home;
    yields the port once the code location answers. `write_instance`: write the instance's
    dagster.yaml as the CLI does (`ensure_dagster_home`) first."""
    if write_instance:
        ensure_dagster_home(workspace.settings())
    ws_file = workspace.root / "workspace.yaml"
    ws_file.write_text(
        "load_from:\n  - python_module:\n      module_name: clef_pipelines.definitions\n"
        f"      location_name: {LOCATION}\n      working_directory: {REPO}\n"
    )
    port = free_port()
    env = dict(os.environ)
    env.update(
        DAGSTER_HOME=str(workspace.root / "dagster"),
        CLEF_PIPELINES_CONFIG=str(workspace.config_path),
        DAGSTER_DG_UPDATE_CHECK_ENABLED="0",
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
    )
    log = (workspace.root / "dagster-dev.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagster", "dev", "-w", str(ws_file), "-h", "127.0.0.1"]
        + ["-p", str(port)],
        env=env,
        cwd=str(workspace.root),
        stdout=subprocess.DEVNULL,
        # A file, not a pipe: the runs it starts inherit the stream, and a pipe nobody reads
        # fills up and blocks a run's next log line for good.
        stderr=log,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (workspace.root / "dagster-dev.log").read_text()[-3000:]
            try:
                if gql(port, "{ assetNodes { id } }")["assetNodes"]:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "webserver did not answer"
            time.sleep(1)
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
