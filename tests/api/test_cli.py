"""`clef-pipelines api` as a user starts it: a real process on loopback, refusing to serve
off loopback without a key."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

from tests.pg import free_port

CLI = [sys.executable, "-m", "clef_pipelines"]


def write_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "clef-pipelines.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "data_dir": str(tmp_path / "data"),
                "embedder": {"kind": "hash", "dimension": 64},
                "store": {"kind": "lancedb"},
                "clef": {"backend": "off"},
            }
        )
    )
    return cfg


def env() -> dict[str, str]:
    e = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    e.pop("CLEF_API_KEY", None)
    return e


def test_refuses_a_public_bind_without_a_key(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    res = subprocess.run(
        [*CLI, "api", "--config", str(cfg), "--host", "0.0.0.0"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2
    assert "CLEF_API_KEY" in res.stderr and "loopback" in res.stderr


def test_serves_on_loopback_with_a_key(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    port = free_port()
    proc = subprocess.Popen(
        [*CLI, "api", "--config", str(cfg), "--port", str(port)],
        env={**env(), "CLEF_API_KEY": "k-123"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the API did not start"
            time.sleep(0.2)
        r = httpx.post(f"{base}/v1/retrieve", json={"query": "x"})
        assert r.status_code == 401
        r = httpx.post(
            f"{base}/v1/retrieve", json={"query": "x"}, headers={"authorization": "Bearer k-123"}
        )
        # No collection was ingested: a clear 404 naming the field, not a crash.
        assert r.status_code == 404 and r.json()["error"]["field"] == "collection"
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert "k-123" not in out + err
