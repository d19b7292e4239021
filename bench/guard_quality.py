"""Guard quality where it runs: false quarantine and recall of the offline injection guard on
the blocks ingest screens, from whole files in their own formats (issue 53, item 1).

    .venv/bin/python -m bench run guard_quality [--split val|test|all] [--sets tech-en,...]
        [--cache DIR] [--max-blocks 200] [--no-fetch] [--top 12] [--quick] [--json]

Every figure goes through the product's own path, what `clef-pipelines guard FILE` runs:
`screenable_blocks(paths, settings.steering.screen.kinds)` (the blocks ingest hands to the
screen: paragraphs, list items, tables, quotes, from the ingestion's loader and parsers) and
`check_texts(guard, inputs, threshold, languages)` with `configured_guard(settings.steering.guard)`
and `settings.steering.guard.languages` (the language gate, per document, as the screen applies it),
default settings, Clef off. No paragraph filter. A finding's decision is its ``decision``
field when it has one (``quarantine`` / ``keep`` / ``not_judged``), else its ``quarantine``
flag; "not judged" is its own column.

The sets (`--cache`, default ~/.cache/clef-pipelines/guard-docs; fetched there when missing,
unless --no-fetch):

- ``tech-en``: English technical documentation of the PyPI packages in ``TECH_EN`` (pinned
  versions), none of which the guard trained or thresholded on: none is in
  lab/guard/provenance/{pkgdocs,helpdocs,manpages}.json nor installed in the project's venv.
  Each package's sdist (``pip download --no-deps --no-binary :all: NAME==VERSION``) gives its
  top-level README (.md/.rst/.txt) and every .rst/.md/.txt/.html file under docs/ or doc/
  (not _build, _static, _templates, locale, requirements*.txt). Licences: each package's own
  (MIT, BSD, Apache-2.0, PSF, MPL-2.0, LGPL). Split by package.
- ``prose-de``, ``prose-fr``, ``prose-es``, ``prose-it``, ``prose-pt``, ``prose-nl``: Debian's
  translated manuals in ``PROSE`` (``apt-get download NAME=VERSION``, unpacked with
  ``dpkg-deb -x``; no root needed): the Debian Reference (HTML; GPL-2+), the Debian FAQ (HTML;
  GPL-2+), the New Maintainers' Guide (its PDF, so that PDF text is measured; GPL-2+ / MIT),
  the Developer's Reference (Sphinx HTML; GPL-2+), aptitude's Dutch manual (HTML; GPL-2+) and
  Debian Edu's Dutch manual (HTML; GPL-2+). None was used by the guard's lab (it measured the
  translated man pages under /usr/share/man/<lang>, test only). A language has two to four
  manuals, too few to split by manual: split by chapter file (``manual/file``).
- ``injections-en`` (recall): rows labelled 1 of deepset/prompt-injections
  (``$CLEF_SHARED_DATA/prompt_injections/train.jsonl``, Apache-2.0) that the product's language
  identifier names English and that fall in the guard's own *test* split (the lab's rule,
  re-derived here: sha1 of the text, first 8 hex digits mod 100 >= 85; the lab also drops test
  texts that occur in training, which is not re-checked here). Scored standalone (as one
  block) and planted: each inserted as its own paragraph in the middle of a Markdown file of
  tech-en's chosen split (file i mod n, whatever --max-units), the file run through the product path, the planted
  block's decision counted. Not split by --split (all of them are the guard's test rows).
- ``demo``: data/corpus, whole: the planted Northwind paragraph (troubleshooting.md) must be
  quarantined and nothing else.

Splits are fixed: a unit (tech-en: the package; prose: ``manual/file``) is in ``val`` when the
sha1 of ``guard-quality:<set>:<unit>`` is even in its first 8 hex digits, else ``test``; the
packages read while the guard's prose reading was designed (``SEEN_WHILE_DESIGNING``) are
``val`` whatever their hash. Choices (thresholds, gates) may look at ``val``; ``test`` is for
reporting only.
``--max-blocks`` (150) caps what one tech-en package contributes, ``--max-manual-blocks`` (800)
what one prose manual contributes to a split: files in a fixed order (tech-en: README first,
then by sha1 of the path; prose: the manual's file names in order), each taken whole, until the
cap; a file that would pass it is left out unless it is the package's (manual's) first.

Tables: per set, per format (document format of the file), per block kind: blocks, quarantined,
not judged, false quarantine %; the top-scoring false positives (shortened); recall. `--quick`:
tech-en and prose-de only, 15 blocks per package or manual, the first 2 packages or manuals, the
injections (planted in those packages' Markdown files), the demo.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._common import REPO, SHARED_DATA

DEFAULT_CACHE = Path.home() / ".cache" / "clef-pipelines" / "guard-docs"
DEMO_CORPUS = REPO / "data" / "corpus"
INJECTIONS = SHARED_DATA / "prompt_injections" / "train.jsonl"
PROSE_LANGUAGES = ("de", "fr", "es", "it", "pt", "nl")
SETS = (
    "tech-en",
    *(f"prose-{lang}" for lang in PROSE_LANGUAGES),
    "injections-en",
    "requests-en",
    "demo",
)
QUICK = {
    "sets": "tech-en,prose-de,injections-en,requests-en,demo",
    "max_blocks": 15,
    "max_manual_blocks": 15,
    "max_units": 2,
}

#: tech-en: PyPI package -> pinned sdist version (none in the guard's provenance nor the venv).
TECH_EN: dict[str, str] = {
    "alabaster": "1.0.0",
    "arrow": "1.4.0",
    "authlib": "1.9.10",
    "autopep8": "2.3.2",
    "bandit": "1.9.4",
    "bcrypt": "5.0.0",
    "beautifulsoup4": "4.15.0",
    "bleach": "6.4.0",
    "boltons": "26.2.0",
    "bottle": "0.13.5",
    "cachetools": "8.0.3",
    "cattrs": "26.2.1",
    "cerberus": "1.3.8",
    "chardet": "7.7.0",
    "commonmark": "0.9.2",
    "configobj": "5.0.9",
    "coverage": "7.18.0",
    "cssselect": "1.6.0",
    "curio": "1.6",
    "decorator": "5.3.2",
    "deepdiff": "9.1.0",
    "dictdiffer": "0.10.0",
    "diskcache": "5.6.3",
    "docopt": "0.6.2",
    "docutils": "0.23.1",
    "dynaconf": "3.3.5",
    "ecdsa": "0.19.2",
    "environs": "15.2.0",
    "fabric": "3.2.3",
    "factory-boy": "3.3.3",
    "faker": "40.63.0",
    "fire": "0.7.1",
    "flake8": "7.5.0",
    "flask": "3.1.3",
    "flask-cors": "6.0.5",
    "freezegun": "1.5.5",
    "ftfy": "6.3.1",
    "funcy": "2.1",
    "geopy": "2.5.0",
    "glom": "25.12.0",
    "humanize": "4.17.0",
    "inflect": "7.6.0",
    "invoke": "3.0.3",
    "itsdangerous": "2.2.0",
    "jedi": "0.20.1",
    "jmespath": "1.1.0",
    "jsonpath-ng": "1.17.0",
    "jsonpickle": "4.1.4",
    "lark": "1.3.1",
    "libcst": "1.9.0",
    "loguru": "0.7.3",
    "markdown2": "2.5.6",
    "mccabe": "0.7.0",
    "mistune": "3.4.0",
    "mkdocs": "1.6.1",
    "mock": "5.2.0",
    "more-itertools": "11.2.1",
    "nbformat": "5.11.1",
    "nox": "2026.10.20",
    "paramiko": "5.1.0",
    "parse": "1.22.4",
    "parso": "0.8.7",
    "passlib": "1.7.4",
    "pexpect": "4.9.0",
    "pint": "0.25.3",
    "plumbum": "2.0.2",
    "ply": "3.11",
    "polib": "1.2.0",
    "ptyprocess": "0.7.0",
    "pycodestyle": "2.15.0",
    "pydash": "8.1.0",
    "pydocstyle": "6.3.0",
    "pyflakes": "4.1.0",
    "pyquery": "2.1.0",
    "pyrsistent": "0.20.0",
    "pytest-mock": "3.17.0",
    "python-decouple": "3.8",
    "python-slugify": "9.2.0",
    "radon": "6.0.1",
    "requests-oauthlib": "2.0.0",
    "responses": "0.25.3",
    "retrying": "1.4.2",
    "rsa": "4.9.1",
    "schedule": "1.2.2",
    "schema": "0.7.8",
    "sh": "2.4.0",
    "simplejson": "4.3.0",
    "sqlparse": "0.6.1",
    "toml": "0.10.2",
    "toolz": "1.2.0",
    "tornado": "6.6.1",
    "traitlets": "5.16.1",
    "trio": "0.35.0",
    "uncertainties": "3.2.3",
    "unidecode": "1.4.0",
    "voluptuous": "0.16.0",
    "vulture": "2.16",
    "werkzeug": "3.1.9",
    "yapf": "0.43.0",
}


@dataclass(frozen=True)
class Manual:
    """A Debian documentation package: its pinned version, and which of its files are read
    (a glob under the unpacked package)."""

    version: str
    glob: str


#: prose-<lang>: Debian package -> what is read of it.
PROSE: dict[str, dict[str, Manual]] = {
    # (--quick reads the first two: small files, HTML and PDF.)
    "de": {
        "debian-faq-de": Manual("11.1", "usr/share/doc/debian/FAQ/de/*.html"),
        "maint-guide-de": Manual("1.2.53", "usr/share/doc/maint-guide-de/*.pdf"),
        "debian-reference-de": Manual("2.100", "usr/share/debian-reference/*.de.html"),
        "developers-reference-de": Manual("12.18", "usr/share/developers-reference/de/*.html"),
    },
    "fr": {
        "debian-reference-fr": Manual("2.100", "usr/share/debian-reference/*.fr.html"),
        "debian-faq-fr": Manual("11.1", "usr/share/doc/debian/FAQ/fr/*.html"),
        "maint-guide-fr": Manual("1.2.53", "usr/share/doc/maint-guide-fr/*.pdf"),
        "developers-reference-fr": Manual("12.18", "usr/share/developers-reference/fr/*.html"),
    },
    "es": {
        "debian-reference-es": Manual("2.100", "usr/share/debian-reference/*.es.html"),
        "maint-guide-es": Manual("1.2.53", "usr/share/doc/maint-guide-es/*.pdf"),
    },
    "it": {
        "debian-reference-it": Manual("2.100", "usr/share/debian-reference/*.it.html"),
        "debian-faq-it": Manual("11.1", "usr/share/doc/debian/FAQ/it/*.html"),
        "maint-guide-it": Manual("1.2.53", "usr/share/doc/maint-guide-it/*.pdf"),
        "developers-reference-it": Manual("12.18", "usr/share/developers-reference/it/*.html"),
    },
    "pt": {
        "debian-reference-pt": Manual("2.100", "usr/share/debian-reference/*.pt.html"),
        "debian-reference-pt-br": Manual("2.100", "usr/share/debian-reference/*.pt-br.html"),
        "debian-faq-pt": Manual("11.1", "usr/share/doc/debian/FAQ/pt/*.html"),
    },
    "nl": {
        "debian-faq-nl": Manual("11.1", "usr/share/doc/debian/FAQ/nl/*.html"),
        "aptitude-doc-nl": Manual("0.8.13-5", "usr/share/doc/aptitude/html/nl/*.html"),
        "debian-edu-doc-nl": Manual("2.12.23~deb12u1", "usr/share/doc/debian-edu-doc-nl/*.html"),
    },
}

#: Generated pages of a Sphinx build that are no documentation.
_GENERATED = {"genindex.html", "search.html", "py-modindex.html"}
_DOC_SUFFIXES = (".rst", ".md", ".txt", ".html")
_SKIP_PARTS = {"_build", "_static", "_templates", "locale", "locales", "_themes", "build"}
_README = re.compile(r"^readme\.(md|rst|txt|markdown)$", re.IGNORECASE)


# -- the split and the tallies (pure) ---------------------------------------------------------


#: Packages whose documentation was read while the guard's prose reading and no-prose state
#: were designed (other versions of them, fetched by hand): validation, whatever their hash,
#: so that the test split holds only documentation nobody looked at for a decision.
SEEN_WHILE_DESIGNING = frozenset({"flask-cors", "jmespath", "responses"})


def split_of(set_name: str, unit: str) -> str:
    """``val`` or ``test``: the fixed split of one unit (a package, a manual's file)."""
    if set_name == "tech-en" and unit in SEEN_WHILE_DESIGNING:
        return "val"
    digest = hashlib.sha1(f"guard-quality:{set_name}:{unit}".encode()).hexdigest()
    return "val" if int(digest[:8], 16) % 2 == 0 else "test"


def guard_split(text: str) -> str:
    """The guard lab's split of a deepset row (lab/guard/data.py ``_hash_split``, 70/15/15)."""
    bucket = int(hashlib.sha1(text.encode()).hexdigest()[:8], 16) % 100
    return "train" if bucket < 70 else "val" if bucket < 85 else "test"


def decision_of(finding: Any) -> str:
    """``quarantine`` / ``keep`` / ``not_judged``: the finding's own decision when it carries
    one, else its quarantine flag."""
    return str(getattr(finding, "decision", "quarantine" if finding.quarantine else "keep"))


@dataclass
class Tally:
    blocks: int = 0
    quarantine: int = 0
    not_judged: int = 0

    def add(self, decision: str) -> None:
        self.blocks += 1
        if decision == "quarantine":
            self.quarantine += 1
        elif decision == "not_judged":
            self.not_judged += 1

    @property
    def rate(self) -> float:
        """Quarantined blocks over all blocks (not-judged blocks count as not quarantined)."""
        return self.quarantine / self.blocks if self.blocks else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "blocks": self.blocks,
            "quarantined": self.quarantine,
            "not_judged": self.not_judged,
            "false_quarantine": round(self.rate, 5),
        }


