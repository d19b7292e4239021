"""`config_compact.load_compact_sections` against `config_sections.load_compact_settings`:
the same values from every file, or the same error lines, and without the models compaction
does not read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from clef_pipelines.config_compact import (
    CompactSections,
    load_compact_sections,
    quick_sections,
)
from clef_pipelines.config_file import ConfigError, read_config_file
from clef_pipelines.config_sections import CompactSettings, load_compact_settings
from tests.test_config_light import same

BENCH_LIKE = json.dumps(
    {
        "data_dir": "state",
        "clef": {"backend": "self-hosted", "base_url": "http://127.0.0.1:9", "cache": False},
    }
)
FULL = """\
data_dir: state
collection: docs
private_files: false
sources: [{name: a, path: docs}]
store: {kind: lancedb}
clef: {backend: self-hosted, base_url: "http://127.0.0.1:9", cache: false, max_retries: 2}
retrieval: {top_k: 7, compact: {token_budget: 900}, gate: {mode: off}}
steering: {guard: {mode: off, threshold: 0.7}}
api: {port: 8123}
"""
#: Files the quick path takes itself.
QUICK = [
    BENCH_LIKE,
    FULL,
    "",
    "{}",
    "data_dir: s3://bucket/prefix\nlocal_dir: cache\n",
    "store: {kind: nope}\nclef: {backend: 'off'}\n",
    "steering: {}\nretrieval: {}\nclef: {}\n",
    "retrieval: {compact: {token_budget: 10, preview_chars: 512}, select: {max_passages: 3}}\n",
]
#: Files the whole model decides: valid ones (the same values) and invalid ones (its errors,
#: every case of tests/test_config_sections.py among them).
FALLBACK = [
    "steering: {screen: {mode: off}, guard: {mode: shadow}}\n",
    "private_files: 'yes'\n",
    "private_files: 1\n",
    "retreival: {top_k: 3}\n",
    "clef: {backend: nope, cach: false}\n",
    "retrieval: {top_k: 0, compact: {token_budgett: 5}}\n",
    "steering: {guard: {mode: sometimes}}\n",
    "steering: {guard: null}\n",
    "steering: {screen: {mode: sometimes}}\n",
    "steering: [guard]\n",
    "base_dir: /tmp\n",
    "- a list\n",
    "clef: [unclosed\n",
    "clef: null\n",
    "private_files: maybe\n",
    "data_dir: 5\n",
    "local_dir: [a]\n",
    '{"clef": {"max_concurrency": 0}}',
]


def load_both(cfg: Path | None) -> tuple[object, object]:
    results = []
    for load in (load_compact_sections, load_compact_settings):
        try:
            results.append(load(cfg))
        except ConfigError as exc:
            results.append(str(exc))
    return results[0], results[1]


def assert_same(ours: object, theirs: object) -> None:
    if isinstance(theirs, str):
        assert ours == theirs  # the same error lines
        return
    assert isinstance(ours, CompactSections) and isinstance(theirs, CompactSettings)
    for name in ("data_dir", "local_dir", "private_files", "base_dir"):
        assert getattr(ours, name) == getattr(theirs, name), name
    for name in ("clef", "retrieval"):
        assert same(getattr(ours, name).model_dump(), getattr(theirs, name).model_dump()), name
    assert same(ours.guard.model_dump(), theirs.steering.guard.model_dump())
    assert ours.data_path == theirs.data_path and ours.data_url == theirs.data_url


@pytest.mark.parametrize("text", QUICK + FALLBACK)
def test_every_file_gives_the_values_or_the_error_of_the_whole_model(
    tmp_path: Path, text: str
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(text)
    ours, theirs = load_both(cfg)
    assert_same(ours, theirs)
    if text in QUICK:
        quick = quick_sections(read_config_file(cfg), str(tmp_path))
        assert quick is not None and not isinstance(theirs, str)
    elif not isinstance(theirs, str) or "config file" not in theirs:
        assert quick_sections(read_config_file(cfg), str(tmp_path)) is None


def test_no_file_and_a_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLEF_PIPELINES_CONFIG", raising=False)
    ours, theirs = load_both(None)
    assert_same(ours, theirs)
    assert isinstance(ours, CompactSections) and ours.base_dir == str(tmp_path)
    ours, theirs = load_both(tmp_path / "none.yaml")
    assert isinstance(theirs, str) and "config file not found" in theirs
    assert_same(ours, theirs)


def test_the_quick_path_imports_neither_yaml_nor_pydantic(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(BENCH_LIKE)
    probe = (
        "import sys\n"
        "from clef_pipelines.config_compact import load_compact_sections\n"
        f"s = load_compact_sections({str(cfg)!r})\n"
        "print(s.clef.backend, s.clef.cache, s.data_path.name)\n"
        "names = ('yaml', 'pydantic', 'clef_pipelines.config_sections')\n"
        "print(*[n for n in names if n in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["self-hosted False state", ""]
