"""Labelled datasets by path: BEIR directories, SQuAD 2.0 JSON, JSONL queries, injection text.

Each loader returns an `EvalDataset`: the queries with their relevant document ids (graded), and
where the documents to index live as a JSONL corpus (`id`, `title`, `text`) that the normal
ingestion graph reads. SQuAD paragraphs are written out as such a corpus once.
"""

from __future__ import annotations

import csv
import json
import os
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clef_pipelines.evals.config import EvalDatasetConfig


class DatasetError(ValueError):
    """A dataset file is missing or malformed; the message names the file (and line or field)."""


@dataclass
class EvalQuery:
    id: str
    text: str
    relevant: dict[str, int]  # document id -> graded relevance (> 0 is relevant)
    unanswerable: bool = False
    answers: list[str] = field(default_factory=list)


@dataclass
class InjectionText:
    text: str
    label: int  # 1 = an instruction aimed at an AI, 0 = benign


@dataclass
class EvalDataset:
    name: str
    kind: str
    split: str
    queries: list[EvalQuery]
    corpus_path: Path | None  # JSONL documents the ingestion graph indexes; None: no collection
    injections: list[InjectionText] = field(default_factory=list)
    documents: int = 0

    @property
    def answerable(self) -> list[EvalQuery]:
        return [q for q in self.queries if not q.unanswerable]


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    if not path.is_file():
        raise DatasetError(f"no such file: {path}")
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path} line {lineno}: invalid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{path} line {lineno}: a line must hold a JSON object")
            yield lineno, row


def _count_lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for line in fh if line.strip())


def _limit(queries: list[EvalQuery], limit: int | None) -> list[EvalQuery]:
    return queries[:limit] if limit else queries


def load_beir(cfg: EvalDatasetConfig, data_path: Path) -> EvalDataset:
    root = Path(cfg.path).expanduser()
    corpus = root / "corpus.jsonl"
    qrels_path = root / "qrels" / f"{cfg.split}.tsv"
    if not corpus.is_file():
        raise DatasetError(f"BEIR directory {root} has no corpus.jsonl")
    if not qrels_path.is_file():
        splits = sorted(p.stem for p in (root / "qrels").glob("*.tsv"))
        raise DatasetError(
            f"no qrels for split {cfg.split!r}: {qrels_path} (splits: {', '.join(splits) or 'none'})"
        )
    texts: dict[str, str] = {}
    for lineno, row in _read_jsonl(root / "queries.jsonl"):
        qid = row.get("_id", row.get("id"))
        if qid is None or not isinstance(row.get("text"), str):
            raise DatasetError(f"{root / 'queries.jsonl'} line {lineno}: needs '_id' and 'text'")
        texts[str(qid)] = row["text"]
    relevant: dict[str, dict[str, int]] = {}
    with qrels_path.open(encoding="utf-8", newline="") as fh:
        for lineno, parts in enumerate(csv.reader(fh, delimiter="\t"), start=1):
            if not parts or (lineno == 1 and parts[0] == "query-id"):
                continue
            if len(parts) != 3:
                raise DatasetError(f"{qrels_path} line {lineno}: expected 3 tab-separated fields")
            qid, doc_id, grade = parts
            try:
                relevant.setdefault(qid, {})[doc_id] = int(grade)
            except ValueError:
                raise DatasetError(f"{qrels_path} line {lineno}: score {grade!r}") from None
    missing = [q for q in relevant if q not in texts]
    if missing:
        raise DatasetError(f"{qrels_path}: query ids not in queries.jsonl: {missing[:5]}")
    queries = [EvalQuery(q, texts[q], rel) for q, rel in relevant.items()]
    return EvalDataset(
        cfg.name,
        "beir",
        cfg.split,
        _limit(queries, cfg.limit),
        corpus,
        documents=_count_lines(corpus),
    )


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_") or "article"