@dataclass
class Scored:
    """One judged block: its set, unit, file format, block kind, decision, score and text."""

    set_name: str
    unit: str
    fmt: str
    kind: str
    decision: str
    p: float
    text: str
    where: str = ""
    window: str = ""


def tallies(rows: Iterable[Scored], key: str) -> dict[str, Tally]:
    """Decisions counted by one attribute of the rows (``set_name``, ``fmt``, ``kind``)."""
    out: dict[str, Tally] = {}
    for row in rows:
        out.setdefault(str(getattr(row, key)), Tally()).add(row.decision)
    return dict(sorted(out.items()))


def shorten(text: str, width: int = 110) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def plant(markdown: str, paragraph: str) -> str:
    """``paragraph`` inserted as its own paragraph at the blank line nearest the middle of a
    Markdown text, outside fenced code."""
    lines = markdown.splitlines()
    fence = False
    gaps = []
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        elif not fence and not line.strip() and i > 0:
            gaps.append(i)
    at = min(gaps, key=lambda i: abs(i - len(lines) // 2)) if gaps else len(lines)
    planted = " ".join(paragraph.split())
    return "\n".join([*lines[:at], "", planted, "", *lines[at:]]) + "\n"


# -- fetching and listing the sets ------------------------------------------------------------


@dataclass
class Unit:
    """A package or a manual's file: what is split, and its files."""

    set_name: str
    name: str
    split_key: str
    files: list[Path] = field(default_factory=list)


def _doc_member(rel: str) -> bool:
    parts = rel.split("/")
    if len(parts) == 1:
        return bool(_README.match(parts[0]))
    name = parts[-1].lower()
    return (
        parts[0].lower() in ("docs", "doc")
        and name.endswith(_DOC_SUFFIXES)
        and not _SKIP_PARTS & {p.lower() for p in parts}
        and not name.startswith(("requirements", "robots", "cmakelists"))
        and name not in _GENERATED
    )


def _members(archive: Path) -> Iterable[tuple[str, bytes]]:
    """``(path without the top folder, bytes)`` of an sdist's documentation files."""
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                rel = name.split("/", 1)[-1]
                if not name.endswith("/") and _doc_member(rel):
                    yield rel, zf.read(name)
        return
    with tarfile.open(archive) as tf:
        for member in tf.getmembers():
            rel = member.name.split("/", 1)[-1]
            fileobj = tf.extractfile(member) if member.isfile() and _doc_member(rel) else None
            if fileobj is not None:
                yield rel, fileobj.read()


def _sdist(cache: Path, name: str, version: str, fetch: bool) -> Path | None:
    folder = cache / "sdist"
    words = "[-_.]".join(re.escape(w) for w in re.split(r"[-_.]", name))
    stem = re.compile(rf"^{words}-{re.escape(version)}\.(tar\.gz|zip)$", re.IGNORECASE)
    found = [p for p in folder.glob("*") if stem.match(p.name)] if folder.is_dir() else []
    if found or not fetch:
        return found[0] if found else None
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
    subprocess.run([*cmd, f"{name}=={version}", "-d", str(folder)], capture_output=True)
    found = [p for p in folder.glob("*") if stem.match(p.name)]
    return found[0] if found else None


def tech_units(cache: Path, fetch: bool, missing: list[str]) -> list[Unit]:
    """One unit per tech-en package: its documentation files unpacked under the cache."""
    units = []
    for name, version in sorted(TECH_EN.items()):
        out = cache / "tech-en" / f"{name}-{version}"
        if not out.is_dir():
            archive = _sdist(cache, name, version, fetch)
            if archive is None:
                missing.append(f"tech-en/{name}=={version}")
                continue
            tmp = out.with_name(out.name + ".part")
            shutil.rmtree(tmp, ignore_errors=True)
            for rel, data in _members(archive):
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                (tmp / rel).write_bytes(data)
            tmp.mkdir(parents=True, exist_ok=True)
            tmp.rename(out)
        files = sorted(p for p in out.rglob("*") if p.is_file())
        readme = [p for p in files if p.parent == out]
        rest = sorted(
            (p for p in files if p.parent != out),
            key=lambda p: hashlib.sha1(str(p.relative_to(out)).encode()).hexdigest(),
        )
        units.append(Unit("tech-en", name, name, readme + rest))
    return units


def _deb(cache: Path, name: str, manual: Manual, fetch: bool) -> Path | None:
    """The unpacked Debian package (``apt-get download`` + ``dpkg-deb -x`` when missing)."""
    out = cache / "deb-x" / f"{name}_{manual.version}"
    if out.is_dir():
        return out
    folder = cache / "deb"
    debs = list(folder.glob(f"{name}_*.deb")) if folder.is_dir() else []
    if not debs and fetch:
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["apt-get", "download", f"{name}={manual.version}"], cwd=folder, capture_output=True
        )
        debs = list(folder.glob(f"{name}_*.deb"))
    if not debs:
        return None
    tmp = out.with_name(out.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(tmp)], check=True)
    tmp.rename(out)
    return out


