"""`config_sections.load_compact_settings`: the sections `compact` reads, validated by
`Settings`' own models, with `load_settings`' errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from clef_pipelines.config import ConfigError, Settings, load_settings
from clef_pipelines.config_sections import NOT_READ, CompactSettings, load_compact_settings

READ = ("data_dir", "local_dir", "clef", "retrieval", "steering", "private_files", "base_dir")


def test_the_fields_are_settings_fields() -> None:
    assert set(CompactSettings.model_fields) == set(Settings.model_fields)
    assert set(READ) | set(NOT_READ) == set(Settings.model_fields)
    for name in READ:
        ours, theirs = CompactSettings.model_fields[name], Settings.model_fields[name]
        assert ours.annotation == theirs.annotation, name
        assert ours.get_default(call_default_factory=True) == theirs.get_default(
            call_default_factory=True
        ), name


FULL = """\
data_dir: state
collection: docs
private_files: false
sources: [{name: a, path: docs}]
store: {kind: lancedb}
clef: {backend: self-hosted, base_url: "http://127.0.0.1:9", cache: false, max_retries: 2}
retrieval: {top_k: 7, compact: {token_budget: 900}, gate: {mode: off}}
steering: {guard: {mode: off}}
api: {port: 8123}
"""


def test_the_sections_read_equal_load_settings(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(FULL)
    full, ours = load_settings(cfg), load_compact_settings(cfg)
    for name in READ:
        assert getattr(ours, name) == getattr(full, name), name
    assert ours.data_path == full.data_path == (tmp_path / "state").resolve()
    assert ours.clef.max_retries == 2 and ours.steering.guard.mode == "off"


def test_no_file_means_every_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLEF_PIPELINES_CONFIG", raising=False)
    full, ours = load_settings(), load_compact_settings()
    for name in READ:
        assert getattr(ours, name) == getattr(full, name), name


@pytest.mark.parametrize(
    "text",
    [
        "retreival: {top_k: 3}\n",  # unknown top-level key, with a hint
        "clef: {backend: nope, cach: false}\n",  # two errors in one section
        "retrieval: {top_k: 0, compact: {token_budgett: 5}}\n",
        "steering: {guard: {mode: sometimes}}\n",
        "base_dir: /tmp\n",
        "- a list\n",
        "clef: [unclosed\n",
        "private_files: maybe\n",
    ],
)
def test_errors_are_load_settings_errors(tmp_path: Path, text: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as full:
        load_settings(cfg)
    with pytest.raises(ConfigError) as ours:
        load_compact_settings(cfg)
    assert str(ours.value) == str(full.value)


def test_a_missing_file_is_the_same_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as full:
        load_settings(tmp_path / "none.yaml")
    with pytest.raises(ConfigError) as ours:
        load_compact_settings(tmp_path / "none.yaml")
    assert str(ours.value) == str(full.value)


def test_sections_compact_does_not_read_are_left_to_their_commands(tmp_path: Path) -> None:
    """Documented: `compact` validates what it reads; `store` is the store commands' to check."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("store: {kind: nope}\nclef: {backend: 'off'}\n")
    with pytest.raises(ConfigError):
        load_settings(cfg)
    assert load_compact_settings(cfg).clef.backend == "off"
