"""Issue 7, item 7, through a real Dagster run: a Clef URL with a password and an API key that
the server echoes back in its error bodies appear in no output, no log line and no stored file
(the Dagster event log, the run's Parquet intermediates and the caches included)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from clef_pipelines.cli.main import app
from clef_pipelines.testing.fake_systemone import FakeServer, Reply

PASSWORD = "PASSWORD-7f3a91"
API_KEY = "key-5b2c77e0d1a4"


@pytest.mark.timeout(300)
def test_an_ingest_whose_clef_calls_fail_leaks_no_secret_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text(
        "# Upload limits\n\nThe client uploads in the background at a capped rate.\n\n"
        "Set the cap in the preferences window under Network.\n",
        encoding="utf-8",
    )
    cfg = tmp_path / "clef-pipelines.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "data_dir": str(tmp_path / "data"),
                "sources": [{"name": "docs", "path": str(docs)}],
                "embedder": {"kind": "hash", "dimension": 16},
                "clef": {
                    "backend": "self-hosted",
                    "max_retries": 1,
                    "backoff_base_s": 0,
                    "backoff_max_s": 0,
                },
            }
        )
    )
    # Every reply is a 500 whose body echoes the credentials, as a careless proxy would.
    echo = json.dumps(
        {"error": {"message": f"upstream said: authorization: Bearer {API_KEY} for {PASSWORD}"}}
    ).encode()
    with FakeServer() as fake:  # no auth check: every request reaches the scripted 500
        fake.script(*[Reply(status=500, raw=echo) for _ in range(200)])
        monkeypatch.setenv("CLEF_BASE_URL", f"http://user:{PASSWORD}@127.0.0.1:{fake.port}")
        monkeypatch.setenv("CLEF_API_KEY", API_KEY)
        result = CliRunner().invoke(app, ["ingest", "-c", str(cfg)], terminal_width=200)
        asked = fake.calls

    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    # The failures were reported (not skipped in silence) ...
    assert asked > 0
    assert "500" in result.output, result.output
    # ... and nothing anywhere carries a credential.
    for secret in (PASSWORD, API_KEY):
        assert secret not in result.output
        leaked = [
            str(p)
            for p in (tmp_path / "data").rglob("*")
            if p.is_file() and secret.encode() in p.read_bytes()
        ]
        assert not leaked, (secret, leaked)
    assert any((tmp_path / "data").rglob("*.db")) or any((tmp_path / "data").rglob("*.sqlite*"))