def _readable(path: Path) -> Path:
    """A gzipped file's uncompressed twin beside it (Debian gzips some documents)."""
    if path.suffix != ".gz":
        return path
    plain = path.with_suffix("")
    if not plain.exists():
        plain.write_bytes(gzip.decompress(path.read_bytes()))
    return plain


def prose_units(cache: Path, lang: str, fetch: bool, missing: list[str]) -> list[Unit]:
    """One unit per chapter file of each manual of one language."""
    set_name = f"prose-{lang}"
    units = []
    for name, manual in PROSE[lang].items():
        root = _deb(cache, name, manual, fetch)
        if root is None:
            missing.append(f"{set_name}/{name}={manual.version}")
            continue
        for path in sorted(root.glob(manual.glob)):
            if path.name in _GENERATED:
                continue
            rel = path.relative_to(root)
            units.append(Unit(set_name, name, f"{name}/{rel}", [_readable(path)]))
    return units


# -- scoring ---------------------------------------------------------------------------------


class Product:
    """The product's path: the screen's block kinds, the configured guard and threshold."""

    def __init__(self) -> None:
        from clef_pipelines.config import Settings
        from clef_pipelines.guard.loading import configured_guard

        settings = Settings()
        self.kinds = settings.steering.screen.kinds
        self.languages = settings.steering.guard.languages
        self.context = settings.steering.guard.context
        self.guard, self.threshold = configured_guard(settings.steering.guard, REPO)

    def blocks(self, paths: Sequence[Path]) -> tuple[list[Any], list[str]]:
        from clef_pipelines.guard.check import screenable_blocks

        return screenable_blocks(paths, self.kinds)

    def judge(self, inputs: Sequence[Any]) -> list[Any]:
        from clef_pipelines.guard.check import check_texts

        return check_texts(
            self.guard, inputs, self.threshold, self.languages, self.context
        ).findings


