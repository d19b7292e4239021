"""The wheel holds what runs in the product, and nothing of the lab that built it.

Built from a clean copy of the tracked files (a stale ``build/`` beside the sources would
otherwise leak old modules into the wheel), without build isolation: setuptools comes from
the test environment, so no index is asked."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: What must never ship: training, data preparation, tuning, provenance manifests, the
#: weights' history, lab notes, benchmarks and tests.
FORBIDDEN = re.compile(
    r"(^|/)(guard_)?(train|tune|data)\.py$|provenance|_(pkgdocs|manpages|helpdocs)\.json$"
    r"|WEIGHTS_HISTORY|GUARD_WEIGHTS|NOTEBOOK|^(lab|bench|tests)/"
)


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    src = tmp_path_factory.mktemp("src")
    for name in filter(None, tracked.split("\0")):
        path = REPO / name
        if path.is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("clef_pipelines-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def test_the_wheel_ships_the_guard_with_its_weights_and_model_card(wheel_names: list[str]) -> None:
    for name in ("guard/model.py", "guard/weights.npz", "guard/MODEL_CARD.md", "cli/main.py"):
        assert f"clef_pipelines/{name}" in wheel_names


def test_the_wheel_holds_no_training_code_provenance_or_history(wheel_names: list[str]) -> None:
    leaked = [n for n in wheel_names if FORBIDDEN.search(n)]
    assert leaked == [], f"lab material inside the wheel: {leaked}"
    top = {n.split("/")[0] for n in wheel_names}
    assert top <= {"clef_pipelines", "clef_pipelines-0.1.0.dist-info"}, top


def test_the_forbidden_pattern_catches_what_the_lab_holds() -> None:
    for name in (
        "clef_pipelines/steering/guard_train.py",
        "clef_pipelines/guard/train.py",
        "clef_pipelines/steering/guard_data.py",
        "clef_pipelines/steering/GUARD_WEIGHTS.md",
        "clef_pipelines/steering/guard_pkgdocs.json",
        "lab/guard/tune.py",
    ):
        assert FORBIDDEN.search(name), name
    assert not FORBIDDEN.search("clef_pipelines/guard/model.py")
    assert not FORBIDDEN.search("clef_pipelines/evals/datasets.py")
