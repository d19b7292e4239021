"""Route a query to a slice of the collection by the taxonomy fields marked for routing.

Ingestion tags every chunk with one option of each taxonomy field (`tag_<field>`). At query
time one request asks, for every routable field, which option the query is about (with an
extra `any` option: not one in particular). A filter is made only when Clef is confident:
the top option alone at `min_confidence`, else the top two as `in` when their joint mass
reaches `top2_mass`; `other` and `any` never filter. The caller retries unfiltered when too
few candidates come back, and skips routing when it passes its own filter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clef_pipelines.clef.client import ClefClient
from clef_pipelines.retrieval.config import RouteConfig

#: The option that says "no one option in particular"; never a filter.
ANY = "any"
_NEVER_FILTER = (ANY, "other")


@dataclass(frozen=True)
class RouteField:
    """A taxonomy field the router may filter on; stored on chunks as `tag_<name>`."""

    name: str
    options: Mapping[str, str | None]
    description: str = ""

    @property
    def stored_field(self) -> str:
        return f"tag_{self.name}"


@dataclass
class RouteDecision:
    filter: dict[str, Any] | None = None
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)
    input_tokens: int = 0


def route_questions(fields: Sequence[RouteField]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for f in fields:
        criteria: dict[str, Any] = dict(f.options)
        criteria.setdefault(ANY, "The question is not about one of these in particular.")
        about = f" ({f.description})" if f.description else ""
        out[f"route_{f.name}"] = {
            "type": "choice",
            "instructions": f"Which `{f.name}`{about} is `query` asking about?",
            "criteria": criteria,
        }
    return out


def decide_field(probabilities: Mapping[str, float], cfg: RouteConfig) -> Any:
    """The filter value for one field: an option, a pair of options (`in`), or None."""
    ranked = sorted(probabilities.items(), key=lambda kv: -kv[1])
    top, p_top = ranked[0]
    if top not in _NEVER_FILTER and p_top >= cfg.min_confidence:
        return top
    real = [(k, p) for k, p in ranked if k not in _NEVER_FILTER]
    if len(real) >= 2 and real[0][1] + real[1][1] >= cfg.top2_mass:
        return [real[0][0], real[1][0]]
    return None


async def route(
    client: ClefClient, query: str, fields: Sequence[RouteField], cfg: RouteConfig
) -> RouteDecision:
    """One request for every routable field; raises the client's ClefError on failure."""
    response = await client.ask({"query": query}, route_questions(fields))
    out = RouteDecision(input_tokens=response.usage.input_tokens)
    parts: list[dict[str, Any]] = []
    for f in fields:
        answer = response.answers[f"route_{f.name}"]
        probs = dict(answer.probabilities)  # type: ignore[union-attr]
        value = decide_field(probs, cfg)
        top3 = sorted(probs.items(), key=lambda kv: -kv[1])[:3]
        out.fields[f.name] = {
            "choice": answer.choice,  # type: ignore[union-attr]
            "p": {k: round(v, 4) for k, v in top3},
            "filter": value,
        }
        if isinstance(value, list):
            parts.append({f.stored_field: {"in": value}})
        elif value is not None:
            parts.append({f.stored_field: value})
    if len(parts) == 1:
        out.filter = parts[0]
    elif parts:
        out.filter = {"and": parts}
    return out