def _fmt(item: Any, path: Path) -> str:
    return str(getattr(item, "format", None) or path.suffix.lstrip(".").lower())


def select_blocks(
    product: Product, units: Sequence[Unit], max_blocks: int
) -> tuple[list[tuple[Unit, Any]], list[str]]:
    """Each unit's blocks (``(unit, GuardInput)``), at most ``max_blocks`` per package or
    manual (``unit.name``), whole files in the units' order; and the errors."""
    picked: list[tuple[Unit, Any]] = []
    errors: list[str] = []
    used: Counter[str] = Counter()
    for unit in units:
        for path in unit.files:
            if used[unit.name] >= max_blocks:
                break
            inputs, errs = product.blocks([path])
            errors += errs
            if not inputs or (used[unit.name] and used[unit.name] + len(inputs) > max_blocks):
                continue
            used[unit.name] += len(inputs)
            for item in inputs:
                item.format = _fmt(item, path)
            picked += [(unit, item) for item in inputs]
    return picked, errors


def score(product: Product, picked: Sequence[tuple[Unit, Any]]) -> list[Scored]:
    findings = product.judge([item for _, item in picked])
    return [
        Scored(
            unit.set_name,
            unit.name,
            str(item.format),
            str(item.kind or "?"),
            decision_of(f),
            float(f.p_injection),
            item.text,
            item.where,
            f.window,
        )
        for (unit, item), f in zip(picked, findings, strict=True)
    ]


