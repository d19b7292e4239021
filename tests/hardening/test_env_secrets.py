"""Every `*_env` setting's value is registered with the redactor when it is read: providers on
loopback that echo the key in their 401 body and in a header get it printed by no command
(`ask`, `check`, `ingest`), in no log line and in no stored file (the Dagster event log)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from typer.testing import CliRunner

from clef_pipelines.cli.main import app
from tests.clef.conftest import ServedApp
from tests.retrieval.conftest import PASSAGES, QUERY, Collection, settings_for

ASK_KEY = "sk-ask-9Qm2VxLp4Tn8WkZr"
EMBED_KEY = "sk-emb-3Hc7PjYw1Ud5NbXe"


class EchoingProvider:
    """An OpenAI-compatible provider that refuses every key the way OpenAI does: a 401 whose
    body names the key it was given, plus a header that echoes it (a careless proxy)."""

    def __init__(self) -> None:
        self.calls = 0
        paths = ("/v1/chat/completions", "/v1/embeddings")
        self._served = ServedApp(
            Starlette(routes=[Route(p, self._refuse, methods=["POST"]) for p in paths])
        )

    async def _refuse(self, request: Request) -> JSONResponse:
        self.calls += 1
        key = request.headers.get("authorization", "").removeprefix("Bearer ")
        body = {"error": {"message": f"Incorrect API key provided: {key}", "code": 401}}
        return JSONResponse(body, 401, {"x-echoed-key": key})

    def __enter__(self) -> EchoingProvider:
        self._served.__enter__()
        self.base_url = f"{self._served.base_url}/v1"
        return self

    def __exit__(self, *exc: object) -> None:
        self._served.__exit__(*exc)


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[EchoingProvider]:
    monkeypatch.setenv("ASK_PROVIDER_KEY", ASK_KEY)
    monkeypatch.setenv("EMBED_PROVIDER_KEY", EMBED_KEY)
    with EchoingProvider() as server:
        yield server


def _assert_clean(*texts: str) -> None:
    for text in texts:
        assert ASK_KEY not in text and EMBED_KEY not in text


def test_ask_masks_the_answer_providers_key(
    provider: EchoingProvider, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    col = Collection(settings_for(tmp_path, None), "asked", PASSAGES)
    s = col.settings
    raw = {
        "data_dir": s.data_dir,
        "collection": col.name,
        "embedder": {"kind": "hash", "dimension": 64},
        "store": {"kind": "memory"},
        "clef": {"backend": "off"},
        "retrieval": {
            "answer": {
                "provider": "openai",
                "model": "gpt-test",
                "base_url": provider.base_url,
                "api_key_env": "ASK_PROVIDER_KEY",
                "max_retries": 0,
            }
        },
    }
    cfg = tmp_path / "ask.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    caplog.set_level(logging.DEBUG)
    out = CliRunner().invoke(app, ["ask", QUERY, "-c", str(cfg)])
    assert provider.calls >= 1
    # The provider's reason is shown, its echo of the key is not.
    assert "Incorrect API key provided: ***" in out.output, out.output
    _assert_clean(out.output, caplog.text)


def _embedder_config(tmp_path: Path, provider: EchoingProvider) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Limits\n\nThe client uploads at a capped rate.\n")
    cfg = tmp_path / "clef-pipelines.yaml"
    raw = {
        "data_dir": str(tmp_path / "data"),
        "sources": [{"name": "docs", "path": "docs"}],
        "embedder": {
            "kind": "openai",
            "base_url": provider.base_url,
            "model": "embed-test",
            "dimension": 8,
            "api_key_env": "EMBED_PROVIDER_KEY",
        },
        "clef": {"backend": "off"},
        "steering": {"guard": {"mode": "off"}},
    }
    cfg.write_text(yaml.safe_dump(raw))
    return cfg


def test_check_masks_the_embedders_key(
    provider: EchoingProvider, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = _embedder_config(tmp_path, provider)
    caplog.set_level(logging.DEBUG)
    out = CliRunner().invoke(app, ["check", "-c", str(cfg)], terminal_width=400)
    assert out.exit_code == 1
    shown = " ".join(out.output.replace("│", " ").split())  # the table wraps its cells
    assert "HTTP 401" in shown and "Incorrect API key provided: ***" in shown, out.output
    _assert_clean(out.output, caplog.text)


@pytest.mark.timeout(120)
def test_ingest_masks_the_embedders_key_in_output_and_the_event_log(
    provider: EchoingProvider,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cfg = _embedder_config(tmp_path, provider)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "data" / "dagster"))
    caplog.set_level(logging.INFO)
    out = CliRunner().invoke(app, ["ingest", "-c", str(cfg)], terminal_width=400)
    assert out.exit_code != 0 and provider.calls >= 1
    assert "Incorrect API key provided: ***" in out.output, out.output
    _assert_clean(out.output, caplog.text)
    # Nothing stored carries it: the Dagster event log (sqlite), run intermediates, caches.
    leaked = [
        str(p)
        for p in (tmp_path / "data").rglob("*")
        if p.is_file() and (EMBED_KEY.encode() in p.read_bytes())
    ]
    assert not leaked
    assert any((tmp_path / "data").rglob("*.db"))


def test_every_env_setting_is_read_through_the_one_helper() -> None:
    """A new `*_env` setting read with `os.environ.get(config.x_env)` would skip the redactor:
    only `redact.secret_from_env` reads them."""
    import re

    import clef_pipelines

    root = Path(clef_pipelines.__file__).parent
    pattern = re.compile(r"(?:environ|env)\.get\([^)]*_env\b[^)]*\)")
    offenders = [
        f"{p.relative_to(root)}: {line.strip()}"
        for p in root.rglob("*.py")
        if p.name != "redact.py"
        for line in p.read_text(encoding="utf-8").splitlines()
        if pattern.search(line)
    ]
    assert not offenders
