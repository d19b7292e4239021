"""LlamaIndex adapters (extra `llamaindex`): a retriever and a node postprocessor.

    from clef_pipelines.integrations.llamaindex import ClefLlamaRetriever, ClefNodePostprocessor
    nodes = ClefLlamaRetriever(Retriever.from_config("clef-pipelines.yaml")).retrieve("...")
    kept = ClefNodePostprocessor(token_budget=1500).postprocess_nodes(nodes, query_str="...")

Nodes carry the passage's prompt number, citation and Clef scores in `metadata`; the node score
is Clef's evidence probability when it was asked, else the recall score. LlamaIndex puts a
node's metadata into the text an LLM reads and the text it embeds unless told otherwise: ids,
UUIDs and scores there cost tokens and mean nothing to a model, so every key this adapter adds
is excluded from both (`excluded_llm_metadata_keys`, `excluded_embed_metadata_keys`) except
those in `llm_metadata_keys` (default: the citation, which the LLM needs to cite), which the
LLM still reads.
"""

from __future__ import annotations

from collections.abc import Sequence
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

#: The metadata an LLM reads by default: the citation it is asked to cite by.
LLM_METADATA_KEYS = ("citation",)


def _score(c: Candidate) -> float:
    return float(c.scores.get("contains_answer_evidence", c.vector_score))


def _hide_added_metadata(node: Any, added: Sequence[str], llm_keys: Sequence[str]) -> None:
    """Keep the keys this adapter added out of the embed text, and out of the LLM's text
    except `llm_keys`; the caller's own keys and exclusions stay as they were."""
    hidden_from_llm = [k for k in added if k not in llm_keys]
    node.excluded_llm_metadata_keys = list(
        dict.fromkeys([*node.excluded_llm_metadata_keys, *hidden_from_llm])
    )
    node.excluded_embed_metadata_keys = list(
        dict.fromkeys([*node.excluded_embed_metadata_keys, *added])
    )


def _nodes(
    result: RetrievalResult, include_on_abstain: bool, llm_keys: Sequence[str]
) -> list[NodeWithScore]:
    if result.abstain and not include_on_abstain:
        return []
    out = []
    for n, c in result.numbered:
        meta = passage_metadata(n, c)
        node = TextNode(id_=c.id, text=c.text, metadata=meta)
        _hide_added_metadata(node, list(meta), llm_keys)
        out.append(NodeWithScore(node=node, score=_score(c)))
    return out


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
        llm_metadata_keys: Sequence[str] = LLM_METADATA_KEYS,
    ) -> None:
        super().__init__()
        self._retriever = retriever
        self._kw = {"collection": collection, "top_k": top_k, "where": where}
        self._include_on_abstain = include_on_abstain
        self._llm_keys = tuple(llm_metadata_keys)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        result = self._retriever.retrieve(query_bundle.query_str, **self._kw)
        return _nodes(result, self._include_on_abstain, self._llm_keys)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        result = await self._retriever.aretrieve(query_bundle.query_str, **self._kw)
        return _nodes(result, self._include_on_abstain, self._llm_keys)


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
    llm_metadata_keys: list[str] = Field(
        default_factory=lambda: list(LLM_METADATA_KEYS),
        description="Added metadata keys the LLM reads; the others are excluded from its text.",
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
            added = passage_metadata(n, c)
            original.node.metadata.update(added)
            original.node.metadata["id"] = original.node.node_id
            _hide_added_metadata(original.node, list(added), self.llm_metadata_keys)
            out.append(NodeWithScore(node=original.node, score=_score(c)))
        return out