def _chosen(units: list[Unit], split: str, max_units: int | None) -> list[Unit]:
    chosen = [u for u in units if split == "all" or split_of(u.set_name, u.split_key) == split]
    if max_units is not None:
        names = list(dict.fromkeys(u.name for u in chosen))[:max_units]
        chosen = [u for u in chosen if u.name in names]
    return chosen


# -- injections and the demo -------------------------------------------------------------------


def injection_texts(path: Path) -> list[str]:
    """deepset's English label-1 rows of the guard's test split."""
    import json

    from clef_pipelines.guard.language import language_of

    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line) if line.strip() else {}
        text = str(row.get("text", ""))
        held_out = row.get("label") == 1 and guard_split(text) == "test"
        if held_out and language_of(text, ["en"]).language == "en":
            out.append(text)
    return out


def _planted_decision(product: Product, doc: Path, text: str, tmp: Path) -> tuple[str, float]:
    target = tmp / doc.name
    target.write_text(plant(doc.read_text(encoding="utf-8", errors="replace"), text))
    inputs, _ = product.blocks([target])
    needle = " ".join(text.split())[:60]
    hits = [i for i, item in enumerate(inputs) if needle in " ".join(item.text.split())]
    if not hits:
        return "missing", 0.0
    # The whole file is judged, as ingest judges it: the planted block beside its neighbours.
    finding = product.judge(inputs)[hits[0]]
    return decision_of(finding), float(finding.p_injection)


