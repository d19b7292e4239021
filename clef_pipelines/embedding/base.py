"""The embedder interface: texts in, float32 rows out, with a name the manifest records."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import numpy as np

from clef_pipelines.stores.base import Metric


class EmbedderError(RuntimeError):
    """The embedder could not be loaded or failed on a batch."""


class Embedder(ABC):
    #: Stable identity recorded in the collection manifest, e.g. "minilm:all-MiniLM-L6-v2".
    name: str
    dimension: int
    metric: Metric = "cosine"
    #: Word pieces the model reads per text (special tokens excluded); longer texts are cut
    #: by the model, so the embedding step counts them. None: no known limit.
    max_input_tokens: int | None = None

    def __init__(self) -> None:
        self.calls = 0
        self.texts_embedded = 0
        self.seconds = 0.0

    @abstractmethod
    def _embed(self, texts: Sequence[str]) -> np.ndarray: ...

    def _embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Queries as the model wants them; models trained with a query prefix (e5's
        "query: ") override this. By default a query is embedded like a passage."""
        return self._embed(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed a batch of passages (what is stored); returns an (n, dimension) float32
        array of unit-length rows."""
        return self._run(self._embed, texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embed a batch of search queries (what is compared with the stored passages)."""
        return self._run(self._embed_queries, texts)

    def _run(self, fn: Callable[[list[str]], np.ndarray], texts: Sequence[str]) -> np.ndarray:
        import time

        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        started = time.perf_counter()
        out = np.asarray(fn(list(texts)), dtype=np.float32)
        self.seconds += time.perf_counter() - started
        self.calls += 1
        self.texts_embedded += len(texts)
        if out.shape != (len(texts), self.dimension):
            raise EmbedderError(
                f"embedder {self.name} returned shape {out.shape}, "
                f"expected ({len(texts)}, {self.dimension})"
            )
        return out

    def close(self) -> None:  # noqa: B027
        pass
