"""The passage every query-time stage works on: recalled from a store, or handed to `compact`.

Stages write into a candidate (Clef probabilities in `scores`, a `reason` when dropped) and
never touch its text: what an LLM finally sees is the stored text, verbatim, with a citation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Payload fields that are not worth carrying into a result (big, or internal).
_HIDDEN_FIELDS = ("vector", "embed_text", "text")


@dataclass
class Candidate:
    """A passage with what a reader needs to cite it and what the stages decided about it."""

    id: str
    text: str
    #: The recall score (named for history: it is a vector similarity only in `vector` mode;
    #: `score_kind` says what it holds).
    vector_score: float = 0.0
    rank: int = 0  # 1-based place in recall (vector) order
    record: dict[str, Any] = field(default_factory=dict)
    tokens: int = 0
    scores: dict[str, float] = field(default_factory=dict)
    conflict: bool = False
    # Why the passage was left out (None: kept). `unscored` never drops: a failed Clef call
    # keeps vector order.
    #   "instructs_ai": instructions addressed to an AI assistant, not information (Clef,
    #     or the offline guard where Clef did not judge: `decided_by` says which)
    #   "irrelevant": Clef: does not address the query
    #   "no_evidence": threshold strategy: relevant but holds nothing usable in an answer
    #   "duplicate": the same text as a passage already kept
    #   "over_max_passages": ranked below the `max_passages` best
    #   "over_budget": did not fit the token budget
    #   "not_needed": not asked (classify waves): ranked below the kept set whatever Clef said
    #   "unscreened": compaction after a Clef failure: the offline guard could not judge it
    #     for planted instructions within the request's deadline, so it is withheld
    reason: str | None = None
    #: Who dropped the passage for `instructs_ai`: "clef" or "guard".
    decided_by: str | None = None
    #: The offline guard's P(injection), where it judged the passage (Clef off).
    p_guard: float | None = None
    expanded_from: str | None = None
    #: What `vector_score` holds (`SCORE_KINDS`).
    score_kind: str = "vector_similarity"

    @property
    def title(self) -> str:
        return str(self.record.get("title") or "")

    @property
    def section_path(self) -> str:
        return str(self.record.get("section_path") or "")

    @property
    def doc_id(self) -> str:
        return str(self.record.get("doc_id") or "")

    @property
    def source_uri(self) -> str:
        return str(self.record.get("source_uri") or "")

    @property
    def citation(self) -> str:
        """Title and section path, then where in the source: `Guide > Auth (file.md:10-90)`."""
        path = self.section_path
        # A Markdown H1 is usually the title itself: do not say it twice.
        if self.title and not (path == self.title or path.startswith(self.title + " > ")):
            path = f"{self.title} > {path}" if path else self.title
        start, end = self.record.get("char_start"), self.record.get("char_end")
        where = self.source_uri
        if where and start is not None and end is not None and int(start) >= 0:
            where = f"{where}:{start}-{end}"
        if not where:
            return path or self.id
        return f"{path} ({where})" if path else where

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the text, the citation, every score; no vectors."""
        out: dict[str, Any] = {
            "id": self.id,
            "text": self.text,
            "citation": self.citation,
            "doc_id": self.doc_id,
            "title": self.title,
            "section_path": self.section_path,
            "source_uri": self.source_uri,
            "char_start": self.record.get("char_start"),
            "char_end": self.record.get("char_end"),
            "rank": self.rank,
            "recall_score": round(self.vector_score, 6),
            "recall_score_kind": self.score_kind,
            # The same value under its old name, kept for older callers (deprecated).
            "vector_score": round(self.vector_score, 6),
            "tokens": self.tokens,
            "scores": {k: round(v, 4) for k, v in self.scores.items()},
        }
        if self.conflict:
            out["conflict"] = True
        if self.reason:
            out["reason"] = self.reason
        if self.decided_by:
            out["decided_by"] = self.decided_by
        if self.p_guard is not None:
            out["p_guard"] = round(self.p_guard, 4)
        if self.expanded_from:
            out["expanded_from"] = self.expanded_from
        meta = {
            k: v
            for k, v in self.record.items()
            if k not in _HIDDEN_FIELDS and k not in out and not isinstance(v, list | tuple)
        }
        out["metadata"] = meta
        return out


#: What a candidate's recall score holds. Only a vector similarity is in [0, 1]; a fused score
#: ranks the candidates of one query and means nothing across queries.
SCORE_KINDS = {
    "vector_similarity": "similarity of the query's and the passage's vectors, in [0, 1]",
    "text_match": "the store's full-text match score, in [0, 1)",
    "fused_zscore": "hybrid recall: sum of each list's standardised scores (not in [0, 1])",
    "fused_weighted": "hybrid recall: sum of each list's min-max scaled scores",
    "fused_rrf": "hybrid recall: reciprocal rank fusion, sum of w / (k + rank)",
    "caller": "the score the caller handed in with the passage (compact)",
}


def recall_score_kind(mode: str, fusion_method: str) -> str:
    """The `score_kind` of a candidate recalled in `retrieval.mode` `mode`."""
    if mode == "hybrid":
        return f"fused_{fusion_method}"
    return "text_match" if mode == "text" else "vector_similarity"


def normalised_text(text: str) -> str:
    """Text compared for duplicates: case and blank space do not make a passage new."""
    return " ".join(text.split()).casefold()


def as_candidates(items: Any, count_tokens: Any) -> list[Candidate]:
    """Candidates from what a caller of `compact` hands in: strings, dicts with `text` (and
    optional `id`, `score`, `citation`/`source_uri`, metadata), or Candidates."""
    out: list[Candidate] = []
    seen: set[str] = set()
    for i, item in enumerate(items, start=1):
        if isinstance(item, Candidate):
            c = item
        elif isinstance(item, str):
            c = Candidate(id=str(i), text=item, rank=i, score_kind="caller")
        elif isinstance(item, dict):
            if not isinstance(item.get("text"), str):
                raise ValueError(f"passage {i}: a dict passage needs a string 'text'")
            record = {k: v for k, v in item.items() if k not in ("text", "score", "id")}
            if "citation" in record and "source_uri" not in record:
                record["source_uri"] = record.pop("citation")
            score = item.get("score", item.get("vector_score", 0.0))
            c = Candidate(
                id=str(item.get("id", i)),
                text=item["text"],
                vector_score=float(score or 0.0),
                rank=i,
                record=record,
                score_kind="caller",
            )
        else:
            raise ValueError(f"passage {i}: expected a string or a dict, not {type(item).__name__}")
        if c.id in seen:
            raise ValueError(f"passage ids must be unique; repeated: {c.id!r}")
        seen.add(c.id)
        if not c.tokens:
            c.tokens = int(c.record.get("tokens") or 0) or count_tokens(c.text)
        out.append(c)
    return out