def injections(product: Product, texts: list[str], hosts: list[Path]) -> dict[str, Any]:
    standalone = product.judge([_input(t) for t in texts])
    alone = Counter(decision_of(f) for f in standalone)
    planted: Counter[str] = Counter()
    missed = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, text in enumerate(texts if hosts else []):
            decision, p = _planted_decision(product, hosts[i % len(hosts)], text, Path(tmp))
            planted[decision] += 1
            if decision != "quarantine":
                missed.append({"p": round(p, 3), "text": shorten(text), "how": "planted"})
    missed += [
        {"p": round(f.p_injection, 3), "text": shorten(t), "how": "standalone"}
        for t, f in zip(texts, standalone, strict=True)
        if decision_of(f) != "quarantine"
    ]
    n = len(texts)
    return {
        "texts": n,
        "hosts": len(hosts),
        "standalone": dict(alone),
        "planted": dict(planted),
        "recall_standalone": round(alone["quarantine"] / n, 4) if n else None,
        "recall_planted": round(planted["quarantine"] / n, 4) if n and hosts else None,
        "missed": missed,
    }


def _input(text: str) -> Any:
    from clef_pipelines.guard.check import GuardInput

    return GuardInput("injection", text)


def demo(product: Product) -> dict[str, Any]:
    inputs, errors = product.blocks(sorted(p for p in DEMO_CORPUS.iterdir() if p.is_file()))
    findings = product.judge(inputs)
    planted = [f for f in findings if "recovery-desk@northwind-support" in f.text]
    others = [f for f in findings if f not in planted]
    flagged = [f for f in others if decision_of(f) == "quarantine"]
    return {
        "blocks": len(findings),
        "northwind_quarantined": bool(planted)
        and all(decision_of(f) == "quarantine" for f in planted),
        "northwind_p": round(max((f.p_injection for f in planted), default=0.0), 3),
        "others_quarantined": len(flagged),
        "others_max_p": round(max((f.p_injection for f in others), default=0.0), 3),
        "errors": errors,
        "ok": bool(planted)
        and all(decision_of(f) == "quarantine" for f in planted)
        and not flagged,
    }


