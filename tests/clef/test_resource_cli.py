"""ClefResource in a Dagster run (usage in the materialisation metadata) and `check`."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml
from typer.testing import CliRunner

from clef_pipelines.cli.main import app
from clef_pipelines.config import load_settings
from clef_pipelines.resources.clef import ClefResource
from clef_pipelines.resources.settings import PipelineSettings
from tests.clef.fake_server import FakeServer, Reply

Q = {"relevant": {"type": "noul", "instructions": "Is `passage` about outages?"}}


def write_config(tmp_path: Path, clef: dict) -> Path:
    path = tmp_path / "clef-pipelines.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "data_dir": str(tmp_path / "data"),
                "embedder": {"kind": "hash", "dimension": 16},
                "store": {"kind": "memory"},
                "clef": clef,
            }
        )
    )
    return path


def _clef(cfg: Path) -> ClefResource:
    return ClefResource(settings=PipelineSettings(validated=load_settings(cfg)))


def test_usage_lands_in_the_metadata_of_every_asset_that_used_clef(
    fake: FakeServer, tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    cfg = write_config(
        tmp_path,
        {
            "backend": "self-hosted",
            "base_url": fake.base_url,
            "api_key_env": "FAKE_KEY",
            "backoff_base_s": 0.001,
        },
    )

    @dg.asset
    def screened(clef: ClefResource) -> dg.MaterializeResult:
        for passage in ("API down", "API down", "billing"):
            clef.ask({"passage": passage}, Q)
        return dg.MaterializeResult(metadata=clef.usage_metadata())

    @dg.asset(deps=[screened])
    def reranked(clef: ClefResource) -> dg.MaterializeResult:
        clef.ask({"passage": "latency"}, Q)
        return dg.MaterializeResult(metadata=clef.usage_metadata())

    fake.script(Reply(status=429, headers={"retry-after": "0"}))
    monkeypatch.setenv("FAKE_KEY", "test-key")
    result = dg.materialize([screened, reranked], resources={"clef": _clef(cfg)})
    assert result.success
    first = result.asset_materializations_for_node("screened")[0].metadata
    second = result.asset_materializations_for_node("reranked")[0].metadata
    assert first["clef/requests"].value == 3
    assert first["clef/cache_hits"].value == 1
    assert first["clef/retries"].value == 1
    assert first["clef/errors"].value == 0
    assert first["clef/input_tokens"].value > 0
    assert first["clef/cost_usd"].value == 0.0
    assert first["clef/backend"].value == "self-hosted (clef-flash)"
    # The run's totals so far: the second asset sees its own call on top.
    assert second["clef/requests"].value == 4
    assert second["clef/input_tokens"].value > first["clef/input_tokens"].value
    assert fake.calls == 4  # 3 sent (one retried), 1 cached


def test_off_lets_assets_fall_back(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, {"backend": "off"})

    @dg.asset
    def screened(clef: ClefResource) -> dg.MaterializeResult:
        degraded = not clef.enabled
        return dg.MaterializeResult(metadata={"degraded": degraded, **clef.usage_metadata()})

    result = dg.materialize([screened], resources={"clef": _clef(cfg)})
    meta = result.asset_materializations_for_node("screened")[0].metadata
    assert meta["degraded"].value is True
    assert meta["clef/requests"].value == 0


def test_check_reports_each_part_with_latency(
    fake: FakeServer, tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FAKE_KEY", "test-key")
    cfg = write_config(
        tmp_path, {"backend": "self-hosted", "base_url": fake.base_url, "api_key_env": "FAKE_KEY"}
    )
    result = CliRunner().invoke(app, ["check", "-c", str(cfg)], terminal_width=200)
    assert result.exit_code == 0, result.output
    lines = {ln.split("│")[1].strip(): ln for ln in result.output.splitlines() if ln.count("│") > 3}
    for part in ("clef", "embedding", "store"):
        assert " ok " in lines[part] and " ms " in lines[part], result.output
    assert fake.calls == 1


def test_check_says_what_is_not_configured_and_fails_on_errors(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, {"backend": "auto"})
    result = CliRunner().invoke(app, ["check", "-c", str(cfg)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "not configured" in result.output and "CLOUDFLARE_API_TOKEN" in result.output

    cfg = write_config(
        tmp_path, {"backend": "self-hosted", "base_url": "http://127.0.0.1:9", "max_retries": 0}
    )
    result = CliRunner().invoke(app, ["check", "-c", str(cfg)], terminal_width=200)
    assert result.exit_code == 1
    assert "failed" in result.output
