"""`reenrich`: apply a changed taxonomy or question set to a stored collection."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from clef_pipelines.cli.app import app
from clef_pipelines.cli.common import ConfigOption, console, fail, lit, load_cli_settings


@app.command()
def reenrich(
    collection: Annotated[
        str | None, typer.Option(help="Collection (default: the config's).")
    ] = None,
    source: Annotated[str | None, typer.Option(help="Only this source's records.")] = None,
    everything: Annotated[
        bool, typer.Option("--all", help="Ask about every record, not only out-of-date ones.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    config: ConfigOption = None,
) -> None:
    """Re-ask the enrichment questions (steering.enrich) about stored chunks whose taxonomy or
    questions changed, without re-parsing or re-embedding. New fields filter with --where."""
    from clef_pipelines.clef.client import SyncClefClient
    from clef_pipelines.steering.reenrich import reenrich_collection
    from clef_pipelines.steering.runtime import Steering
    from clef_pipelines.stores import StoreError, open_store

    settings = load_cli_settings(config)
    name = collection or settings.collection
    store = open_store(settings.store, settings.data_path)
    clef = SyncClefClient(settings.clef, data_dir=settings.data_path)
    steering = Steering(
        settings.steering, clef=clef, data_dir=settings.data_path, base_dir=settings.base_dir
    )
    try:
        report = reenrich_collection(store, name, steering, source=source, everything=everything)
    except (StoreError, ValueError) as exc:
        fail(str(exc))
    finally:
        steering.close()
        clef.close()
        store.close()
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
        return
    console.print(
        f"{name}: {report.asked} of {report.records} records asked, {report.updated} updated, "
        f"{report.quarantined} quarantined, {report.would_drop} would drop (ingest --force "
        f"drops them), {report.needs_reenrich} still need asking; {report.requests} requests, "
        f"{report.cached_answers} answers from cache"
    )
    for failure in report.failures:
        console.print(f"[red]failed:[/] {lit(failure)}")
    if report.needs_reenrich:
        raise typer.Exit(1)
