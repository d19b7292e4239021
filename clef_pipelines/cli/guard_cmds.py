"""`guard`: what the offline injection guard makes of files or texts, without ingesting them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from clef_pipelines.cli.app import app
from clef_pipelines.cli.common import (
    ConfigOption,
    console,
    fail,
    lit,
    load_cli_settings,
    shown,
)

#: The deciding window is shown up to this many characters.
_SHOWN = 160

if TYPE_CHECKING:
    from clef_pipelines.guard.check import GuardCheck, GuardFinding


@app.command("guard")
def guard_command(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Files, folders or JSONL files to judge, read as ingestion reads them."
        ),
    ] = None,
    text: Annotated[
        list[str] | None, typer.Option("--text", "-t", help="A text judged as one paragraph.")
    ] = None,
    quarantined: Annotated[
        bool,
        typer.Option(
            "--quarantined",
            help="Judge the collection's quarantined records again, beside how ingest decided.",
        ),
    ] = False,
    collection: Annotated[
        str | None, typer.Option(help="With --quarantined: the collection (default: config's).")
    ] = None,
    source: Annotated[str | None, typer.Option(help="With --quarantined: one source.")] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="List every judged block, not only quarantined ones.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    config: ConfigOption = None,
) -> None:
    """Judge files' screenable blocks (or --text, or a collection's --quarantined records)
    with the configured offline guard and threshold, and show for each quarantined one its
    P(injection) and the window that decided it. Exits 1 when something would be
    quarantined, 2 on an unreadable file."""
    from clef_pipelines.guard.check import (
        GuardInput,
        check_texts,
        quarantined_records,
        records_in_their_documents,
        screenable_blocks,
    )
    from clef_pipelines.guard.loading import GuardUnavailable, configured_guard
    from clef_pipelines.stores import StoreError, open_store

    if not paths and not text and not quarantined:
        fail("give files to judge, --text, or --quarantined")
    if (collection or source) and not quarantined:
        fail("--collection and --source choose the records of --quarantined; add it")
    settings = load_cli_settings(config)
    try:
        guard, threshold = configured_guard(settings.steering.guard, settings.base_dir)
    except GuardUnavailable as exc:
        fail(str(exc))
    inputs, errors = screenable_blocks(paths or [], settings.steering.screen.kinds)
    inputs += [GuardInput(f"--text {n}", t) for n, t in enumerate(text or [], start=1)]
    if quarantined:
        name = collection or settings.collection
        try:
            store = open_store(settings.store, settings.data_path)
        except StoreError as exc:
            fail(str(exc))
        try:
            if not store.has_collection(name):
                fail(f"no collection {name!r} in the store")
            records = quarantined_records(store, name, source)
        except StoreError as exc:
            fail(str(exc))
        finally:
            store.close()
        # Judged as the screen judged them: beside the other blocks of their documents, read
        # again from their sources (a record whose document is gone is judged alone, and says
        # so).
        inputs += records_in_their_documents(
            records,
            settings.sources,
            Path(settings.base_dir),
            settings.parsing,
            settings.steering.screen.kinds,
            settings.object_store,
        )
    context = settings.steering.guard.context
    report = check_texts(guard, inputs, threshold, settings.steering.guard.languages, context)
    if quarantined:  # the records are what was asked about, not their neighbours
        report.findings = [f for f in report.findings if f.stored is not None or f.note]
    report.errors = errors
    if as_json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        _print_report(
            report, threshold, errors, quarantined, collection or settings.collection, show_all
        )
    if errors:
        raise typer.Exit(2)
    if report.quarantined:
        raise typer.Exit(1)


def _print_report(
    report: GuardCheck,
    threshold: float,
    errors: list[str],
    quarantined: bool,
    collection: str,
    show_all: bool,
) -> None:
    """The human-readable report: each listed block, the errors, and a summary line."""
    from clef_pipelines.guard.context import FITS_DOCUMENT, OFF_TOPIC_REQUEST

    # A stored quarantined record is listed whatever the guard now says of it (Clef may
    # have quarantined it, or another threshold).
    listed = [
        f
        for f in report.findings
        if show_all or f.quarantine or f.stored is not None or f.reason == FITS_DOCUMENT
    ]
    for finding in listed:
        mark = "[red]quarantine[/]" if finding.quarantine else "keep"
        if finding.reason in (FITS_DOCUMENT, OFF_TOPIC_REQUEST):
            mark += f" ({finding.reason}, fit {finding.fit:.2f})"
        window = " ".join(finding.window.split())
        window = window if len(window) <= _SHOWN else window[: _SHOWN - 3] + "..."
        console.print(f"{mark} {finding.p_injection:.3f}  {shown(finding.where)}", soft_wrap=True)
        console.print(f"    {shown(window)}", soft_wrap=True)
        if finding.stored is not None:
            console.print(
                f"    record {lit(finding.stored.get('id'))}; "
                f"at ingest: {lit(_stored(finding.stored))}",
                soft_wrap=True,
            )
            differs = _differs(finding)
            if differs:
                console.print(f"    [yellow]differs from ingest:[/] {lit(differs)}", soft_wrap=True)
    for error in errors:
        console.print(f"[red]error:[/] {lit(error)}", soft_wrap=True)
    unjudged = len(report.not_judged)
    fitting = sum(f.reason == FITS_DOCUMENT for f in report.findings)
    console.print(
        f"{len(report.quarantined)} of {len(report.findings)} blocks would be quarantined "
        f"(threshold {threshold:.3f}, guard {lit(report.version)})"
        + (f"; {unjudged} kept, not judged by the guard (language, no-prose)" if unjudged else "")
        + (
            f"; {fitting} kept although they score over it, as they fit their document "
            "(steering.guard.context)"
            if fitting
            else ""
        ),
        soft_wrap=True,
    )
    if quarantined and report.findings:
        console.print(
            "release a wrongly quarantined block with `clef-pipelines release "
            f"--collection {lit(collection)} --record ID` "
            "(the guard stays on)",
            soft_wrap=True,
        )


def _differs(finding: GuardFinding) -> str | None:
    """Why the guard now keeps a record that ingest quarantined; None when it agrees."""
    if finding.quarantine or finding.stored is None:
        return None
    why: list[str] = []
    if finding.note:
        why.append(finding.note)
    judge = finding.stored.get("decided_by")
    if judge and judge != "guard":
        why.append(f"ingest's decision was {judge}'s, not the guard's alone")
    stored_p = finding.stored.get("p_guard")
    if isinstance(stored_p, float) and abs(stored_p - finding.p_injection) > 1e-3:
        why.append(
            f"the guard now scores it {finding.p_injection:.3f} against {stored_p:.3f} at "
            "ingest (other weights, reading or settings since)"
        )
    if finding.not_judged:
        why.append(f"not judged now ({finding.not_judged})")
    if finding.reason == "fits_document":
        why.append(f"it fits its document now (fit {finding.fit:.2f})")
    return "; ".join(why) or "the threshold or the guard's settings changed since ingest"


def _stored(decision: dict[str, object]) -> str:
    """How ingest decided a stored record: its reason, its judge and their probabilities."""
    probabilities = ", ".join(
        f"{name} {value:.3f}"
        for name, value in (
            ("p_guard", decision.get("p_guard")),
            ("p_instructs_ai", decision.get("p_instructs_ai")),
        )
        if isinstance(value, float)
    )
    return f"{decision.get('quarantine_reason') or '?'} by {decision.get('decided_by') or '?'}" + (
        f" ({probabilities})" if probabilities else ""
    )
