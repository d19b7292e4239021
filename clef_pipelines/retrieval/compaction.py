"""`compact(query, passages, token_budget=...)`: compaction on its own, without a store.

What clef-compactor does, and more: every passage is asked whether it is relevant, holds
answer evidence, contradicts the query's premise, and whether it carries instructions aimed at
an AI (passages of unknown provenance were never screened), several passages per request.
Then injections and irrelevant passages are dropped, duplicates removed, conflicts set apart,
and the token budget is filled with the best passages. With Clef off, the offline guard
(`steering.guard`) judges the passages for planted instructions instead
(`retrieval/passage_guard.py`). Text is never rewritten; every dropped
passage says why; `result.tokens` reports tokens before and after and the saved fraction,
and the trace the Clef requests, tokens and cost.

    from clef_pipelines.retrieval import compact
    result = compact("How do refunds work?", ["passage one ...", {"text": ..., "id": ...}],
                     token_budget=1500)
    result.to_prompt(); result.to_dict()
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clef_pipelines.clef.client import ClefClient
from clef_pipelines.retrieval.passage_guard import screen_what_clef_left, screen_with_guard
from clef_pipelines.retrieval.result import RetrievalResult
from clef_pipelines.retrieval.steer import steer
from clef_pipelines.steering.candidates import as_candidates

if TYPE_CHECKING:
    from clef_pipelines.clef.config import ClefConfig
    from clef_pipelines.config_light import Section
    from clef_pipelines.guard.config import GuardConfig
    from clef_pipelines.retrieval.config import RetrievalConfig

# The settings may be models or `config_light` sections (the CLI's cold path, without
# pydantic): both are read by attribute, and the models are imported only for a default.


def compaction_config(
    base: RetrievalConfig | Section | None = None,
    *,
    token_budget: int | None = None,
    max_passages: int | None = None,
    gate: bool = False,
) -> RetrievalConfig | Section:
    """Compaction's defaults: drop irrelevant passages, no cap on count but the budget."""
    if base is None:
        from clef_pipelines.retrieval.config import RetrievalConfig

        base = RetrievalConfig()
    cfg = base.model_copy(deep=True)
    cfg.select.drop_irrelevant = True
    cfg.select.max_passages = max_passages or 200
    if token_budget is not None:
        cfg.compact.token_budget = token_budget
    if not gate:
        cfg.gate.mode = "off"
    return cfg


async def acompact(
    query: str,
    passages: Sequence[Any],
    *,
    token_budget: int | None = None,
    max_passages: int | None = None,
    gate: bool = False,
    config: RetrievalConfig | Section | None = None,
    client: ClefClient | None = None,
    clef: ClefConfig | Section | None = None,
    data_dir: str | None = None,
    guard: GuardConfig | Section | None = None,
    base_dir: str | Path = ".",
    guard_deadline_s: float | None = None,
    one_shot: bool = False,
) -> RetrievalResult:
    """Compact `passages` (strings, dicts with `text`, or Candidates) for `query`.

    `client`: a shared Clef client (recommended in services); else one is made from `clef`
    (default: `auto`) and closed afterwards. `gate=True` also asks the answer gate.
    `guard`: the offline guard that judges planted instructions when Clef does not
    (`steering.guard`, default: on with the package's weights; `base_dir` resolves its
    weights file). `guard_deadline_s`: seconds from the call's start by which the guard must
    have judged what a failing Clef left unjudged (None: no limit); what it has not judged
    by then is withheld as `unscreened`. `one_shot`: a process that compacts once and exits
    (the CLI): the client it makes sends Clef's requests from threads
    (`clef/backends/http.py`) and reads plain answers without pydantic (`plain_wire`),
    which starts faster.
    """
    from clef_pipelines.chunking.tokens import count_tokens

    if not query.strip():
        raise ValueError("the query is empty")
    started = time.perf_counter()
    cfg = compaction_config(config, token_budget=token_budget, max_passages=max_passages, gate=gate)
    candidates = as_candidates(passages, count_tokens)
    result = RetrievalResult(query=query)
    own = client is None
    if client is None:
        client = ClefClient(clef, data_dir=data_dir, http_in_threads=one_shot, plain_wire=one_shot)
    try:
        ask_instructs_ai = cfg.classify.instructs_ai != "never"
        by_clef = clef_judges_instructions(cfg, client, ask_instructs_ai=ask_instructs_ai)
        if by_clef:
            result.instruction_screen = {"judged_by": "clef", "mode": "on"}
        else:
            await screen_with_guard(result, candidates, guard_model(guard), base_dir)
        await steer(
            result, candidates, cfg, client, ask_instructs_ai=ask_instructs_ai, run_gate=gate
        )
        if by_clef and result.degraded:
            await screen_what_clef_left(
                result,
                guard_model(guard),
                base_dir,
                deadline_s=guard_deadline_s,
                started=started,
            )
    finally:
        if own:
            await client.aclose()
    result.total_ms = (time.perf_counter() - started) * 1e3
    return result


def guard_model(guard: GuardConfig | Section | None) -> GuardConfig:
    """The guard's settings as the model (its weights are resolved by a method of it)."""
    from clef_pipelines.config_light import as_model
    from clef_pipelines.guard.config import GuardConfig

    return GuardConfig() if guard is None else as_model(guard)


def clef_judges_instructions(
    cfg: RetrievalConfig | Section, client: ClefClient, *, ask_instructs_ai: bool
) -> bool:
    """Whether classification asks Clef `instructs_ai` and selection drops on the answer:
    Clef on, classify and select on, the question not turned off."""
    return (
        client.enabled
        and ask_instructs_ai
        and cfg.classify.mode == "on"
        and cfg.select.mode == "on"
    )


def compact(query: str, passages: Sequence[Any], **kw: Any) -> RetrievalResult:
    """The sync twin of `acompact` (same arguments); not from inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(acompact(query, passages, **kw))
    raise RuntimeError("compact() was called inside an event loop: await acompact() instead")
