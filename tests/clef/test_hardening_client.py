"""Issue 7: a server asking to wait an hour, and secrets that must never be printed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from clef_pipelines.clef.errors import ClefBadRequest, ClefRetriesExhausted
from clef_pipelines.cli.main import app
from tests.clef.fake_server import FakeServer, Reply
from tests.clef.test_client import Q, Sleeps, self_hosted


def _config(tmp_path: Path, clef: dict) -> Path:
    path = tmp_path / "clef-pipelines.yaml"
    raw = {
        "data_dir": str(tmp_path / "data"),
        "embedder": {"kind": "hash", "dimension": 16},
        "store": {"kind": "memory"},
        "clef": clef,
    }
    path.write_text(yaml.safe_dump(raw))
    return path


def test_retry_after_past_the_cap_gives_up_at_once(fake: FakeServer, tmp_path: Path) -> None:
    sleeps = Sleeps()
    fake.script(Reply(status=429, headers={"retry-after": "3600"}))
    with (
        self_hosted(fake, tmp_path, sleeps=sleeps, max_retry_after_s=60) as c,
        pytest.raises(ClefRetriesExhausted) as info,
    ):
        c.ask("s", Q)
    assert sleeps == []  # no waiting at all for a server that asks for an hour
    assert fake.calls == 1
    message = str(info.value)
    assert "3600" in message and "max_retry_after_s" in message and "60" in message


def test_a_retry_after_within_the_cap_is_waited_out_and_said(
    fake: FakeServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sleeps = Sleeps()
    fake.script(Reply(status=429, headers={"retry-after": "2"}))
    with (
        caplog.at_level(logging.WARNING, logger="clef_pipelines.clef"),
        self_hosted(fake, tmp_path, sleeps=sleeps) as c,
    ):
        c.ask("s", Q)
    assert sleeps == [2.0]
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "waiting 2.0 s" in said and "retry-after" in said and "429" in said


@pytest.mark.timeout(120)
def test_check_neither_hangs_nor_prints_the_url_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # the table's detail column on one line
    with FakeServer() as fake:  # no key: the URL's userinfo is the only credential
        monkeypatch.setenv("CLEF_BASE_URL", f"http://user:PASSWORD123@127.0.0.1:{fake.port}")
        fake.script(Reply(status=429, headers={"retry-after": "3600"}))
        cfg = _config(tmp_path, {"backend": "auto"})
        result = CliRunner().invoke(app, ["check", "-c", str(cfg)])
    assert result.exit_code == 1, result.output
    assert "3600" in result.output and "max_retry_after_s" in result.output, result.output
    assert "PASSWORD123" not in result.output

    # A refused connection names the URL in its error: without the password.
    monkeypatch.setenv("CLEF_BASE_URL", "http://user:PASSWORD123@127.0.0.1:9")
    cfg = _config(tmp_path, {"backend": "auto", "max_retries": 0})
    result = CliRunner().invoke(app, ["check", "-c", str(cfg)], terminal_width=300)
    assert result.exit_code == 1 and "failed" in result.output
    assert "PASSWORD123" not in result.output and "127.0.0.1:9" in result.output


def test_an_echoed_authorization_header_is_redacted(
    fake: FakeServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    echo = {
        "error": {
            "message": "refused; you sent authorization: Bearer test-key and "
            "x-api-key=another-secret-value, proxy Bearer zz-unknown-token-9"
        }
    }
    fake.script(Reply(status=400, raw=json.dumps(echo).encode()))
    with (
        caplog.at_level(logging.DEBUG),
        self_hosted(fake, tmp_path) as c,
        pytest.raises(ClefBadRequest) as info,
    ):
        c.ask("s", Q)
    message = str(info.value)
    assert "refused" in message
    for secret in ("test-key", "another-secret-value", "zz-unknown-token-9"):
        assert secret not in message
        assert all(secret not in r.getMessage() for r in caplog.records)
