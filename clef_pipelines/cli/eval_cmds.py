"""`eval`: benchmark a labelled dataset through the ingestion and evaluation jobs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from clef_pipelines.cli.app import app
from clef_pipelines.cli.common import ConfigOption, console, fail, lit, load_cli_settings
from clef_pipelines.config import ConfigError, Settings, apply_overrides
from clef_pipelines.evals.config import EvalDatasetConfig


def dataset_name(spec: str) -> str:
    """A partition key from the dataset's path: a folder's name, or `<folder>-<file stem>`."""
    path = Path(spec.partition(":")[2].rstrip("/"))
    stem = path.name if not path.suffix else f"{path.parent.name}-{path.stem}"
    return re.sub(r"[^A-Za-z0-9_-]+", "-", stem).strip("-")[:40] or "dataset"


def eval_overrides(
    settings: Settings, dataset: EvalDatasetConfig, **changes: Any
) -> dict[str, Any]:
    """Overrides that add (or replace) the dataset in `evals.datasets` and apply option values."""
    evals = settings.evals.model_dump(mode="json")
    evals["datasets"] = [d for d in evals["datasets"] if d["name"] != dataset.name]
    evals["datasets"].append(dataset.model_dump(mode="json"))
    evals.update({k: v for k, v in changes.items() if v is not None})
    return {"evals": evals}


@app.command("eval")
def eval_command(
    dataset: Annotated[
        str, typer.Argument(help="beir:DIR, squad:FILE, jsonl:PATH or injections:FILE.")
    ],
    split: Annotated[str, typer.Option(help="Qrels split of a BEIR directory.")] = "train",
    limit: Annotated[int | None, typer.Option(help="Evaluate the first N queries.")] = None,
    top_k: Annotated[int | None, typer.Option(help="Candidates per query.")] = None,
    name: Annotated[str | None, typer.Option(help="Partition key (default from the path).")] = None,
    host: Annotated[
        str | None, typer.Option(help="injections: squad:FILE whose paragraphs get planted text.")
    ] = None,
    system: Annotated[
        list[str] | None, typer.Option(help="Systems to score (default all registered).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    config: ConfigOption = None,
) -> None:
    """Ingest the dataset's documents with the normal graph, then run `eval_job` on it."""
    from clef_pipelines.jobs.launch import run_evaluation

    settings = load_cli_settings(config)
    try:
        cfg = EvalDatasetConfig(
            name=name or dataset_name(dataset), spec=dataset, split=split, limit=limit, host=host
        )
        overrides = eval_overrides(settings, cfg, top_k=top_k, systems=system)
        settings = apply_overrides(settings, overrides)
    except (ConfigError, ValueError) as exc:
        fail(str(exc))
    try:
        result = run_evaluation(settings, cfg.name)
    except (ConfigError, ValueError) as exc:
        fail(str(exc))
    if not result.success:
        fail(f"evaluation of {cfg.name} failed (run {result.run_id}): {result.error}", code=1)
    document = json.loads(Path(str(result.eval_report_json)).read_text(encoding="utf-8"))
    document["run_id"] = result.run_id
    if as_json:
        console.print_json(json.dumps(document))
        return
    _print(document)


def _print(document: dict[str, Any]) -> None:
    console.print(
        f"[bold]{lit(document['dataset'])}[/] ({lit(document['kind'])}, "
        f"split {lit(document['split'])}): {document['queries']} queries, "
        f"{lit(document.get('documents', '?'))} documents; Clef: {lit(document['clef_label'])}"
    )
    systems = document.get("systems") or {}
    metrics: list[str] = []
    for values in systems.values():
        metrics += [m for m in values if m not in metrics]
    # Metrics down, systems across: stays readable with many metrics.
    from rich.table import Table

    table = Table("metric", *(lit(s) for s in systems))
    for metric in metrics:
        table.add_row(
            lit(metric), *(f"{v[metric]:.4g}" if metric in v else "–" for v in systems.values())
        )
    console.print(table)
    for system, reason in (document.get("unavailable") or {}).items():
        console.print(f"{lit(system)}: not available: {lit(reason)}")
    for row in (document.get("injections") or {}).get("detectors", []):
        if row.get("available"):
            console.print(
                f"{lit(row['name'])}: recall {row['recall']:.3f}, "
                f"false quarantine {row['false_quarantine']:.3f} on {row['texts']} texts"
            )
        else:
            console.print(f"{lit(row['name'])}: not available: {lit(row['reason'])}")
