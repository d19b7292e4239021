"""Full-text search pieces shared by the adapters that have no text engine of their own.

LanceDB (its inverted index) and PostgreSQL (``tsvector``) analyse text themselves. The memory
store (a reference BM25) and Qdrant (sparse vectors with Qdrant's IDF modifier) use the analyser
here: lower-case word tokens, stop words dropped (English), Snowball stemming in the collection's
language (PyStemmer), terms hashed to 32-bit sparse indices for Qdrant.
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, Literal, get_args

#: Languages every engine supports: LanceDB/tantivy's stemmers, PostgreSQL's text search
#: configurations and Snowball (PyStemmer) all carry these, under the same lower-case names.
TextLanguage = Literal[
    "arabic",
    "danish",
    "dutch",
    "english",
    "finnish",
    "french",
    "german",
    "greek",
    "hungarian",
    "italian",
    "norwegian",
    "portuguese",
    "romanian",
    "russian",
    "spanish",
    "swedish",
    "tamil",
    "turkish",
]
LANGUAGES: frozenset[str] = frozenset(get_args(TextLanguage))

#: BM25 parameters (the usual Robertson/Lucene values).
BM25_K1 = 1.2
BM25_B = 0.75
#: Qdrant sparse vectors are written one at a time, so length normalisation uses a fixed
#: average document length (in analysed terms) instead of the collection's moving one; chunks
#: of about 180 word pieces hold about this many terms once stop words are gone.
SPARSE_AVG_TERMS = 90.0

_WORD = re.compile(r"\w+", re.UNICODE)

# The English stop words PostgreSQL's `english` configuration drops (Snowball's list): without
# them an OR query over a sentence matches almost every chunk.
_ENGLISH_STOP_WORDS = frozenset(
    """i me my myself we our ours ourselves you your yours yourself yourselves he him his
    himself she her hers herself it its itself they them their theirs themselves what which
    who whom this that these those am is are was were be been being have has had having do
    does did doing a an the and but if or because as until while of at by for with about
    against between into through during before after above below to from up down in out on
    off over under again further then once here there when where why how all any both each
    few more most other some such no nor not only own same so than too very s t can will just
    don should now""".split()  # noqa: SIM905 - a list literal would take 30 lines
)


def text_of(payload: Mapping[str, Any], fields: Sequence[str]) -> str:
    """The searchable text of a record: its text fields joined by newlines (missing skipped)."""
    return "\n".join(str(payload[f]) for f in fields if payload.get(f))


@lru_cache(maxsize=32)
def _stemmer(language: str) -> Any:
    import Stemmer

    return Stemmer.Stemmer(language)


def analyse(text: str, language: str = "english") -> list[str]:
    """Text -> stemmed terms, in order (stop words removed for English)."""
    words = _WORD.findall(text.lower())
    if language == "english":
        words = [w for w in words if w not in _ENGLISH_STOP_WORDS]
    return list(_stemmer(language).stemWords(words)) if words else []


def term_counts(text: str, language: str = "english") -> Counter[str]:
    return Counter(analyse(text, language))


def term_index(term: str) -> int:
    """A stable 32-bit index for a term (CRC-32; collisions are rare enough at corpus scale
    and cost only a little precision)."""
    return zlib.crc32(term.encode("utf-8"))


def bm25_tf(tf: float, doc_len: float, avg_len: float) -> float:
    """BM25's saturated, length-normalised term frequency (the part that is not IDF)."""
    norm = 1.0 - BM25_B + BM25_B * (doc_len / avg_len if avg_len > 0 else 1.0)
    return tf * (BM25_K1 + 1.0) / (tf + BM25_K1 * norm)


def bm25_idf(n_docs: int, df: int) -> float:
    """The BM25 IDF Lucene and Qdrant's IDF modifier use (never negative)."""
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))


def sparse_document(text: str, language: str = "english") -> tuple[list[int], list[float]]:
    """A document's sparse vector for Qdrant: hashed terms with BM25 term weights (Qdrant
    multiplies by IDF at query time, so new documents never make older weights stale)."""
    counts = term_counts(text, language)
    if not counts:
        return [], []
    length = float(sum(counts.values()))
    merged: dict[int, float] = {}
    for term, tf in counts.items():
        idx = term_index(term)
        merged[idx] = merged.get(idx, 0.0) + bm25_tf(tf, length, SPARSE_AVG_TERMS)
    indices = sorted(merged)
    return indices, [merged[i] for i in indices]


def sparse_query(text: str, language: str = "english") -> tuple[list[int], list[float]]:
    """A query's sparse vector: each distinct term once, weight 1 (BM25 ignores query tf)."""
    indices = sorted({term_index(t) for t in analyse(text, language)})
    return indices, [1.0] * len(indices)


def text_score(raw: float) -> float:
    """A text engine's raw relevance (BM25, ts_rank: unbounded, >= 0) mapped into [0, 1)
    monotonically, so text hits carry a score like vector hits do."""
    raw = max(0.0, float(raw))
    return raw / (1.0 + raw)
