"""The hash embedder's vectors: one signed bucket per word and per word bigram, normalised."""

from __future__ import annotations

import hashlib
import re

import numpy as np

from clef_pipelines.embedding.hashing import HashEmbedder


def _reference(text: str, dim: int) -> np.ndarray:
    # The definition, one gram at a time (what the batched bincount must reproduce).
    out = np.zeros(dim, dtype=np.float32)
    words = re.findall(r"\w+", text.lower())
    for gram in words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]:
        value = int.from_bytes(hashlib.blake2b(gram.encode(), digest_size=8).digest(), "little")
        out[value % dim] += 1.0 if (value >> 63) & 1 else -1.0
    norm = np.linalg.norm(out)
    return out / (norm if norm else 1.0)


def test_vectors_match_the_definition_and_the_word_cache_changes_nothing() -> None:
    texts = [
        "Tokens last an hour. Tokens refresh, tokens expire.",
        "",
        "!!! ...",
        "the the the the",
        "Caf\u00e9 na\u00efve \u4e2d\u6587 mixed",
        "Tokens last an hour.",
        "deadbeef" * 12 + " a hash longer than the words the cache keeps",
    ]
    emb = HashEmbedder(64)
    first = emb.embed(texts)
    assert first.dtype == np.float32
    expected = np.stack([_reference(t, 64) for t in texts])
    assert first.tobytes() == expected.tobytes()
    # Again, with every word's bucket now cached, and in another order.
    again = emb.embed(list(reversed(texts)))
    assert again.tobytes() == expected[::-1].tobytes()
    assert not first[1].any()  # no words: the zero vector, not NaN
    assert "deadbeef" * 12 not in emb._words  # counted, never kept (WORD_CACHE_CHARS)
    assert "tokens" in emb._words
