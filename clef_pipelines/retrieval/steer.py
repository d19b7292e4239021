"""The store-free half of the query path: classify -> select -> compact -> gate, over any
candidates (recalled by a `Retriever`, or handed to `compact`).

Failure policy: a Clef error (after the client's retries) never abstains and never drops a
passage. The result is marked degraded and the passages come back in vector order, so an
answer can still be written from what recall found.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from clef_pipelines.clef.client import ClefClient
from clef_pipelines.clef.errors import ClefError
from clef_pipelines.clef.usage import price_per_token
from clef_pipelines.retrieval.result import RetrievalResult, StageTrace
from clef_pipelines.steering.candidates import Candidate
from clef_pipelines.steering.classify import ClassifyOutcome, WaveHistory, classify
from clef_pipelines.steering.compact import TokenReport, drop_before_asking, fill_budget
from clef_pipelines.steering.gate import ask_gate
from clef_pipelines.steering.select import (
    Selection,
    select,
    settled,
    vector_order,
    waves_cannot_settle,
)

if TYPE_CHECKING:
    from clef_pipelines.retrieval.config import ClassifyConfig, RetrievalConfig, SelectConfig

Expander = Callable[[list[Candidate]], Awaitable[list[Candidate]]]


def clef_price(client: ClefClient | None) -> float:
    if client is None:
        return 0.0
    return price_per_token(client.usage.backend, client.usage.model)


def clef_unavailable(client: ClefClient | None) -> str | None:
    """Why Clef cannot be asked (None when it can)."""
    if client is None:
        return "no Clef client"
    if not client.enabled:
        return f"Clef is off ({client.backend.describe()})"
    return None


async def steer(
    result: RetrievalResult,
    candidates: Sequence[Candidate],
    cfg: RetrievalConfig,
    client: ClefClient | None,
    *,
    ask_instructs_ai: bool,
    run_gate: bool = True,
    expand: Expander | None = None,
    wave_history: WaveHistory | None = None,
) -> RetrievalResult:
    """Fill `result` with the kept passages, conflicts, drops, gate and trace.
    `wave_history`: a warm caller's record for `classify.waves: auto` (None: waves on).

    The stages, in order: compaction's checks that need no Clef, classify, select, expand
    (when given), compaction's token budget, gate. The trace lists classify, select, expand,
    compact and gate."""
    price = clef_price(client)
    unavailable = clef_unavailable(client)
    budget = cfg.compact.token_budget if cfg.compact.mode == "on" else None
    result.tokens = TokenReport(before=sum(c.tokens for c in candidates), after=0, budget=budget)
    compact_trace = _drop_before_asking(candidates, cfg, budget)
    scored, not_needed = await _classify(
        result,
        candidates,
        cfg,
        client,
        unavailable,
        price,
        ask_instructs_ai=ask_instructs_ai,
        wave_history=wave_history,
    )
    chosen, select_trace = _select(result, candidates, cfg, scored=scored, not_needed=not_needed)
    if expand is not None and chosen.kept:
        await _expand(result, chosen, expand)
    _fill_budget(result, chosen, budget, compact_trace)
    # Every passage's fate with the probabilities behind it, in one place.
    select_trace.details["decisions"] = _decisions(candidates)
    if run_gate:
        await _gate(result, cfg, client, unavailable, price)
    return result


def _drop_before_asking(
    candidates: Sequence[Candidate], cfg: RetrievalConfig, budget: int | None
) -> StageTrace:
    """Compaction's checks that need no Clef: their passages are not asked about. The
    returned trace is the compact stage's, listed once the token budget is filled."""
    trace = StageTrace("compact", mode=cfg.compact.mode)
    if cfg.compact.mode == "on":
        t = time.perf_counter()
        n = drop_before_asking(candidates, dedupe=cfg.compact.dedupe, token_budget=budget)
        trace.ms = (time.perf_counter() - t) * 1e3
        trace.details["dropped_before_asking"] = n
    return trace


