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

from clef_pipelines.clef.client import ClefClient
from clef_pipelines.clef.errors import ClefError
from clef_pipelines.clef.usage import price_per_token
from clef_pipelines.retrieval.config import RetrievalConfig
from clef_pipelines.retrieval.result import RetrievalResult, StageTrace
from clef_pipelines.steering.candidates import Candidate
from clef_pipelines.steering.classify import WaveHistory, classify
from clef_pipelines.steering.compact import TokenReport, drop_before_asking, fill_budget
from clef_pipelines.steering.gate import ask_gate
from clef_pipelines.steering.select import (
    Selection,
    select,
    settled,
    vector_order,
    waves_cannot_settle,
)

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
    `wave_history`: a warm caller's record for `classify.waves: auto` (None: waves on)."""
    query = result.query
    price = clef_price(client)
    unavailable = clef_unavailable(client)
    budget = cfg.compact.token_budget if cfg.compact.mode == "on" else None
    result.tokens = TokenReport(before=sum(c.tokens for c in candidates), after=0, budget=budget)

    # Compaction's checks that need no Clef: their passages are not asked about.
    pre = StageTrace("compact", mode=cfg.compact.mode)
    if cfg.compact.mode == "on":
        t = time.perf_counter()
        n = drop_before_asking(candidates, dedupe=cfg.compact.dedupe, token_budget=budget)
        pre.ms = (time.perf_counter() - t) * 1e3
        pre.details["dropped_before_asking"] = n

    # classify
    ccfg = cfg.classify
    trace = StageTrace("classify", mode=ccfg.mode)
    result.stages.append(trace)
    scored = False
    not_needed: list[Candidate] = []
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
        scfg = cfg.select
        no_waves = waves_cannot_settle(scfg) if ccfg.waves else "classify.waves is off"
        in_waves = True
        if ccfg.waves == "auto" and wave_history is not None and not no_waves:
            in_waves = wave_history.worth_it(ccfg.waves_min_settled)
        try:
            outcome = await classify(
                client,
                query,
                candidates,
                ask_instructs_ai=ask_instructs_ai,
                layout=ccfg.layout,
                passages_per_request=ccfg.passages_per_request if ccfg.packed else 1,
                shared_wording=ccfg.shared_wording,
                settled=None if no_waves else lambda done, rest: settled(done, rest, scfg),
                first_wave=ccfg.first_wave,
                min_first_wave=scfg.max_passages,
                ask_in_waves=in_waves,
            )
        except ClefError as exc:  # e.g. a passage too long for any request
            trace.error = f"{type(exc).__name__}: {exc}"
            if ccfg.mode == "on":
                result.degrade(f"classify failed: {trace.error}")
        else:
            trace.ms = outcome.ms
            trace.requests = outcome.requests
            trace.input_tokens = outcome.input_tokens
            trace.cost_usd = outcome.input_tokens * price
            not_needed = outcome.not_needed
            trace.details.update(
                passages=outcome.asked,
                questions=outcome.questions,
                instructs_ai_asked=ask_instructs_ai,
                waves=outcome.waves,
            )
            if no_waves:
                trace.details["waves_off"] = no_waves
            else:
                trace.details.update(first_wave=outcome.first_wave, not_needed=len(not_needed))
                if wave_history is not None and ccfg.waves == "auto":
                    share = wave_history.share
                    trace.details["waves_auto"] = {
                        "asked_in_waves": in_waves,
                        "recent_settled": None if share is None else round(share, 3),
                        "min_settled": ccfg.waves_min_settled,
                    }
                if wave_history is not None and outcome.settled is not None:
                    wave_history.record(outcome.settled)
            if outcome.failed:
                first = next(iter(outcome.failed.values()))
                trace.error = f"{len(outcome.failed)} passage(s) not scored: {first}"
                if ccfg.mode == "on":
                    result.degrade(f"classify failed: {first}")
            else:
                scored = True

    # select. Passages classification did not need to ask about (waves) are dropped as
    # `not_needed`: no answer about them could have changed the result (`select.settled`).
    scfg = cfg.select
    strace = StageTrace("select", mode=scfg.mode if scored or ccfg.mode != "on" else "fallback")
    result.stages.append(strace)
    t = time.perf_counter()
    if ccfg.mode == "shadow" and scored:
        # What `on` would have kept, on copies; the result itself stays in vector order.
        skip = {id(c) for c in not_needed}
        copies = [copy.copy(c) for c in candidates]
        for orig, c in zip(candidates, copies, strict=True):
            if id(orig) in skip:
                c.reason = "not_needed"
        would = select(copies, scfg)
        strace.details["shadow"] = {
            "keep": [c.id for c in would.kept],
            "conflicts": [c.id for c in would.conflicts],
            "drop": {c.id: c.reason for c in would.dropped},
        }
    if scfg.mode == "on" and scored and ccfg.mode == "on":
        for c in not_needed:
            c.reason = "not_needed"
        chosen: Selection = select(candidates, scfg)
        strace.details["strategy"] = scfg.strategy
    else:
        chosen = vector_order(candidates, scfg.max_passages)
        strace.details["strategy"] = "vector order"
    strace.ms = (time.perf_counter() - t) * 1e3

    if expand is not None and chosen.kept:
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

    # compact: the token budget
    t = time.perf_counter()
    kept, conflicts, over = fill_budget(chosen.kept, chosen.conflicts, budget)
    pre.ms += (time.perf_counter() - t) * 1e3
    result.passages, result.conflicts = kept, conflicts
    result.dropped = [*chosen.dropped, *over]
    result.tokens.after = sum(c.tokens for c in [*kept, *conflicts])
    pre.details.update(
        kept=len(kept) + len(conflicts),
        dropped={
            r: n
            for r in sorted({c.reason or "" for c in result.dropped})
            if (n := sum(1 for c in result.dropped if c.reason == r))
        },
        **result.tokens.as_dict(),
    )
    result.stages.append(pre)
    # Every passage's fate with the probabilities behind it, in one place.
    strace.details["decisions"] = {
        c.id: {
            "decision": "conflict" if c.conflict else (c.reason or "keep"),
            **{k: round(v, 4) for k, v in c.scores.items()},
        }
        for c in candidates
    }

    # gate
    if run_gate:
        await _gate(result, cfg, client, unavailable, price)
    return result


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
