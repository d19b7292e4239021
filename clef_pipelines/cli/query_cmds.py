"""`query`, `ask`, `compact`: Clef-steered retrieval, cited answers, and compaction.

Heavy modules (the store, the embedder, the Clef client) are imported inside the commands,
so `clef-pipelines --help` and every other command start fast.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from clef_pipelines.cli.app import app
from clef_pipelines.cli.common import (
    ConfigOption,
    collection_arg,
    console,
    fail,
    lit,
    load_cli_settings,
    require_config,
    terminal_safe,
)

if TYPE_CHECKING:
    from clef_pipelines.retrieval.result import RetrievalResult
    from clef_pipelines.steering.candidates import Candidate

_WHERE_HELP = 'Filter as JSON, e.g. {"source": "docs"}; skips routing.'


def _parse_where(where: str | None) -> dict[str, Any] | None:
    if not where:
        return None
    try:
        flt = json.loads(where)
    except json.JSONDecodeError as exc:
        fail(f"--where is not valid JSON: {exc}")
    if not isinstance(flt, dict):
        fail("--where must be a JSON object")
    return flt


class RecallModeChoice(StrEnum):
    vector = "vector"
    text = "text"
    hybrid = "hybrid"


_ModeOption = Annotated[
    RecallModeChoice | None,
    typer.Option(
        "--mode", help="Recall by vector, full text or both fused (default: retrieval.mode)."
    ),
]


def _overrides(  # type: ignore[no-untyped-def]
    settings: Any,
    top_k: int | None,
    budget: int | None,
    max_passages: int | None,
    mode: RecallModeChoice | None = None,
):
    cfg = settings.retrieval.model_copy(deep=True)
    if mode is not None:
        cfg.mode = mode.value
    if top_k is not None:
        cfg.top_k = top_k
    if budget is not None:
        cfg.compact.token_budget = budget
    if max_passages is not None:
        cfg.select.max_passages = max_passages
    return cfg


def _errors() -> tuple[type[BaseException], ...]:
    from clef_pipelines.clef.errors import ClefError
    from clef_pipelines.embedding.base import EmbedderError
    from clef_pipelines.retrieval.answer import AnswerError
    from clef_pipelines.stores import StoreError

    return (StoreError, ValueError, ClefError, AnswerError, EmbedderError)


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


def _why(c: Candidate) -> str:
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
                f"  [dim]#{c.rank}[/] [magenta]{lit(_why(c))}[/] {_scores(c.scores)}  "
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


@app.command()
def query(
    texts: Annotated[list[str], typer.Argument(help="One or more questions.")],
    collection: Annotated[str | None, typer.Option(help="Collection to search.")] = None,
    top_k: Annotated[
        int | None, typer.Option("--top-k", min=1, max=1000, help="Candidates recalled.")
    ] = None,
    max_passages: Annotated[
        int | None, typer.Option("--max-passages", min=1, max=200, help="Passages kept.")
    ] = None,
    budget: Annotated[
        int | None, typer.Option("--budget", min=1, help="Token budget for the kept passages.")
    ] = None,
    where: Annotated[str | None, typer.Option(help=_WHERE_HELP)] = None,
    mode: _ModeOption = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show what was dropped and why, and the trace.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help='A JSON list: one {"query", "passages", ...} a query.')
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Clef-steered retrieval: the passages that answer each question, with citations."""
    flt = _parse_where(where)
    require_config(config, "`query` searches the collection your config's ingest filled")
    settings = load_cli_settings(config)
    collection = collection_arg(collection)
    cfg = _overrides(settings, top_k, budget, max_passages, mode)
    from clef_pipelines.retrieval.fast_start import quick_store_import
    from clef_pipelines.retrieval.retriever import Retriever

    results = []
    try:
        with quick_store_import():  # no pandas; LanceDB's unused models built lazily
            retriever = Retriever(settings, collection=collection, config=cfg)
        with retriever:
            for text in texts:
                results.append(retriever.retrieve(text, where=flt))
    except _errors() as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps([r.to_dict() for r in results], indent=2, default=str))
        return
    for r in results:
        print_result(r, verbose=verbose, header=len(texts) > 1)


