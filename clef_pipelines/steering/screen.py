"""The paragraph screen: each paragraph, list item, table and quote is judged before chunking.

Two judges: Clef (one choice per paragraph giving P(boilerplate) and P(instructs_ai)) and the
offline guard (P(injection) from a small classifier on MiniLM vectors, no keys needed). Plain
code with the thresholds in `steering.screen` / `steering.guard` decides:

- P(boilerplate) >= drop_boilerplate_at: the block is cut (the others keep their offsets into
  the original, which are the parser's);
- an injection judged by `screen.judges` (either judge by default): the block is cut from its
  chunk and stored alone as a quarantined record, left out of queries unless asked for.

Every block carries both judges' probabilities, the decision they reach together
(`decision`), the one applied (`screen_action`: stages in shadow mode record but do not act)
and who decided (`decided_by`). A block whose Clef request still failed after the client's
retries is kept with `needs_rescreen`, and the run reports the failure.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    import numpy as np

from clef_pipelines.clef.wire import ChoiceAnswer
from clef_pipelines.config import ChunkingConfig
from clef_pipelines.guard.config import GuardContextConfig
from clef_pipelines.guard.context import (
    FITS_DOCUMENT,
    OFF_TOPIC_REQUEST,
    ContextVerdict,
    judge_in_context,
)
from clef_pipelines.guard.language import document_languages
from clef_pipelines.guard.prose import NO_PROSE
from clef_pipelines.parsing.models import is_screenable
from clef_pipelines.steering.packing import Subject
from clef_pipelines.steering.preask import PreaskPlan, plan_preask
from clef_pipelines.steering.questions import (
    SCREEN_ASK,
    SCREEN_BOILERPLATE,
    SCREEN_INSTRUCTS_AI,
    enrichment_asks,
)
from clef_pipelines.steering.runtime import Steering

log = logging.getLogger(__name__)

KEEP, DROP, QUARANTINE = "keep", "drop", "quarantine"


SCREEN_COLUMNS: dict[str, pl.DataType] = {
    "screened": pl.Boolean(),
    "p_boilerplate": pl.Float64(),
    "p_instructs_ai": pl.Float64(),
    "p_guard": pl.Float64(),
    # The document's language, where steering.guard.languages asked (None otherwise).
    "language": pl.Utf8(),
    "decision": pl.Utf8(),
    "screen_action": pl.Utf8(),
    "decided_by": pl.Utf8(),
    "screen_reason": pl.Utf8(),
    "needs_rescreen": pl.Boolean(),
}


@dataclass
class ScreenReport:
    blocks: int = 0
    screened: int = 0
    kept: int = 0
    dropped: int = 0
    quarantined: int = 0
    #: What the judges decided, shadow stages included (equals the actions when all are on).
    decisions: dict[str, int] = field(default_factory=dict)
    needs_rescreen: int = 0
    #: The reasons of Clef requests that failed after retries (one line each, deduplicated).
    failures: list[str] = field(default_factory=list)
    clef: str = "off"  # on | shadow | off | unavailable (no backend)
    guard: str = "off"  # on | shadow | off | unavailable: <why>
    guard_version: str | None = None
    #: Paragraphs the guard left to Clef: by their document's language (guard.languages), and
    #: under `no-prose` those with no sentence for it to judge (`InjectionGuard.judges`).
    guard_not_judged: dict[str, int] = field(default_factory=dict)
    #: The guard's decisions with the document as context (`steering.guard.context`):
    #: `fits_document` (kept although the score flags it), `off_topic_request` (quarantined).
    guard_context: dict[str, int] = field(default_factory=dict)
    judges: str = "either"
    requests: int = 0
    input_tokens: int = 0
    cached_answers: int = 0
    #: Predicted chunks whose enrichment questions rode along with the screen (answers kept
    #: in the answer cache for the enrichment), and how many of those failed to be answered.
    preasked_chunks: int = 0
    preask_failed: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _injection(flags: dict[str, bool], judges: str) -> tuple[bool, list[str]]:
    """Whether the judges at hand call it an injection, and which ones did."""
    said = [name for name, flag in flags.items() if flag]
    if not flags:
        return False, []
    if judges == "both" and len(flags) == 2:
        return all(flags.values()), said
    if judges in ("clef", "guard") and judges in flags:
        return flags[judges], [judges] if flags[judges] else []
    # "either", or the preferred judge is not at hand (Clef off: the guard judges alone).
    return bool(said), said


def _preask_plan(
    blocks: pl.DataFrame,
    screenable: list[int],
    steering: Steering,
    chunking: ChunkingConfig | None,
) -> tuple[PreaskPlan, list[Any]]:
    """What the enrichment can ask with the screen (see `steering.preask`), and its asks."""
    cfg = steering.cfg
    if (
        chunking is None
        or cfg.enrich.mode == "off"
        or cfg.screen.layout != "state_key"
        or steering.cache is None  # nowhere to keep the answers for the enrichment
    ):
        return PreaskPlan(), []
    asks = enrichment_asks(cfg.enrich, steering.taxonomy())
    names = tuple(a.name for a in asks)
    return plan_preask(blocks, screenable, chunking, names), asks


@dataclass
class _Judged:
    """What the judges said, by block index."""

    p_boiler: dict[int, float] = field(default_factory=dict)
    p_ai: dict[int, float] = field(default_factory=dict)
    #: Screenable blocks Clef could not answer about (screened again on the next run).
    failed: set[int] = field(default_factory=set)
    p_guard: dict[int, float] = field(default_factory=dict)
    language: dict[int, str] = field(default_factory=dict)
    guard_threshold: float = 1.0
    #: The guard's verdict with each block's document as context, where it was read.
    guard_context: dict[int, ContextVerdict] = field(default_factory=dict)


def screen_blocks(
    blocks: pl.DataFrame,
    steering: Steering,
    *,
    chunking: ChunkingConfig | None = None,
    on_judged: Callable[[int, int], None] | None = None,
) -> tuple[pl.DataFrame, ScreenReport]:
    """Judge every screenable block; returns the blocks with the screen columns, and a report.

    `chunking`: the collection's chunking settings; with them the chunks are predicted and
    the enrichment's questions about them are asked in the screen's requests, naming the
    paragraphs' parts instead of sending the text again (`steering.preask`). `on_judged(done,
    total)`: the offline guard's progress over the blocks it scores, a slice at a time (the
    screen is the longest stage of an ingest with the guard on)."""
    started = time.perf_counter()
    cfg = steering.cfg
    rep = ScreenReport(blocks=blocks.height, judges=cfg.screen.judges)
    n = blocks.height
    kinds = blocks["kind"].to_list() if n else []
    texts = blocks["text"].to_list() if n else []
    screenable = [i for i in range(n) if is_screenable(kinds[i], texts[i], cfg.screen.kinds)]
    rep.screened = len(screenable)
    judged = _Judged()
    _ask_clef(judged, blocks, screenable, texts, steering, chunking, rep)
    _ask_guard(judged, blocks, screenable, texts, steering, rep, on_judged)
    cols, decisions = _decide_blocks(n, screenable, judged, steering)
    out = blocks.with_columns(
        [pl.Series(name, cols[name], dtype=dtype) for name, dtype in SCREEN_COLUMNS.items()]
    )
    actions = out["screen_action"].to_list()
    rep.kept = actions.count(KEEP)
    rep.dropped = actions.count(DROP)
    rep.quarantined = actions.count(QUARANTINE)
    rep.decisions = decisions
    rep.needs_rescreen = len(judged.failed)
    rep.seconds = round(time.perf_counter() - started, 3)
    return out, rep


def _ask_clef(
    judged: _Judged,
    blocks: pl.DataFrame,
    screenable: list[int],
    texts: list[str],
    steering: Steering,
    chunking: ChunkingConfig | None,
    rep: ScreenReport,
) -> None:
    """Clef's screen question about each screenable block (with the enrichment's questions
    about the predicted chunks asked along)."""
    cfg = steering.cfg
    if cfg.screen.mode == "off":
        rep.clef = "off"
        return
    if not steering.clef_enabled:
        rep.clef = "unavailable"
        return
    rep.clef = cfg.screen.mode
    plan, more_asks = _preask_plan(blocks, screenable, steering, chunking)
    subjects: list[Subject] = []
    for i in screenable:
        subjects.append(
            Subject(
                str(i),
                texts[i],
                (SCREEN_ASK.name,) if more_asks else None,
                plan.parts.get(i),
                plan.bundle.get(i),
            )
        )
        subjects.extend(plan.chunks_after.get(i, ()))
    asked = steering.ask(
        subjects,
        [SCREEN_ASK, *more_asks],
        layout=cfg.screen.layout,
        max_subjects_per_request=cfg.screen.max_subjects_per_request,
    )
    rep.preasked_chunks = len(plan.chunks)
    wanted = {a.name for a in more_asks}
    rep.preask_failed = sum(1 for c in plan.chunks if set(asked.answers.get(c.key, {})) < wanted)
    rep.requests, rep.input_tokens, rep.cached_answers = (
        asked.requests,
        asked.input_tokens,
        asked.cached,
    )
    for i in screenable:
        answer = asked.answers.get(str(i), {}).get(SCREEN_ASK.name)
        if isinstance(answer, ChoiceAnswer):
            judged.p_boiler[i] = float(answer.probabilities.get(SCREEN_BOILERPLATE, 0.0))
            judged.p_ai[i] = float(answer.probabilities.get(SCREEN_INSTRUCTS_AI, 0.0))
        else:
            judged.failed.add(i)
    # The screen's failures only: a chunk asked along that failed is asked again by the
    # enrichment (counted in `preask_failed`), its paragraph is not re-screened for it.
    rep.failures = sorted({r for k, r in asked.failed.items() if not k.startswith("chunk:")})


def _ask_guard(
    judged: _Judged,
    blocks: pl.DataFrame,
    screenable: list[int],
    texts: list[str],
    steering: Steering,
    rep: ScreenReport,
    on_judged: Callable[[int, int], None] | None = None,
) -> None:
    """The offline guard's score of each screenable block it judges."""
    cfg = steering.cfg
    if cfg.guard.mode == "off":
        rep.guard = "off"
        return
    guard = steering.guard()
    if guard is None:
        rep.guard = f"unavailable: {steering.guard_error}"
        return
    rep.guard = cfg.guard.mode
    rep.guard_version = str(getattr(guard, "version", "") or "") or None
    judged.guard_threshold = steering.guard_threshold(guard)
    asked = screenable
    if cfg.guard.languages:
        asked, judged.language = _language_gate(blocks, screenable, texts, cfg.guard.languages, rep)
    judges = getattr(guard, "judges", None)
    if judges is not None:
        # Each text read once: `judges` may decode it (`deobfuscate`) when it has no prose.
        prose = [judges(texts[i]) for i in asked]
        if not all(prose):
            rep.guard_not_judged[NO_PROSE] = prose.count(False)
            asked = [i for i, has in zip(asked, prose, strict=True) if has]
    _warn_unjudged(rep)
    scores = _guard_scores_in_slices(steering, [texts[i] for i in asked], on_judged)
    if scores is not None:
        judged.p_guard = {i: float(s) for i, s in zip(asked, scores, strict=True)}
    embed = getattr(guard, "plain_vectors", None)
    if cfg.guard.context.enabled and embed is not None and judged.p_guard:
        _read_context(judged, blocks, screenable, texts, cfg.guard.context, embed, rep)


#: Texts the guard scores between two progress reports: 20 s of MiniLM on 2 loaded cores,
#: and enough windows per pass that slicing costs little (the run log beats every 20 s).
GUARD_SLICE = 512


def _guard_scores_in_slices(
    steering: Steering, texts: list[str], on_judged: Callable[[int, int], None] | None
) -> np.ndarray | None:
    """`steering.guard_scores(texts)`, a slice at a time when someone follows the progress
    (each text's score does not depend on the others)."""
    if on_judged is None or len(texts) <= GUARD_SLICE:
        scores = steering.guard_scores(texts)
        if on_judged is not None:
            on_judged(len(texts), len(texts))
        return scores
    import numpy as np

    parts: list[np.ndarray] = []
    for start in range(0, len(texts), GUARD_SLICE):
        part = steering.guard_scores(texts[start : start + GUARD_SLICE])
        if part is None:
            return None
        parts.append(part)
        on_judged(min(start + GUARD_SLICE, len(texts)), len(texts))
    return np.concatenate(parts)


def _read_context(
    judged: _Judged,
    blocks: pl.DataFrame,
    screenable: list[int],
    texts: list[str],
    context: GuardContextConfig,
    embed: Callable[[Sequence[str]], Any],
    rep: ScreenReport,
) -> None:
    """The guard's verdicts with each block's document as context (`guard.context`): the
    screenable blocks of a document, in reading order, are each other's neighbours."""
    doc_ids = blocks["doc_id"].to_list()
    verdicts = judge_in_context(
        [str(doc_ids[i]) for i in screenable],
        [texts[i] for i in screenable],
        [judged.p_guard.get(i) for i in screenable],
        judged.guard_threshold,
        context,
        embed,
    )
    judged.guard_context = {
        i: v for i, v in zip(screenable, verdicts, strict=True) if i in judged.p_guard
    }
    counted = Counter(v.reason for v in verdicts if v.reason in (FITS_DOCUMENT, OFF_TOPIC_REQUEST))
    rep.guard_context = dict(sorted(counted.items()))


def _decide_blocks(
    n: int, screenable: list[int], judged: _Judged, steering: Steering
) -> tuple[dict[str, list[Any]], dict[str, int]]:
    """The screen columns of every block, and how many blocks got each decision."""
    cols: dict[str, list[Any]] = {name: [None] * n for name in SCREEN_COLUMNS}
    screenable_set = set(screenable)
    decisions: dict[str, int] = {}
    for i in range(n):
        cols["screened"][i] = i in screenable_set
        cols["needs_rescreen"][i] = i in judged.failed
        cols["p_boilerplate"][i] = judged.p_boiler.get(i)
        cols["p_instructs_ai"][i] = judged.p_ai.get(i)
        cols["p_guard"][i] = judged.p_guard.get(i)
        cols["language"][i] = judged.language.get(i)
        if i not in screenable_set:
            cols["decision"][i] = cols["screen_action"][i] = KEEP
            cols["decided_by"][i] = ""
            continue
        decision, action, by, reason = _decide_block(i, judged, steering)
        cols["decision"][i] = decision
        cols["screen_action"][i] = action
        cols["decided_by"][i] = by
        cols["screen_reason"][i] = reason
        decisions[decision] = decisions.get(decision, 0) + 1
    return cols, decisions


def _decide_block(i: int, judged: _Judged, steering: Steering) -> tuple[str, str, str, str | None]:
    """(decision, action, decided_by, reason) of one screenable block: the decision weighs
    every judge that ran, the action only those that act (mode `on`)."""
    cfg = steering.cfg
    clef_on = cfg.screen.mode == "on"
    p_ai, p_guard, p_boiler = judged.p_ai, judged.p_guard, judged.p_boiler
    ran: dict[str, bool] = {}
    acting: dict[str, bool] = {}
    if i in p_ai:
        ran["clef"] = p_ai[i] >= cfg.screen.quarantine_instructs_ai_at
        if clef_on:
            acting["clef"] = ran["clef"]
    verdict = judged.guard_context.get(i)
    if i in p_guard:
        ran["guard"] = (
            verdict.quarantine if verdict is not None else p_guard[i] >= judged.guard_threshold
        )
        if cfg.guard.mode == "on":
            acting["guard"] = ran["guard"]
    boiler = i in p_boiler and p_boiler[i] >= cfg.screen.drop_boilerplate_at
    decision, by, reason = _decide(ran, boiler, cfg.screen.judges, p_ai.get(i), p_boiler.get(i))
    action, _, _ = _decide(acting, boiler and clef_on, cfg.screen.judges, None, None)
    if verdict is not None and verdict.reason in (FITS_DOCUMENT, OFF_TOPIC_REQUEST):
        # Said where the guard's context decided: why it quarantined a request that scored
        # low, or kept a block that scored high.
        if decision == QUARANTINE and by == "guard" and verdict.reason == OFF_TOPIC_REQUEST:
            reason = OFF_TOPIC_REQUEST
        elif decision != QUARANTINE and verdict.reason == FITS_DOCUMENT:
            reason = FITS_DOCUMENT
    return decision, action, by, reason


def _language_gate(
    blocks: pl.DataFrame,
    screenable: list[int],
    texts: list[str],
    wanted: list[str],
    rep: ScreenReport,
) -> tuple[list[int], dict[int, str]]:
    """The blocks the guard judges (those of documents not surely in another language,
    `steering.language`) and each screenable block's document language; the others are
    counted in `rep.guard_not_judged`, and a warning says when no judge acts on them."""
    doc_ids = blocks["doc_id"].to_list()
    langs = document_languages(
        [doc_ids[i] for i in screenable], [texts[i] for i in screenable], wanted
    )
    language = {i: langs[doc_ids[i]].language for i in screenable}
    judged = [i for i in screenable if langs[doc_ids[i]].judged]
    left = Counter(language[i] for i in screenable if not langs[doc_ids[i]].judged)
    rep.guard_not_judged = dict(sorted(left.items()))
    return judged, language


def _warn_unjudged(rep: ScreenReport) -> None:
    """Blocks the guard left to Clef, said once when Clef is not on to judge them: they are
    kept, and counted in `guard_not_judged` (by language, or `no-prose`) and the run's
    guard-coverage check."""
    if rep.guard_not_judged and rep.clef != "on":
        log.warning(
            "the guard left %d paragraphs to Clef (%s), which is %s: they are kept unjudged "
            "(steering.guard.languages; no-prose: code, settings or names with no sentence)",
            sum(rep.guard_not_judged.values()),
            ", ".join(f"{k} {v}" for k, v in sorted(rep.guard_not_judged.items())),
            rep.clef,
        )


def _decide(
    flags: dict[str, bool],
    boilerplate: bool,
    judges: str,
    p_ai: float | None,
    p_boiler: float | None,
) -> tuple[str, str, str | None]:
    """(decision, decided_by, reason). Quarantine wins over drop: an instruction planted in
    boilerplate is kept, alone and out of queries, so a reviewer can see it."""
    injection, said = _injection(flags, judges)
    if injection:
        return QUARANTINE, "+".join(sorted(said)), "instructs_ai"
    if boilerplate:
        return DROP, "clef", "boilerplate"
    return KEEP, "+".join(sorted(flags)) if flags else "", None
