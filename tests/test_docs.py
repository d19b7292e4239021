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


# The README's Layout section is a Markdown list, one folder a line:
#
#     - `clef_pipelines/` what it holds        <- a top-level line: a folder of the repository
#       - `parsing/` what it holds             <- indented under `clef_pipelines/`: a subpackage,
#                                                 relative to clef_pipelines/
#     - `lab/` what it holds
#
# Only the first backticked name of a line that starts with "- " counts, and it must end in "/";
# other backticked words on the line (module names, commands) are prose. The section runs from
# "## Layout" to the next "## " heading.
LAYOUT_LINE = re.compile(r"^(?P<indent>\s*)- `(?P<path>[^`]+/)`")


def _layout() -> tuple[set[str], set[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^## Layout\n(?P<body>.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, "README.md has no '## Layout' section"
    top: set[str] = set()
    under_package: set[str] = set()
    parent = None
    for line in match["body"].splitlines():
        m = LAYOUT_LINE.match(line)
        if not m:
            continue
        path = m["path"].rstrip("/")
        if m["indent"]:
            assert parent == "clef_pipelines", (
                f"README Layout: {m['path']} is indented under {parent}/, but only "
                "clef_pipelines/ lists subfolders"
            )
            under_package.add(path)
        else:
            parent = path
            top.add(path)
    return top, under_package


def _tracked_top_level_folders() -> set[str]:
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return {f.split("/", 1)[0] for f in files if "/" in f}


def test_readme_layout_names_existing_folders():
    top, under_package = _layout()
    missing = sorted(f"{p}/" for p in top if not (ROOT / p).is_dir())
    missing += sorted(f"clef_pipelines/{p}/" for p in under_package if not (PACKAGE / p).is_dir())
    assert not missing, f"README Layout names folders that do not exist: {', '.join(missing)}"


def test_readme_layout_names_every_package_and_top_level_folder():
    top, under_package = _layout()
    subpackages = {
        d.name for d in PACKAGE.iterdir() if d.is_dir() and (d / "__init__.py").is_file()
    }
    left_out = sorted(f"clef_pipelines/{p}/" for p in subpackages - under_package)
    left_out += sorted(f"{p}/" for p in _tracked_top_level_folders() - top)
    assert not left_out, f"README Layout leaves out: {', '.join(left_out)}"


# [text](target) links, not images' sources or URLs with a scheme; code spans and fenced blocks
# are left out so that an example like `[x](y)` inside them is not read as a link.
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def _relative_links(path: Path) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))
    targets = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


def test_relative_links_in_readme_and_docs_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in pages
        for target in _relative_links(page)
        if not (page.parent / target).exists()
    ]
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


def test_readme_and_benchmarks_stay_short():
    # A newcomer reads the README in ten minutes; BENCHMARKS.md holds current figures only (the
    # dated entries go to lab/NOTEBOOK.md).
    for name, limit in (("README.md", 300), ("docs/BENCHMARKS.md", 400)):
        lines = len((ROOT / name).read_text(encoding="utf-8").splitlines())
        assert lines <= limit, f"{name} has {lines} lines; keep it to {limit}"


def test_the_readmes_python_ingestion_runs(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The README's ingestion snippet, as written, against a copy of the demo corpus."""
    import shutil

    import yaml

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    (snippet,) = [b for b in blocks if "run_ingestion" in b]
    shutil.copytree(ROOT / "data" / "corpus", tmp_path / "corpus")
    (tmp_path / "clef-pipelines.yaml").write_text(
        yaml.safe_dump(
            {
                "data_dir": str(tmp_path / "state"),
                "collection": "docs",
                "sources": [{"name": "sample", "path": "corpus"}],
                "embedder": {"kind": "hash", "dimension": 64},
                "steering": {"guard": {"mode": "off"}},
            }
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    monkeypatch.delenv("CLEF_PIPELINES_CONFIG", raising=False)
    exec(compile(snippet, "README.md", "exec"), {})  # noqa: S102
    from clef_pipelines.config import load_settings
    from clef_pipelines.stores import open_store

    settings = load_settings(tmp_path / "clef-pipelines.yaml")
    store = open_store(settings.store, settings.data_path)
    try:
        assert store.count("docs") > 0
    finally:
        store.close()