@app.command()
def ask(
    text: Annotated[str, typer.Argument(help="The question.")],
    collection: Annotated[str | None, typer.Option(help="Collection to search.")] = None,
    top_k: Annotated[int | None, typer.Option("--top-k", min=1, max=1000)] = None,
    budget: Annotated[int | None, typer.Option("--budget", min=1)] = None,
    where: Annotated[str | None, typer.Option(help=_WHERE_HELP)] = None,
    mode: _ModeOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    config: ConfigOption = None,
) -> None:
    """A cited answer from the configured LLM (retrieval.answer), or "not in the documents"
    without calling it when the passages do not hold the answer."""
    flt = _parse_where(where)
    require_config(config, "`ask` answers from the collection your config's ingest filled")
    settings = load_cli_settings(config)
    collection = collection_arg(collection)
    cfg = _overrides(settings, top_k, budget, None, mode)
    from clef_pipelines.retrieval.fast_start import quick_store_import
    from clef_pipelines.retrieval.retriever import Retriever

    try:
        with quick_store_import():  # no pandas; LanceDB's unused models built lazily
            retriever = Retriever(settings, collection=collection, config=cfg)
        with retriever:
            reply = retriever.answer(text, where=flt)
    except _errors() as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(reply.to_dict(), indent=2, default=str))
        return
    console.print(terminal_safe(reply.text), markup=False)
    if reply.citations:
        console.print()
        for c in reply.citations:
            console.print(f"[bold]\\[{c['n']}][/] [cyan]{lit(c['citation'])}[/]")
    elif not reply.llm_called:
        reason = lit(reply.retrieval.reason or "abstained")
        console.print(f"[dim]({reason}; no LLM was called)[/]")
    if verbose:
        print_result(reply.retrieval, verbose=True, header=True)


def _read_passages(docs: list[str] | None, input_file: Path | None) -> list[Any]:
    out: list[Any] = list(docs or [])
    if input_file is None:
        return out
    raw = sys.stdin.read() if str(input_file) == "-" else None
    if raw is None:
        try:
            raw = input_file.read_text(encoding="utf-8")
        except OSError as exc:
            fail(f"cannot read {input_file}: {exc}")
    name = "stdin" if str(input_file) == "-" else str(input_file)
    stripped = raw.lstrip()
    if stripped.startswith("["):
        try:
            items = json.loads(raw)
        except json.JSONDecodeError as exc:
            fail(f"{name}: not valid JSON: {exc}")
        out.extend(items)
        return out
    for n, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            fail(f"{name}:{n}: not valid JSON ({exc}); give a JSON list or JSONL of passages")
    return out


@app.command()
def compact(
    query_text: Annotated[str, typer.Option("--query", "-q", help="The question.")],
    docs: Annotated[
        list[str] | None, typer.Option("--doc", "-d", help="A passage (repeat for several).")
    ] = None,
    input_file: Annotated[
        Path | None,
        typer.Option(
            "--input", "-i", help="Passages as a JSON list or JSONL (strings or {text, id}); -"
        ),
    ] = None,
    budget: Annotated[int | None, typer.Option("--budget", min=1, help="Token budget.")] = None,
    gate: Annotated[bool, typer.Option(help="Also ask the answer gate.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    config: ConfigOption = None,
) -> None:
    """Compact passages for a question without a store: drop what does not help, keep the
    best within the budget, say why each dropped passage went."""
    passages = _read_passages(docs, input_file)
    if not passages:
        fail("no passages: give --doc TEXT (repeatable) or --input FILE")
    settings = load_cli_settings(config)
    from clef_pipelines.retrieval.fast_start import quick_clef_import

    try:
        with quick_clef_import():
            from clef_pipelines.retrieval.compaction import compact as run_compact

            result = run_compact(
                query_text,
                passages,
                token_budget=budget,
                gate=gate,
                config=settings.retrieval,
                clef=settings.clef,
                data_dir=str(settings.data_path),
                guard=settings.steering.guard,
                base_dir=settings.base_dir,
            )
    except _errors() as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
        return
    print_result(result, verbose=verbose, header=False)
    if not verbose:
        t = result.tokens
        console.print(
            f"tokens {t.before} -> {t.after} (saved {t.saved_fraction:.0%}); "
            f"dropped {len(result.dropped)}: "
            + ", ".join(
                f"#{c.rank} {lit(_why(c))}" for c in sorted(result.dropped, key=lambda c: c.rank)
            )
        )
