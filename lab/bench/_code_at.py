"""Another commit's `clef_pipelines`, for benchmarks that compare code side by side
(`--compare REV,.`): each revision is extracted with `git archive` into a folder that a child
process puts first on its import path (`--code DIR`, through PYTHONPATH and ``python -P``:
nothing here edits the import path of a running process)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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


def code_env(code: Path | None) -> dict[str, str]:
    """This environment with `code` (then the repository) first on PYTHONPATH."""
    first = [str(Path(code).resolve())] if code else []
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join([*first, str(REPO), *rest]))


def module_cmd(module: str, *args: str) -> list[str]:
    """A child running `python -P -m module args` (``-P``: the current folder is not put first,
    so PYTHONPATH decides which `clef_pipelines` it imports). Run it with ``env=code_env(...)``."""
    return [sys.executable, "-P", "-m", module, *args]


def reexec_with_code(module: str) -> None:
    """When `--code DIR` is on the command line and this process does not import from DIR yet,
    start `module` again with DIR first on PYTHONPATH (in place of the process)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--code", type=Path)
    code = pre.parse_known_args()[0].code
    if code is None or os.environ.get("LAB_BENCH_CODE") == str(code.resolve()):
        return
    env = dict(code_env(code), LAB_BENCH_CODE=str(code.resolve()))
    cmd = module_cmd(module, *sys.argv[1:])
    os.execve(cmd[0], cmd, env)
