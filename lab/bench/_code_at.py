"""Another commit's `clef_pipelines`, for benchmarks that compare code side by side
(`--compare REV,.`): each revision is extracted with `git archive` into a folder that a child
process puts first on its import path (`--code DIR`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def code_at(rev: str, folder: Path) -> Path:
    """The folder to import `clef_pipelines` from for `rev` (``.``: the working tree)."""
    if rev == ".":
        return REPO
    code = folder / rev
    code.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "clef_pipelines"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(code)], input=archive, check=True)
    return code