def squad_documents(path: Path) -> tuple[list[dict[str, str]], list[EvalQuery]]:
    """SQuAD 2.0: each paragraph is a document of its article; every question is a query whose
    relevant document is its paragraph, unanswerable when `is_impossible`."""
    if not path.is_file():
        raise DatasetError(f"no such file: {path}")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: invalid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), list):
        raise DatasetError(f"{path}: SQuAD JSON needs a top-level 'data' list")
    docs: list[dict[str, str]] = []
    queries: list[EvalQuery] = []
    for a_index, article in enumerate(raw["data"]):
        title = str(article.get("title") or f"article {a_index}")
        for p_index, para in enumerate(article.get("paragraphs") or []):
            where = f"{path}: data[{a_index}].paragraphs[{p_index}]"
            if not isinstance(para.get("context"), str):
                raise DatasetError(f"{where}: needs a 'context' string")
            doc_id = f"{_slug(title)}-p{p_index}"
            docs.append({"id": doc_id, "title": title.replace("_", " "), "text": para["context"]})
            for q_index, qa in enumerate(para.get("qas") or []):
                if not isinstance(qa.get("question"), str) or "id" not in qa:
                    raise DatasetError(f"{where}.qas[{q_index}]: needs 'id' and 'question'")
                queries.append(
                    EvalQuery(
                        str(qa["id"]),
                        qa["question"],
                        {doc_id: 1},
                        unanswerable=bool(qa.get("is_impossible")),
                        answers=[a["text"] for a in qa.get("answers") or [] if "text" in a],
                    )
                )
    return docs, queries


def write_corpus(docs: list[dict[str, str]], target: Path) -> Path:
    """Write documents as JSONL, only when the content differs (the source's files stay put, so
    the ingestion sensor sees no change and an unchanged corpus costs nothing)."""
    text = "".join(json.dumps(d, ensure_ascii=False, sort_keys=True) + "\n" for d in docs)
    if target.exists() and target.read_text(encoding="utf-8") == text:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)
    return target


def dataset_dir(data_path: Path, name: str) -> Path:
    return data_path / "evals" / name


def load_squad(cfg: EvalDatasetConfig, data_path: Path) -> EvalDataset:
    docs, queries = squad_documents(Path(cfg.path).expanduser())
    corpus = write_corpus(docs, dataset_dir(data_path, cfg.name) / "corpus.jsonl")
    return EvalDataset(
        cfg.name, "squad", cfg.split, _limit(queries, cfg.limit), corpus, documents=len(docs)
    )


def _relevant_of(value: Any, where: str) -> dict[str, int]:
    if isinstance(value, list):
        return {str(d): 1 for d in value}
    if isinstance(value, dict):
        try:
            return {str(d): int(g) for d, g in value.items()}
        except (TypeError, ValueError):
            raise DatasetError(f"{where}: 'relevant' grades must be integers") from None
    if value is None:
        return {}
    raise DatasetError(f"{where}: 'relevant' must be a list of ids or an object id -> grade")


def load_jsonl(cfg: EvalDatasetConfig, data_path: Path) -> EvalDataset:
    """`jsonl:DIR` (corpus.jsonl + queries.jsonl) or `jsonl:QUERIES.jsonl` beside corpus.jsonl.
    A query line: `id`, `text` (or `query`), `relevant` (ids, or id -> grade), `unanswerable`."""
    path = Path(cfg.path).expanduser()
    queries_path = path / "queries.jsonl" if path.is_dir() else path
    corpus = queries_path.parent / "corpus.jsonl"
    if not corpus.is_file():
        raise DatasetError(f"no corpus.jsonl beside {queries_path}")
    queries: list[EvalQuery] = []
    for lineno, row in _read_jsonl(queries_path):
        where = f"{queries_path} line {lineno}"
        qid = row.get("id", row.get("_id"))
        text = row.get("text", row.get("query"))
        if qid is None or not isinstance(text, str):
            raise DatasetError(f"{where}: needs 'id' and 'text' (or 'query')")
        unanswerable = bool(row.get("unanswerable", False))
        relevant = _relevant_of(row.get("relevant"), where)
        if not relevant and not unanswerable:
            raise DatasetError(f"{where}: no 'relevant' documents and not 'unanswerable'")
        queries.append(
            EvalQuery(str(qid), text, relevant, unanswerable, list(row.get("answers") or []))
        )
    return EvalDataset(
        cfg.name,
        "jsonl",
        cfg.split,
        _limit(queries, cfg.limit),
        corpus,
        documents=_count_lines(corpus),
    )