# -- the run -----------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--split", choices=("val", "test", "all"), default="val")
    parser.add_argument("--sets", default=",".join(SETS), help=f"Comma-separated, of {SETS}.")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="Corpora folder.")
    parser.add_argument(
        "--max-blocks",
        type=int,
        default=150,
        help="Blocks at most per tech-en package (whole files).",
    )
    parser.add_argument(
        "--max-manual-blocks",
        type=int,
        default=800,
        help="Blocks at most per prose manual and split (whole files).",
    )
    parser.add_argument(
        "--max-units", type=int, default=None, help="Packages / manuals per set at most."
    )
    parser.add_argument("--top", type=int, default=12, help="False positives shown per set.")
    parser.add_argument("--no-fetch", action="store_true", help="Use the cache only.")


def _table(title: str, counted: dict[str, Tally]) -> None:
    print(f"\n{title}")
    print(f"  {'':26} {'blocks':>7} {'quarant.':>8} {'not judged':>10} {'false q.':>8}")
    for key, t in counted.items():
        print(f"  {key:26} {t.blocks:7d} {t.quarantine:8d} {t.not_judged:10d} {t.rate:8.2%}")


def _report_sets(rows: list[Scored], top: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for set_name in dict.fromkeys(r.set_name for r in rows):
        mine = [r for r in rows if r.set_name == set_name]
        by = {k: tallies(mine, k) for k in ("fmt", "kind", "unit")}
        total = tallies(mine, "set_name")[set_name]
        print(
            f"\n== {set_name}: {total.blocks} blocks, {len(by['unit'])} packages/manuals, "
            f"false quarantine {total.rate:.2%} ({total.quarantine}), "
            f"not judged {total.not_judged}"
        )
        _table("per format", by["fmt"])
        _table("per block kind", by["kind"])
        worst = sorted((r for r in mine if r.decision == "quarantine"), key=lambda r: -r.p)
        print(f"\n  top false positives ({len(worst)})")
        for r in worst[:top]:
            print(f"  {r.p:.3f} {r.unit} {r.fmt}/{r.kind}: {shorten(r.text)}")
        out[set_name] = {
            "total": total.as_dict(),
            "per_format": {k: t.as_dict() for k, t in by["fmt"].items()},
            "per_kind": {k: t.as_dict() for k, t in by["kind"].items()},
            "per_unit": {k: t.as_dict() for k, t in by["unit"].items()},
            "top_false_positives": [
                {
                    "p": round(r.p, 3),
                    "unit": r.unit,
                    "format": r.fmt,
                    "kind": r.kind,
                    "where": r.where,
                    "window": shorten(r.window),
                    "text": shorten(r.text, 300),
                }
                for r in worst[:top]
            ],
        }
    return out


def _units(args: argparse.Namespace, wanted: list[str], missing: list[str]) -> list[Unit]:
    units: list[Unit] = []
    if {"tech-en", "injections-en", "requests-en"} & set(wanted):
        units += tech_units(args.cache, not args.no_fetch, missing)
    for lang in PROSE_LANGUAGES:
        if f"prose-{lang}" in wanted:
            units += prose_units(args.cache, lang, not args.no_fetch, missing)
    return units


def run(args: argparse.Namespace) -> dict[str, Any]:
    wanted = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = set(wanted) - set(SETS)
    if unknown:
        raise SystemExit(f"--sets: unknown {sorted(unknown)}; known {SETS}")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    product = Product()
    missing: list[str] = []
    units = _units(args, wanted, missing)
    rows: list[Scored] = []
    errors: list[str] = []
    t0 = time.perf_counter()
    for set_name in (s for s in wanted if s.startswith(("tech-", "prose-"))):
        chosen = _chosen([u for u in units if u.set_name == set_name], args.split, args.max_units)
        cap = args.max_blocks if set_name == "tech-en" else args.max_manual_blocks
        picked, errs = select_blocks(product, chosen, cap)
        errors += errs
        print(f"[{set_name}: {len(picked)} blocks, scoring]", file=sys.stderr, flush=True)
        rows += score(product, picked)
    results: dict[str, Any] = {
        "split": args.split,
        "guard": str(product.guard.version),
        "threshold": product.threshold,
        "kinds": list(product.kinds),
        "max_blocks": args.max_blocks,
        "max_manual_blocks": args.max_manual_blocks,
        "sets": _report_sets(rows, args.top),
        "missing": missing,
        "errors": errors[:50],
    }
    if "injections-en" in wanted:
        results["injections-en"] = _injection_report(args, product, units)
    if "requests-en" in wanted:
        results["requests-en"] = _requests_report(args, product, units)
    if "demo" in wanted:
        results["demo"] = d = demo(product)
        print(
            f"\n== demo: {d['blocks']} blocks; Northwind quarantined "
            f"{d['northwind_quarantined']} (p {d['northwind_p']}); others quarantined "
            f"{d['others_quarantined']} (max p {d['others_max_p']})"
        )
    if missing:
        print(f"\nmissing (not fetched): {', '.join(missing)}")
    results["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"\n{len(rows)} blocks judged in {results['seconds']} s; {len(errors)} errors")
    return results


def _markdown_hosts(args: argparse.Namespace, units: list[Unit]) -> list[Path]:
    """Every Markdown file of tech-en's split (--max-units does not narrow them)."""
    tech = _chosen([u for u in units if u.set_name == "tech-en"], args.split, None)
    return [p for u in tech for p in u.files if p.suffix.lower() == ".md"]


def _requests_report(
    args: argparse.Namespace, product: Product, units: list[Unit]
) -> dict[str, Any]:
    """Issue 53, item 3: requests for an unrelated task planted as a paragraph of a real
    document (``bench/data/requests_en.py``: ``VAL`` for --split val, ``TEST`` otherwise)."""
    from bench.data import requests_en

    texts = list(requests_en.VAL if args.split == "val" else requests_en.TEST)
    out = injections(product, texts, _markdown_hosts(args, units))
    print(
        f"\n== requests-en: {out['texts']} requests for an unrelated task "
        f"({'VAL' if args.split == 'val' else 'TEST'}); quarantined planted in "
        f"{out['hosts']} tech-en Markdown files {out['recall_planted']}, standalone "
        f"{out['recall_standalone']} (alone a request is no injection); decisions "
        f"{out['planted']}"
    )
    for m in out["missed"][: args.top]:
        if m["how"] == "planted":
            print(f"  missed ({m['how']}) {m['p']:.3f}: {m['text']}")
    return out


def _injection_report(
    args: argparse.Namespace, product: Product, units: list[Unit]
) -> dict[str, Any]:
    if not INJECTIONS.exists():
        print(f"\n== injections-en: skipped, {INJECTIONS} missing (set CLEF_SHARED_DATA)")
        return {"skipped": f"{INJECTIONS} missing"}
    texts = injection_texts(INJECTIONS)
    out = injections(product, texts, _markdown_hosts(args, units))
    print(
        f"\n== injections-en: {out['texts']} deepset test rows (label 1, English); recall "
        f"standalone {out['recall_standalone']}, planted in {out['hosts']} tech-en Markdown "
        f"files {out['recall_planted']}; decisions {out['standalone']} / {out['planted']}"
    )
    for m in out["missed"][: args.top]:
        print(f"  missed ({m['how']}) {m['p']:.3f}: {m['text']}")
    return out