async def _classify(
    result: RetrievalResult,
    candidates: Sequence[Candidate],
    cfg: RetrievalConfig,
    client: ClefClient | None,
    unavailable: str | None,
    price: float,
    *,
    ask_instructs_ai: bool,
    wave_history: WaveHistory | None,
) -> tuple[bool, list[Candidate]]:
    """The classify stage: whether every passage was scored, and the passages classification
    did not need to ask about (waves)."""
    ccfg = cfg.classify
    trace = StageTrace("classify", mode=ccfg.mode)
    result.stages.append(trace)
    if ccfg.mode == "off":
        trace.skipped = "mode off"
    elif ccfg.mode == "on" and cfg.select.mode == "off":
        trace.skipped = "select is off: the answers could not change the result"
    elif unavailable:
        trace.skipped = unavailable
        if ccfg.mode == "on":
            result.degrade(unavailable)
    else:
        assert client is not None
        return await _ask_classify(
            result,
            trace,
            candidates,
            cfg,
            client,
            price,
            ask_instructs_ai=ask_instructs_ai,
            wave_history=wave_history,
        )
    return False, []


async def _ask_classify(
    result: RetrievalResult,
    trace: StageTrace,
    candidates: Sequence[Candidate],
    cfg: RetrievalConfig,
    client: ClefClient,
    price: float,
    *,
    ask_instructs_ai: bool,
    wave_history: WaveHistory | None,
) -> tuple[bool, list[Candidate]]:
    ccfg, scfg = cfg.classify, cfg.select
    no_waves = waves_cannot_settle(scfg) if ccfg.waves else "classify.waves is off"
    in_waves = True
    if ccfg.waves == "auto" and wave_history is not None and not no_waves:
        in_waves = wave_history.worth_it(ccfg.waves_min_settled)
    try:
        outcome = await classify(
            client,
            result.query,
            candidates,
            ask_instructs_ai=ask_instructs_ai,
            layout=ccfg.layout,
            passages_per_request=ccfg.passages_per_request if ccfg.packed else 1,
            shared_wording=ccfg.shared_wording,
            settled=None if no_waves else lambda done, rest: settled(done, rest, scfg),
            first_wave=ccfg.first_wave,
            min_first_wave=scfg.max_passages,
            ask_in_waves=in_waves,
            preview_chars=cfg.compact.preview_chars,
        )
    except ClefError as exc:  # e.g. a passage too long for any request
        trace.error = f"{type(exc).__name__}: {exc}"
        if ccfg.mode == "on":
            result.degrade(f"classify failed: {trace.error}")
        return False, []
    trace.ms = outcome.ms
    trace.requests = outcome.requests
    trace.input_tokens = outcome.input_tokens
    trace.cost_usd = outcome.input_tokens * price
    trace.details.update(
        passages=outcome.asked,
        questions=outcome.questions,
        instructs_ai_asked=ask_instructs_ai,
        waves=outcome.waves,
    )
    if no_waves:
        trace.details["waves_off"] = no_waves
    else:
        _record_waves(trace, outcome, ccfg, wave_history, in_waves=in_waves)
    if outcome.failed:
        first = next(iter(outcome.failed.values()))
        trace.error = f"{len(outcome.failed)} passage(s) not scored: {first}"
        if ccfg.mode == "on":
            result.degrade(f"classify failed: {first}")
        return False, outcome.not_needed
    return True, outcome.not_needed


def _record_waves(
    trace: StageTrace,
    outcome: ClassifyOutcome,
    ccfg: ClassifyConfig,
    wave_history: WaveHistory | None,
    *,
    in_waves: bool,
) -> None:
    """What classifying in waves did, and (`waves: auto`) whether it was worth it."""
    trace.details.update(first_wave=outcome.first_wave, not_needed=len(outcome.not_needed))
    if wave_history is None:
        return
    if ccfg.waves == "auto":
        share = wave_history.share
        trace.details["waves_auto"] = {
            "asked_in_waves": in_waves,
            "recent_settled": None if share is None else round(share, 3),
            "min_settled": ccfg.waves_min_settled,
        }
    if outcome.settled is not None:
        wave_history.record(outcome.settled)


def _select(
    result: RetrievalResult,
    candidates: Sequence[Candidate],
    cfg: RetrievalConfig,
    *,
    scored: bool,
    not_needed: list[Candidate],
) -> tuple[Selection, StageTrace]:
    """The select stage. Passages classification did not need to ask about (waves) are
    dropped as `not_needed`: no answer about them could have changed the result
    (`select.settled`). Unscored, or with select off, the passages stay in vector order."""
    ccfg, scfg = cfg.classify, cfg.select
    trace = StageTrace("select", mode=scfg.mode if scored or ccfg.mode != "on" else "fallback")
    result.stages.append(trace)
    t = time.perf_counter()
    if ccfg.mode == "shadow" and scored:
        trace.details["shadow"] = _shadow_selection(candidates, not_needed, scfg)
    if scfg.mode == "on" and scored and ccfg.mode == "on":
        for c in not_needed:
            c.reason = "not_needed"
        chosen: Selection = select(candidates, scfg)
        trace.details["strategy"] = scfg.strategy
    else:
        chosen = vector_order(candidates, scfg.max_passages)
        trace.details["strategy"] = "vector order"
    trace.ms = (time.perf_counter() - t) * 1e3
    return chosen, trace


