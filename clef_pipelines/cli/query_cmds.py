"""`query`, `ask`, `compact`: Clef-steered retrieval, cited answers, and compaction.

Heavy modules (the store, the embedder, the Clef client) are imported inside the commands,
so `clef-pipelines --help` and every other command start fast.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

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
from clef_pipelines.cli.compact_cmd import command_errors as _errors
from clef_pipelines.cli.compact_cmd import run_compact_command
from clef_pipelines.cli.result_view import print_result, why  # noqa: F401 - re-exported

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
    run_compact_command(
        query_text, docs, input_file, budget, gate, verbose, as_json, config, fail=fail
    )
