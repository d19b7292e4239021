"""The answer gate: one request asking whether the kept passages hold what an answer needs.

Below `answer_min` the result abstains and no LLM is called. The passages go in the state as
a list because the question is about all of them together (no item is referred to by
position). A Clef error never abstains: the caller marks the result degraded instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from clef_pipelines.clef.client import ClefClient

GATE_QUESTION = {
    "type": "noul",
    "instructions": "Do `passages` contain the information needed to answer `query`?",
}


async def ask_gate(client: ClefClient, query: str, texts: Sequence[str]) -> tuple[float, int]:
    """P(the passages answer the query), and the input tokens the request cost."""
    response = await client.ask(
        {"query": query, "passages": list(texts)}, {"answerable": GATE_QUESTION}
    )
    answer = response.answers["answerable"]
    return float(answer.noul), response.usage.input_tokens  # type: ignore[union-attr]
