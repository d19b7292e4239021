"""LlamaIndex adapters (extra `llamaindex`): a retriever and a node postprocessor.

    from clef_pipelines.integrations.llamaindex import ClefLlamaRetriever, ClefNodePostprocessor
    nodes = ClefLlamaRetriever(Retriever.from_config("clef-pipelines.yaml")).retrieve("...")
    kept = ClefNodePostprocessor(token_budget=1500).postprocess_nodes(nodes, query_str="...")

Nodes carry the passage's prompt number, citation and Clef scores in `metadata`; the node score
is Clef's evidence probability when it was asked, else the vector score.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.bridge.pydantic import Field
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from clef_pipelines.clef.config import ClefConfig
from clef_pipelines.guard.config import GuardConfig
from clef_pipelines.integrations._common import passage_metadata, run_sync
from clef_pipelines.retrieval.result import RetrievalResult
from clef_pipelines.steering.candidates import Candidate


def _score(c: Candidate) -> float:
    return float(c.scores.get("contains_answer_evidence", c.vector_score))


def _nodes(result: RetrievalResult, include_on_abstain: bool) -> list[NodeWithScore]:
    if result.abstain and not include_on_abstain:
        return []
    return [
        NodeWithScore(
            node=TextNode(id_=c.id, text=c.text, metadata=passage_metadata(n, c)), score=_score(c)
        )
        for n, c in result.numbered
    ]


class ClefLlamaRetriever(BaseRetriever):
    """Clef-steered retrieval from a clef-pipelines collection."""

    def __init__(
        self,
        retriever: Any,
        *,
        collection: str | None = None,
        top_k: int | None = None,
        where: dict[str, Any] | None = None,
        include_on_abstain: bool = False,
    ) -> None:
        super().__init__()
        self._retriever = retriever
        self._kw = {"collection": collection, "top_k": top_k, "where": where}
        self._include_on_abstain = include_on_abstain

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        result = self._retriever.retrieve(query_bundle.query_str, **self._kw)
        return _nodes(result, self._include_on_abstain)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        result = await self._retriever.aretrieve(query_bundle.query_str, **self._kw)
        return _nodes(result, self._include_on_abstain)


class ClefNodePostprocessor(BaseNodePostprocessor):
    """Keep the nodes that answer the query within a token budget; drop irrelevant nodes and
    planted instructions. Node text is never rewritten; order is best first."""

    token_budget: int | None = Field(default=None, description="Tokens of node text kept.")
    max_passages: int | None = Field(default=None)
    clef: ClefConfig | None = Field(default=None, description="Clef settings (default auto).")
    data_dir: str | None = Field(default=None)
    guard: GuardConfig | None = Field(
        default=None,
        description="Offline guard dropping planted instructions when Clef is off (default on).",
    )

    @classmethod
    def class_name(cls) -> str:
        return "ClefNodePostprocessor"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        from clef_pipelines.retrieval.compaction import acompact

        if not nodes:
            return []
        if query_bundle is None:
            raise ValueError("ClefNodePostprocessor needs the query (query_bundle or query_str)")
        passages = [
            {"id": str(i), "text": n.node.get_content(), "score": n.score or 0.0}
            for i, n in enumerate(nodes)
        ]
        result = run_sync(
            acompact(
                query_bundle.query_str,
                passages,
                token_budget=self.token_budget,
                max_passages=self.max_passages,
                clef=self.clef,
                data_dir=self.data_dir,
                guard=self.guard,
            )
        )
        out = []
        for n, c in result.numbered:
            original = nodes[int(c.id)]
            original.node.metadata.update(passage_metadata(n, c))
            original.node.metadata["id"] = original.node.node_id
            out.append(NodeWithScore(node=original.node, score=_score(c)))
        return out
