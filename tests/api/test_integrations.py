"""LangChain and LlamaIndex adapters, with each framework's own objects and no network."""

from __future__ import annotations

from typing import Any

from clef_pipelines.clef.config import ClefConfig
from clef_pipelines.retrieval import Retriever
from tests.clef.fake_server import FakeServer
from tests.retrieval.conftest import CONFLICT, PASSAGES, PLANTED, QUERY, judge


def clef_for(fake: FakeServer) -> ClefConfig:
    return ClefConfig(
        backend="self-hosted",
        base_url=fake.base_url,
        api_key_env="CLEF_TEST_KEY",
        cache=False,
        max_retries=0,
    )


def test_langchain_retriever_and_compressor(fake: FakeServer, collection_factory: Any) -> None:
    from langchain_core.documents import Document

    from clef_pipelines.integrations.langchain import ClefDocumentCompressor, ClefRetriever

    fake.answer_with(judge(gate_p=0.9))
    col = collection_factory(fake)
    with Retriever(col.settings) as r:
        docs = ClefRetriever(retriever=r).invoke(QUERY)
    assert docs[0].page_content == PASSAGES[0] and docs[0].metadata["n"] == 1
    assert all(d.metadata["citation"] for d in docs)
    assert PLANTED not in [d.page_content for d in docs]
    assert [d.metadata["conflict"] for d in docs if d.page_content == CONFLICT] == [True]

    given = [
        Document(page_content=PASSAGES[5], metadata={"source": "a"}, id="a"),
        Document(page_content=PLANTED, metadata={"source": "b"}, id="b"),
        Document(page_content=PASSAGES[0], metadata={"source": "c"}, id="c"),
    ]
    kept = ClefDocumentCompressor(clef=clef_for(fake)).compress_documents(given, QUERY)
    assert [d.id for d in kept] == ["c"]
    assert kept[0].metadata["source"] == "c" and kept[0].metadata["scores"]["is_relevant"] > 0.5


def test_llamaindex_retriever_and_postprocessor(fake: FakeServer, collection_factory: Any) -> None:
    from llama_index.core.schema import NodeWithScore, TextNode

    from clef_pipelines.integrations.llamaindex import ClefLlamaRetriever, ClefNodePostprocessor

    fake.answer_with(judge(gate_p=0.9))
    col = collection_factory(fake)
    with Retriever(col.settings) as r:
        nodes = ClefLlamaRetriever(r).retrieve(QUERY)
    assert nodes[0].node.get_content() == PASSAGES[0]
    assert nodes[0].score is not None and nodes[0].score > 0.9
    assert PLANTED not in [n.node.get_content() for n in nodes]
    assert all(n.node.metadata["citation"] for n in nodes)

    given = [
        NodeWithScore(node=TextNode(id_="x", text=PLANTED), score=0.9),
        NodeWithScore(node=TextNode(id_="y", text=PASSAGES[0]), score=0.5),
        NodeWithScore(node=TextNode(id_="z", text=PASSAGES[7]), score=0.4),
    ]
    kept = ClefNodePostprocessor(clef=clef_for(fake)).postprocess_nodes(given, query_str=QUERY)
    assert [n.node.node_id for n in kept] == ["y"]


def test_langchain_retriever_takes_k_and_documents_carry_source(
    fake: FakeServer, collection_factory: Any
) -> None:
    from clef_pipelines.integrations.langchain import ClefRetriever

    fake.answer_with(judge(gate_p=0.9))
    col = collection_factory(fake)
    with Retriever(col.settings) as r:
        every = ClefRetriever(retriever=r).invoke(QUERY)
        two = ClefRetriever(retriever=r, k=2).invoke(QUERY)
        one = ClefRetriever(retriever=r, k=2).invoke(QUERY, k=1)
    assert len(every) > 2
    assert [d.id for d in two] == [d.id for d in every[:2]] and [d.id for d in one] == [two[0].id]
    assert every[0].metadata["source"] == "file:///guide-0.md"
    # The recall score says what it holds: hybrid recall (the default) fuses two lists.
    assert every[0].metadata["recall_score_kind"] == "fused_zscore"
    assert every[0].metadata["recall_score"] == every[0].metadata["vector_score"]


def test_llamaindex_metadata_stays_out_of_the_llm_prompt(
    fake: FakeServer, collection_factory: Any
) -> None:
    from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

    from clef_pipelines.integrations.llamaindex import ClefLlamaRetriever, ClefNodePostprocessor

    fake.answer_with(judge(gate_p=0.9))
    col = collection_factory(fake)
    with Retriever(col.settings) as r:
        node = ClefLlamaRetriever(r).retrieve(QUERY)[0].node
    for_llm = node.get_content(metadata_mode=MetadataMode.LLM)
    assert node.metadata["citation"] in for_llm and PASSAGES[0] in for_llm
    assert node.node_id not in for_llm and "recall_score" not in for_llm
    assert "scores" not in for_llm and "doc_id" not in for_llm
    assert node.get_content(metadata_mode=MetadataMode.EMBED) == PASSAGES[0]

    given = [NodeWithScore(node=TextNode(id_="y", text=PASSAGES[0], metadata={"author": "Ann"}))]
    kept = ClefNodePostprocessor(clef=clef_for(fake)).postprocess_nodes(given, query_str=QUERY)
    for_llm = kept[0].node.get_content(metadata_mode=MetadataMode.LLM)
    assert "author: Ann" in for_llm and "is_relevant" not in for_llm and "n: 1" not in for_llm
