"""Issue 7: config that used to be accepted and fail late is refused when it loads, with one
line naming the field; runs in which every document failed exit non-zero; `delete --all` asks."""

from __future__ import annotations

import os
import stat
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel
from typer.testing import CliRunner

from clef_pipelines.cli.main import app
from clef_pipelines.config import ConfigError, Settings, load_settings
from tests.ingest.conftest import make_workspace

runner = CliRunner()


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"embedder": {"kind": "hash", "dimension": -4}}, "embedder.dimension"),
        ({"parsing": {"max_file_bytes": -1}}, "parsing.max_file_bytes"),
        ({"parsing": {"encodings": []}}, "parsing.encodings"),
        ({"parsing": {"encodings": ["utf-8", "klingon-8"]}}, "klingon-8"),
        ({"refresh_cron": "every day at three"}, "refresh_cron"),
        ({"refresh_cron": "0 3 * * * *"}, "refresh_cron"),
        ({"collection": "bad name!"}, "collection"),
        ({"collection": "c" * 300}, "collection"),
        ({"sources": [{"name": "s", "path": "x", "collection": "a/b"}]}, "sources.0.collection"),
        ({"sources": [{"name": "../up", "path": "x"}]}, "source name '../up'"),
        (
            {"evals": {"datasets": [{"name": "sci fact", "spec": "beir:x"}]}},
            "dataset name 'sci fact'",
        ),
    ],
)
def test_bad_settings_are_refused_when_the_config_loads(
    tmp_path: Path, raw: dict, field: str
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as info:
        load_settings(cfg)
    assert field in str(info.value)
    result = runner.invoke(app, ["query", "x", "--config", str(cfg)])
    assert result.exit_code == 2 and field in result.output
    assert "Traceback" not in result.output


def test_yaml_off_is_the_off_backend(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("clef:\n  backend: off\n")
    assert load_settings(cfg).clef.backend == "off"


def _switch_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every setting (dotted path) whose choices are `on` / `off` (with or without `shadow`),
    found by walking the settings models, so a switch added later is covered too."""
    out: list[tuple[str, ...]] = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        inner = [a for a in typing.get_args(ann) if isinstance(a, type)] or [ann]
        sub = next((a for a in inner if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if sub is not None:
            out += _switch_paths(sub, (*prefix, name))
        elif typing.get_origin(ann) is typing.Literal and {"on", "off"} <= set(
            typing.get_args(ann)
        ):
            out.append((*prefix, name))
    return out


def _nested_yaml(path: tuple[str, ...], word: str) -> str:
    return "".join(f"{'  ' * i}{key}:\n" for i, key in enumerate(path[:-1])) + (
        f"{'  ' * (len(path) - 1)}{path[-1]}: {word}\n"
    )


SWITCHES = _switch_paths(Settings)


def test_every_on_off_setting_takes_unquoted_yaml_booleans(tmp_path: Path) -> None:
    """`mode: on` / `mode: off` unquoted (YAML 1.1 booleans) are the words they were written as,
    in every setting that takes them; anything else is still refused with the choices."""
    assert ("steering", "guard", "mode") in SWITCHES and len(SWITCHES) >= 8, SWITCHES
    cfg = tmp_path / "c.yaml"
    for path in SWITCHES:
        for word, expected in (("on", "on"), ("off", "off"), ("yes", "on"), ("no", "off")):
            cfg.write_text(_nested_yaml(path, word))
            value: object = load_settings(cfg)
            for key in path:
                value = getattr(value, key)
            assert value == expected, (path, word)
    cfg.write_text(_nested_yaml(("steering", "guard", "mode"), "2"))
    with pytest.raises(ConfigError, match="steering.guard.mode"):
        load_settings(cfg)
    cfg.write_text("clef:\n  backend: on\n")  # no `on` backend: still refused
    with pytest.raises(ConfigError, match="clef.backend"):
        load_settings(cfg)


def test_missing_source_and_long_collection_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace(tmp_path, monkeypatch, sources=[{"name": "gone", "path": "nowhere"}])
    result = runner.invoke(app, ["ingest", "--config", str(ws.config_path)])
    assert result.exit_code == 2
    assert "sources.gone.path" in result.output and "does not exist" in result.output
    assert len(result.output.strip().splitlines()) <= 2
    long = "c" * 300
    for args in (
        ["query", "x", "--collection", long],
        ["inspect", "--collection", long],
        ["delete", "--collection", long, "--all", "--yes"],
        ["ingest", str(ws.corpus), "--collection", long],
    ):
        out = runner.invoke(app, [*args, "--config", str(ws.config_path)])
        assert out.exit_code == 2, (args, out.output)
        assert "invalid collection name" in out.output and "Traceback" not in out.output
        assert out.exception is None or isinstance(out.exception, SystemExit)


def test_a_run_whose_every_document_failed_exits_non_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace(tmp_path, monkeypatch)
    for path in ws.corpus.iterdir():
        path.write_bytes(b"\x00\x01\x02binary" * 10)
    result = runner.invoke(app, ["ingest", "--config", str(ws.config_path)])
    assert result.exit_code == 1, result.output


def test_delete_all_needs_yes_off_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace(tmp_path, monkeypatch)
    (report,) = ws.ingest()
    assert report.success
    cfg = str(ws.config_path)
    refused = runner.invoke(app, ["delete", "--collection", "docs", "--all", "--config", cfg])
    assert refused.exit_code != 0 and "--yes" in refused.output
    assert ws.records(), "nothing may be dropped without confirmation"
    dropped = runner.invoke(
        app, ["delete", "--collection", "docs", "--all", "--yes", "--config", cfg]
    )
    assert dropped.exit_code == 0, dropped.output
    assert ws.records() == []


def test_data_files_are_private_unless_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = os.umask(0o022)  # a common default: what main wrote with (dirs 755, files 644)
    try:
        ws = make_workspace(tmp_path, monkeypatch)
        (tmp_path / "state").mkdir(mode=0o755)  # made earlier, open to all
        result = runner.invoke(app, ["ingest", "--config", str(ws.config_path)])
        assert result.exit_code == 0, result.output
        data = ws.settings().data_path
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        written = [p for p in [*data.rglob("*"), *(tmp_path / "dagster").rglob("*")]]
        assert any(p.is_file() for p in written)
        for path in written:
            assert stat.S_IMODE(path.lstat().st_mode) & 0o077 == 0, path

        os.umask(0o022)
        ws.write_config(private_files=False, data_dir=str(tmp_path / "open"))
        result = runner.invoke(app, ["ingest", "--config", str(ws.config_path)])
        assert result.exit_code == 0, result.output
        assert stat.S_IMODE((tmp_path / "open").stat().st_mode) == 0o755
    finally:
        os.umask(old)
