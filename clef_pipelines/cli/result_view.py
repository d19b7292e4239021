"""The human view of a retrieval result (`query`, `ask -v`, `compact`), without typer."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from clef_pipelines.cli.base import console, lit, terminal_safe

if TYPE_CHECKING:
    from clef_pipelines.retrieval.result import RetrievalResult
    from clef_pipelines.steering.candidates import Candidate


def _short(text: str, n: int = 500) -> str:
    body = " ".join(text.split())
    return body[:n] + ("..." if len(body) > n else "")


def _scores(scores: dict[str, float]) -> str:
    short = {
        "is_relevant": "rel",
        "contains_answer_evidence": "evid",
        "contradicts_query_premise": "contra",
        "instructs_ai": "ai",
    }
    return " ".join(f"{short.get(k, k)} {v:.2f}" for k, v in scores.items())


def why(c: Candidate) -> str:
    """A dropped passage's reason, with who decided where a judge did (`instructs_ai (guard)`)."""
    return f"{c.reason} ({c.decided_by})" if c.decided_by else str(c.reason)


def print_result(result: RetrievalResult, *, verbose: bool, header: bool) -> None:
    """The human view of one result; `verbose` adds what was dropped and the trace."""
    if header:
        console.print(f"\n[bold]Q: {lit(result.query)}[/]")
    if result.degraded:
        reasons = lit("; ".join(result.degraded_reasons))
        console.print(f"[yellow]degraded (vector order):[/] {reasons}")
    if result.abstain:
        console.print(f"[yellow]abstains:[/] {lit(result.reason)}")
    if result.filter_used:
        console.print(f"filter: {lit(json.dumps(result.filter_used))}")
    numbered = result.numbered
    if not numbered:
        console.print("no passages")
    for n, c in numbered:
        tag = "[red]conflict[/] " if c.conflict else ""
        console.print(
            f"[bold]\\[{n}][/] {tag}{c.vector_score:.3f} {_scores(c.scores)}  "
            f"[cyan]{lit(c.citation)}[/]"
        )
        console.print(f"    {terminal_safe(_short(c.text), one_line=True)}", markup=False)
    if not verbose:
        return
    if result.dropped:
        console.print(f"[bold]dropped ({len(result.dropped)}):[/]")
        for c in sorted(result.dropped, key=lambda c: c.rank):
            console.print(
                f"  [dim]#{c.rank}[/] [magenta]{lit(why(c))}[/] {_scores(c.scores)}  "
                f"{lit(c.citation)}"
            )
            console.print(
                f"      {terminal_safe(_short(c.text, 160), one_line=True)}", markup=False
            )
    t = result.tokens
    console.print(
        f"[bold]tokens:[/] {t.before} -> {t.after} (saved {t.saved_fraction:.0%}"
        f"{f', budget {t.budget}' if t.budget else ''})"
    )
    gate = "" if result.gate_p is None else f", gate p {result.gate_p:.2f}"
    console.print(
        f"[bold]trace:[/] {result.total_ms:.0f} ms, {result.clef_requests} Clef request(s), "
        f"{result.clef_input_tokens} input tokens, ${result.cost_usd:.6f}{gate}"
    )
    for s in result.stages:
        extra = f" skipped: {s.skipped}" if s.skipped else ""
        extra += f" [red]error: {lit(s.error)}[/]" if s.error else ""
        console.print(
            f"  {s.name:8} {s.mode:8} {s.ms:8.1f} ms  {s.requests} req  {s.input_tokens} tok{extra}"
        )