def load_injection_texts(path: Path) -> list[InjectionText]:
    rows: list[InjectionText] = []
    for lineno, row in _read_jsonl(path):
        text, label = row.get("text"), row.get("label")
        if not isinstance(text, str) or label not in (0, 1, True, False):
            raise DatasetError(f"{path} line {lineno}: needs 'text' (string) and 'label' (0 or 1)")
        rows.append(InjectionText(text, int(label)))
    return rows


PLANT_SEPARATOR = "\n\n"


def planted_corpus(
    cfg: EvalDatasetConfig, rows: Sequence[Any], *, seed: int = 13, share: float = 0.5
) -> tuple[list[dict[str, Any]], list[Any]]:
    """Host paragraphs with injections planted into a seeded half of them.

    A planted document records where the planted text starts (`metadata.planted_start`) so that
    chunks holding planted text are found by their character offsets, not by string search.
    Queries: the answerable host questions of planted paragraphs."""
    if not cfg.host or not cfg.host.startswith("squad:"):
        raise DatasetError(f"dataset {cfg.name!r}: host must be squad:PATH, got {cfg.host!r}")
    docs, queries = squad_documents(Path(cfg.host.partition(":")[2]).expanduser())
    injections = [r.text for r in rows if r.label == 1]
    if not injections:
        raise DatasetError(f"dataset {cfg.name!r}: no injection texts (label 1) to plant")
    rng = random.Random(seed)
    order = list(range(len(docs)))
    rng.shuffle(order)
    chosen = sorted(order[: max(1, int(len(docs) * share))])
    planted: dict[str, int] = {}
    out = [dict(d) for d in docs]
    for n, index in enumerate(chosen):
        doc = out[index]
        start = len(doc["text"]) + len(PLANT_SEPARATOR)
        doc["text"] = doc["text"] + PLANT_SEPARATOR + injections[n % len(injections)]
        doc["metadata"] = {"planted_start": start}
        planted[doc["id"]] = start
    planted_queries = [
        EvalQuery(q.id, q.text, q.relevant, q.unanswerable, q.answers)
        for q in queries
        if not q.unanswerable and next(iter(q.relevant)) in planted
    ]
    return out, planted_queries


def load_injections(cfg: EvalDatasetConfig, data_path: Path) -> EvalDataset:
    """Labelled injection text; with `host` (a SQuAD file) the injections are also planted into
    the host's paragraphs and that corpus is indexed (see `planted_corpus`)."""
    rows = load_injection_texts(Path(cfg.path).expanduser())
    if cfg.limit:
        rows = rows[: cfg.limit]
    queries: list[EvalQuery] = []
    corpus: Path | None = None
    documents = 0
    if cfg.host:
        docs, queries = planted_corpus(cfg, rows)
        corpus = write_corpus(docs, dataset_dir(data_path, cfg.name) / "corpus.jsonl")
        documents = len(docs)
    return EvalDataset(cfg.name, "injections", cfg.split, queries, corpus, rows, documents)


DatasetLoader = Callable[[EvalDatasetConfig, Path], EvalDataset]

#: The one registry of dataset formats; `KIND:PATH` picks the loader.
DATASET_LOADERS: dict[str, DatasetLoader] = {
    "beir": load_beir,
    "squad": load_squad,
    "jsonl": load_jsonl,
    "injections": load_injections,
}


def load_dataset(cfg: EvalDatasetConfig, data_path: Path) -> EvalDataset:
    return DATASET_LOADERS[cfg.kind](cfg, data_path)


def corpus_path(cfg: EvalDatasetConfig, data_path: Path) -> Path | None:
    """Where the dataset's documents are, as JSONL, without loading the queries where possible."""
    if cfg.kind == "beir":
        return Path(cfg.path).expanduser() / "corpus.jsonl"
    return load_dataset(cfg, data_path).corpus_path
