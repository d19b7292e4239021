"""One unchanged-source refresh launched four ways, side by side in one run.

    .venv/bin/python -m lab.bench.launch [--corpus data/corpus] [--embedder minilm|hash]

Starts `dagster dev` (webserver + daemon, loopback, telemetry off) on a temporary
DAGSTER_HOME, ingests the source once from the CLI path, then refreshes it unchanged:

- `cli`: `run_ingestion` in this process (what `clef-pipelines ingest` does);
- `job`: `ingestion_job` launched through the webserver's GraphQL API (the launchpad's path);
- `backfill`: an asset-graph backfill of the source's partition over every ingestion asset;
- `sensor`: the source's files touched (same bytes, new modification times), so the
  `source_change_sensor` requests a run on its next tick.

For each it prints the run's own duration (Dagster's start to end time) and the wall time from
the request to the run's end (queueing and the run worker's process start included; for the
sensor, from its tick's request). Everything runs in a temporary folder on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[2]
LOCATION = "clef_pipelines"
DONE = {"SUCCESS", "FAILURE", "CANCELED"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GraphQL:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/graphql"

    def __call__(self, query: str, **variables: Any) -> dict[str, Any]:
        r = httpx.post(self.url, json={"query": query, "variables": variables}, timeout=60)
        r.raise_for_status()
        body = r.json()
        if body.get("errors"):
            raise RuntimeError(body["errors"])
        return body["data"]

    def runs(self, tags: dict[str, str]) -> list[dict[str, Any]]:
        data = self(
            """query($f: RunsFilter) { runsOrError(filter: $f) { ... on Runs {
                 results { runId status startTime endTime creationTime tags { key value } } } } }""",
            f={"tags": [{"key": k, "value": v} for k, v in tags.items()]},
        )
        return data["runsOrError"]["results"]

    def wait_done(self, tags: dict[str, str], timeout: float = 600) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            runs = self.runs(tags)
            if runs and all(r["status"] in DONE for r in runs):
                return runs[0]
            time.sleep(0.5)
        raise TimeoutError(f"no finished run with tags {tags}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=REPO / "data" / "corpus")
    parser.add_argument("--embedder", default="minilm", choices=["minilm", "hash"])
    args = parser.parse_args()
    from clef_pipelines.config import load_settings
    from clef_pipelines.jobs.launch import ensure_dagster_home, run_ingestion

    with tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp:
        root = Path(tmp)
        corpus = root / "corpus"
        shutil.copytree(args.corpus, corpus)
        cfg = root / "clef-pipelines.yaml"
        cfg.write_text(
            yaml.safe_dump(
                {
                    "data_dir": str(root / "state"),
                    "sources": [{"name": "docs", "path": str(corpus)}],
                    "embedder": {"kind": args.embedder},
                }
            )
        )
        os.environ["DAGSTER_HOME"] = str(root / "dagster")
        os.environ["CLEF_PIPELINES_CONFIG"] = str(cfg)
        os.environ["DAGSTER_DG_UPDATE_CHECK_ENABLED"] = "0"
        settings = load_settings(cfg)
        ensure_dagster_home(settings)
        (first,) = run_ingestion(settings, ["docs"])
        assert first.success, first.error

        rows: list[tuple[str, float, float]] = []
        started = time.perf_counter()
        (cli,) = run_ingestion(settings, ["docs"])
        wall = time.perf_counter() - started
        assert cli.success and set(cli.assets) == {"source_documents"}, cli.assets.keys()

        port = _free_port()
        workspace = root / "workspace.yaml"
        workspace.write_text(
            "load_from:\n  - python_module:\n      module_name: clef_pipelines.definitions\n"
            f"      location_name: {LOCATION}\n      working_directory: {REPO}\n"
        )
        env = dict(os.environ, PYTHONPATH=str(REPO))
        proc = subprocess.Popen(
            [sys.executable, "-m", "dagster", "dev", "-w", str(workspace), "-h", "127.0.0.1"]
            + ["-p", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            gql = GraphQL(port)
            deadline = time.monotonic() + 300
            while True:
                try:
                    gql("{ version }")
                    break
                except (httpx.HTTPError, RuntimeError):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(1)
            cli_run = gql.runs({"clef/launched_by": "cli"})[0]
            rows.append(("cli (in-process)", cli_run["endTime"] - cli_run["startTime"], wall))

            selector = {
                "repositoryLocationName": LOCATION,
                "repositoryName": "__repository__",
                "jobName": "ingestion_job",
            }
            t0 = time.time()
            launched = gql(
                """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
                     __typename ... on LaunchRunSuccess { run { runId } }
                     ... on PythonError { message } } }""",
                p={
                    "selector": selector,
                    "runConfigData": {},
                    "executionMetadata": {
                        "tags": [
                            {"key": "dagster/partition", "value": "docs"},
                            {"key": "bench", "value": "job"},
                        ]
                    },
                },
            )["launchRun"]
            assert launched["__typename"] == "LaunchRunSuccess", launched
            run = gql.wait_done({"bench": "job"})
            rows.append(("job (launchpad)", run["endTime"] - run["startTime"], run["endTime"] - t0))

            keys = [
                {"path": n["assetKey"]["path"]}
                for n in gql("{ assetNodes { assetKey { path } groupName } }")["assetNodes"]
                if n["groupName"] == "ingestion"
            ]
            t0 = time.time()
            backfill = gql(
                """mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
                     __typename ... on LaunchBackfillSuccess { backfillId }
                     ... on PythonError { message } } }""",
                p={"partitionNames": ["docs"], "assetSelection": keys},
            )["launchPartitionBackfill"]
            assert backfill["__typename"] == "LaunchBackfillSuccess", backfill
            run = gql.wait_done({"dagster/backfill": backfill["backfillId"]})
            rows.append(
                ("backfill (asset graph)", run["endTime"] - run["startTime"], run["endTime"] - t0)
            )

            for path in corpus.rglob("*"):
                if path.is_file():
                    os.utime(path)  # same bytes, new modification times
            run = gql.wait_done({"dagster/sensor_name": "source_change_sensor"}, timeout=300)
            rows.append(
                (
                    "sensor (tick)",
                    run["endTime"] - run["startTime"],
                    run["endTime"] - run["creationTime"],
                )
            )
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    fastest = min(r[1] for r in rows)
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (2 cores, shared machine)")
    print("| launched as | run s (start to end) | x fastest | request to end s |")
    print("|---|---|---|---|")
    for name, run_s, wall_s in rows:
        print(f"| {name} | {run_s:.2f} | {run_s / fastest:.2f} | {wall_s:.2f} |")


if __name__ == "__main__":
    main()
