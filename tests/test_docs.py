"""The docs can be trusted: the settings reference is generated, the README's Layout matches the
folders, and every relative link resolves. All cheap: no store, no model, no network."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from clef_pipelines import config_doc

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "clef_pipelines"


def test_configuration_doc_is_generated_from_the_settings():
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == config_doc.markdown(), (
        "docs/configuration.md differs from the settings; regenerate it from the repository "
        f"root with: {config_doc.MARKDOWN_COMMAND}"
    )