def _shadow_selection(
    candidates: Sequence[Candidate], not_needed: list[Candidate], scfg: SelectConfig
) -> dict[str, Any]:
    """What `on` would have kept, on copies; the result itself stays in vector order."""
    skip = {id(c) for c in not_needed}
    copies = [copy.copy(c) for c in candidates]
    for orig, c in zip(candidates, copies, strict=True):
        if id(orig) in skip:
            c.reason = "not_needed"
    would = select(copies, scfg)
    return {
        "keep": [c.id for c in would.kept],
        "conflicts": [c.id for c in would.conflicts],
        "drop": {c.id: c.reason for c in would.dropped},
    }


async def _expand(result: RetrievalResult, chosen: Selection, expand: Expander) -> None:
    t = time.perf_counter()
    before = len(chosen.kept)
    chosen.kept = await expand(chosen.kept)
    result.stages.append(
        StageTrace(
            "expand",
            ms=(time.perf_counter() - t) * 1e3,
            details={"added": len(chosen.kept) - before},
        )
    )


def _fill_budget(
    result: RetrievalResult, chosen: Selection, budget: int | None, trace: StageTrace
) -> None:
    """Compaction's token budget over the selection; fills the result's passages."""
    t = time.perf_counter()
    kept, conflicts, over = fill_budget(chosen.kept, chosen.conflicts, budget)
    trace.ms += (time.perf_counter() - t) * 1e3
    result.passages, result.conflicts = kept, conflicts
    result.dropped = [*chosen.dropped, *over]
    result.tokens.after = sum(c.tokens for c in [*kept, *conflicts])
    trace.details.update(
        kept=len(kept) + len(conflicts),
        dropped={
            r: n
            for r in sorted({c.reason or "" for c in result.dropped})
            if (n := sum(1 for c in result.dropped if c.reason == r))
        },
        **result.tokens.as_dict(),
    )
    result.stages.append(trace)


def _decisions(candidates: Sequence[Candidate]) -> dict[str, dict[str, Any]]:
    return {
        c.id: {
            "decision": "conflict" if c.conflict else (c.reason or "keep"),
            **{k: round(v, 4) for k, v in c.scores.items()},
        }
        for c in candidates
    }


async def _gate(
    result: RetrievalResult,
    cfg: RetrievalConfig,
    client: ClefClient | None,
    unavailable: str | None,
    price: float,
) -> None:
    gcfg = cfg.gate
    trace = StageTrace("gate", mode=gcfg.mode)
    result.stages.append(trace)
    shown = [*result.passages, *result.conflicts]
    if gcfg.mode == "off":
        trace.skipped = "mode off"
        return
    if result.degraded:
        trace.skipped = "degraded: vector order, never abstains"
        return
    if not shown:
        # Nothing survived classification: the answer is known without asking.
        trace.details["would_abstain"] = True
        if gcfg.mode == "on":
            result.abstain = True
            result.reason = "no passage passed classification"
        return
    if unavailable:
        trace.skipped = unavailable
        if gcfg.mode == "on":
            result.degrade(unavailable)
        return
    assert client is not None
    t = time.perf_counter()
    try:
        p, tokens = await ask_gate(client, result.query, [c.text for c in shown])
    except ClefError as exc:
        trace.error = f"{type(exc).__name__}: {exc}"
        if gcfg.mode == "on":
            result.degrade(f"gate failed: {trace.error}")
        return
    finally:
        trace.ms = (time.perf_counter() - t) * 1e3
    trace.requests = 1
    trace.input_tokens = tokens
    trace.cost_usd = tokens * price
    trace.details.update(p=round(p, 4), answer_min=gcfg.answer_min)
    result.gate_p = p
    below = p < gcfg.answer_min
    trace.details["would_abstain"] = below
    if below and gcfg.mode == "on":
        result.abstain = True
        result.reason = (
            f"the passages do not hold what is needed to answer "
            f"(gate {p:.2f} < answer_min {gcfg.answer_min})"
        )
