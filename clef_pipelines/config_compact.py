"""The settings a cold `compact` reads, without pydantic: `clef`, `retrieval` and
`steering.guard` as `config_light` sections, without the whole-file model or the rest of
`steering` (screen, enrich, checks and their taxonomies, which `compact` never reads).

`load_compact_sections` reads the file `config.load_settings` would read. When the file holds
only what `quick_sections` checks exactly as `config_sections.CompactSettings` would
(top-level keys of `Settings`, `steering` with only `guard`, values of the fields' own types
within their bounds), the sections are read by `config_light.light_section`; anything else,
and every invalid file, goes to `load_compact_settings` (pydantic), which either gives the
same values or refuses the file with `load_settings`' own error lines.
`tests/test_config_compact.py` feeds good and bad files to both and compares.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clef_pipelines.config_file import PathsMixin, find_config_file, read_config_file
from clef_pipelines.config_light import DEFAULT_DATA_DIR, DEFAULT_PRIVATE_FILES, NOT_READ, READ

if TYPE_CHECKING:
    from clef_pipelines.clef.config import ClefConfig
    from clef_pipelines.config_light import Section
    from clef_pipelines.config_sections import CompactSettings
    from clef_pipelines.guard.config import GuardConfig
    from clef_pipelines.retrieval.config import RetrievalConfig


@dataclass
class CompactSections(PathsMixin):
    """What `compact` reads of `Settings`: the same names, values and paths."""

    data_dir: str
    local_dir: str | None
    private_files: bool
    base_dir: str
    # Sections (`config_light`) on the quick path, the models where the models decided.
    clef: ClefConfig | Section
    retrieval: RetrievalConfig | Section
    guard: GuardConfig | Section

    @classmethod
    def of(cls, settings: CompactSettings) -> CompactSections:
        return cls(
            data_dir=settings.data_dir,
            local_dir=settings.local_dir,
            private_files=settings.private_files,
            base_dir=settings.base_dir,
            clef=settings.clef,
            retrieval=settings.retrieval,
            guard=settings.steering.guard,
        )


def _section(raw: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = raw.get(key, {})
    return value if isinstance(value, dict) else None


def quick_sections(raw: dict[str, Any], base_dir: str) -> CompactSections | None:
    """The sections of `raw` (a config file's mapping), read without pydantic
    (`config_light`), when every value compact reads is plainly valid; else None (the whole
    model then decides, and names any error)."""
    from clef_pipelines.config_light import light_section

    if not all(isinstance(k, str) and (k in READ or k in NOT_READ) for k in raw):
        return None
    data_dir, local_dir = raw.get("data_dir", DEFAULT_DATA_DIR), raw.get("local_dir")
    private_files = raw.get("private_files", DEFAULT_PRIVATE_FILES)
    if not (
        type(data_dir) is str
        and (local_dir is None or type(local_dir) is str)
        and type(private_files) is bool
    ):
        return None  # pydantic's lax mode may coerce (or refuse) it: the model decides
    steering = _section(raw, "steering")
    if steering is None or steering.keys() - {"guard"}:
        return None
    clef = light_section("ClefConfig", raw.get("clef", {}))
    retrieval = light_section("RetrievalConfig", raw.get("retrieval", {}))
    guard = light_section("GuardConfig", steering.get("guard", {}))
    if clef is None or retrieval is None or guard is None:
        return None
    return CompactSections(
        data_dir=data_dir,
        local_dir=local_dir,
        private_files=private_files,
        base_dir=base_dir,
        clef=clef,
        retrieval=retrieval,
        guard=guard,
    )


def load_compact_sections(path: str | os.PathLike[str] | None = None) -> CompactSections:
    """`config_sections.load_compact_settings`'s values, or its error (see the docstring)."""
    cfg_path = find_config_file(path)
    if cfg_path is None:
        quick = quick_sections({}, str(Path.cwd()))
    elif cfg_path.exists():
        quick = quick_sections(read_config_file(cfg_path), str(cfg_path.resolve().parent))
    else:
        quick = None
    if quick is not None:
        return quick
    from clef_pipelines.config_sections import load_compact_settings

    return CompactSections.of(load_compact_settings(path))
