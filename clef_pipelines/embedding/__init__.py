"""Embedders: the offline MiniLM default, offline multilingual e5, a deterministic hash embedder,
OpenAI-compatible HTTP."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clef_pipelines.embedding.base import Embedder, EmbedderError

__all__ = ["Embedder", "EmbedderError", "make_embedder"]


def __getattr__(name: str) -> Any:
    # Lazy: `clef_pipelines.embedding.config` (read by every settings load, `compact`'s
    # included) must not import numpy through the interface module.
    if name in ("Embedder", "EmbedderError"):
        from clef_pipelines.embedding import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_embedder(config) -> Embedder:  # type: ignore[no-untyped-def]
    """Build the embedder an `EmbedderConfig` describes."""
    from clef_pipelines.embedding.base import EmbedderError

    if config.kind == "hash":
        from clef_pipelines.embedding.hashing import HashEmbedder

        return HashEmbedder(config.dimension or 384)
    if config.kind == "minilm":
        from clef_pipelines.embedding.minilm import MiniLMEmbedder

        return MiniLMEmbedder(batch_size=config.batch_size)
    if config.kind == "e5-multilingual":
        from clef_pipelines.embedding.e5 import E5MultilingualEmbedder

        return E5MultilingualEmbedder(batch_size=config.batch_size)
    if config.kind == "openai":
        from clef_pipelines.embedding.openai_compat import OpenAIEmbedder

        return OpenAIEmbedder(
            base_url=config.base_url or "",
            model=config.model or "",
            dimension=config.dimension,
            api_key_env=config.api_key_env,
            timeout_s=config.timeout_s,
        )
    raise EmbedderError(f"unknown embedder.kind {config.kind!r}")
