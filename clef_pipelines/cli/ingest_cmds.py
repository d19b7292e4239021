"""`init`, `ingest`, `inspect`, `delete`, `ui`: the ingestion commands (`query` is in
query_cmds)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from clef_pipelines.cli.app import app
from clef_pipelines.cli.common import (
    ConfigOption,
    collection_arg,
    console,
    err_console,
    fail,
    lit,
    load_cli_settings,
    require_config,
    shown,
)
from clef_pipelines.config import (
    DEFAULT_CONFIG_NAME,
    ConfigError,
    Settings,
    SourceConfig,
    with_sources,
)
from clef_pipelines.jobs.results import settings_change

if TYPE_CHECKING:
    from rich.console import Console

    from clef_pipelines.jobs.results import IngestSummary, SourceRunReport


def _slug(path: Path) -> str:
    stem = path.stem if path.is_file() else path.name
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-.") or "source"
    return slug[:100]


def chosen_sources(
    settings: Settings,
    paths: list[Path] | None,
    names: list[str] | None,
    collection: str | None,
) -> list[SourceConfig]:
    """The sources a command names: paths (a configured source with the same path is reused,
    others become ad-hoc sources named after the path), else configured names, else all."""
    out: list[SourceConfig] = []
    if paths:
        taken = {s.name for s in settings.sources}
        for path in paths:
            if not path.exists():
                fail(f"no such file or folder: {path}")
            resolved = path.resolve()
            match = next(
                (s for s in settings.sources if settings.resolve(s.path) == resolved), None
            )
            if match is None:
                name, n = _slug(resolved), 2
                base = name
                while name in taken:
                    name, n = f"{base}-{n}", n + 1
                taken.add(name)
                kind = "jsonl" if resolved.is_file() and resolved.suffix == ".jsonl" else "auto"
                match = SourceConfig(name=name, path=str(resolved), kind=kind)
            out.append(match)
    else:
        try:
            out = [settings.source(n) for n in names] if names else list(settings.sources)
        except ConfigError as exc:
            fail(str(exc))
    if collection:
        out = [s.model_copy(update={"collection": collection}) for s in out]
    return out


@app.command()
def init(
    path: Annotated[Path, typer.Argument(help="Where to write the config.")] = Path(
        DEFAULT_CONFIG_NAME
    ),
    source: Annotated[
        Path | None, typer.Option(help="A folder or .jsonl file to add as the first source.")
    ] = None,
    force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False,
    deploy: Annotated[
        bool,
        typer.Option(
            help="Also write a production dagster.yaml beside it (PostgreSQL, the run queue; "
            "`deploy instance`, docs/deploy.md)."
        ),
    ] = False,
) -> None:
    """Write a starter config file with every setting at its default."""
    if path.exists() and not force:
        fail(f"{path} exists; pass --force to overwrite it")
    instance_path = path.parent / "dagster.yaml"
    if deploy and instance_path.exists() and not force:
        fail(f"{instance_path} exists; pass --force to overwrite it")
    sources = []
    if source is not None:
        sources.append(SourceConfig(name=_slug(source), path=str(source)))
    settings = Settings(sources=sources)
    from clef_pipelines.config_doc import commented_yaml

    header = (
        "# clef-pipelines configuration. Every key has a default; unknown keys are errors.\n"
        "# Secrets never go here: settings ending in _env name an environment variable.\n"
        "# Each setting below is written with its default value, after a comment saying what\n"
        "# it means; delete the ones you do not change.\n\n"
    )
    path.write_text(header + commented_yaml(settings) + "\n", encoding="utf-8")
    console.print(f"wrote {lit(path)}")
    if deploy:
        from clef_pipelines.cli.deploy_cmds import write_instance
        from clef_pipelines.config_deploy import DeploySettings

        write_instance(instance_path, DeploySettings(), force=True)


@app.command()
def ingest(
    paths: Annotated[
        list[Path] | None,
        typer.Argument(help="Folders or .jsonl files; default: every configured source."),
    ] = None,
    collection: Annotated[str | None, typer.Option(help="Target collection.")] = None,
    source: Annotated[
        list[str] | None, typer.Option(help="Configured source name(s) to ingest.")
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="Show what would change; write nothing.")] = False,
    force: Annotated[
        bool,
        typer.Option(
            help="Re-process every document, also of a source unchanged since its last clean run."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    config: ConfigOption = None,
) -> None:
    """Ingest sources into a collection through the Dagster job (runs show in `ui`)."""
    settings = load_cli_settings(config)
    sources = chosen_sources(settings, paths, source, collection_arg(collection))
    if not sources:
        fail("nothing to ingest: give a PATH, or configure sources (see `clef-pipelines init`)")
    _check_source_paths(settings, sources)
    # Paths that are no configured source run in a throwaway Dagster instance.
    adhoc = [s.name for s in sources if s.name not in {c.name for c in settings.sources}]
    settings = with_sources(settings, sources)
    names = [s.name for s in sources]
    if dry_run:
        _dry_run(settings, names, force, as_json)
        return
    skipped = [] if force else _unchanged_sources(settings, names)
    names = [n for n in names if n not in {s["source"] for s in skipped}]
    if not names:  # nothing changed: no Dagster run, nothing imported to start one
        _print_reports([], as_json, skipped)
        return

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from clef_pipelines.ingest import progress
    from clef_pipelines.jobs.launch import (
        SourceBusy,
        cancel_runs_of_this_process,
        run_ingestion,
    )

    draw = not as_json and err_console.is_terminal
    with (
        _terminal_console(draw) as bar_console,
        Progress(
            TextColumn("{task.description:6}"),
            BarColumn(),
            MofNCompleteColumn(),
            # Items per second over the recent window, then the time left at that rate.
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=bar_console,
            # Kept when the run ends: each stage's bar then shows its totals.
            transient=False,
            disable=not draw,
        ) as bar,
    ):
        tasks: dict[str, Any] = {}

        def listener(stage: str, done: int, total: int) -> None:
            # Stages: list (documents found), parse, chunk, embed (chunks), sync (records).
            started = stage not in tasks
            if started:
                tasks[stage] = bar.add_task(stage, total=total or None, rate="")
            task = tasks[stage]
            bar.update(task, completed=done, total=total or None)
            speed = bar.tasks[task].speed if task < len(bar.tasks) else None
            bar.update(task, rate=f"{speed:,.0f}/s" if speed else "")
            if started or (total and done >= total):
                bar.refresh()  # a stage shows as it starts and as it ends, not a tick later

        progress.add_listener(listener)
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["reports"] = run_ingestion(
                    settings,
                    names,
                    adhoc=adhoc,
                    force=force,
                    on_wait=lambda message: err_console.print(message),
                )
            except BaseException as exc:  # handed to the main thread below
                outcome["error"] = exc

        # The run works in a thread so that Ctrl-C reaches this (main) thread and not a step
        # (where Dagster would record it as a step failure): the run is then marked canceled
        # and the process ends at once; a run cut anywhere is repaired by the next one.
        worker = threading.Thread(target=work, name="clef-ingest", daemon=True)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(0.2)
        except KeyboardInterrupt:
            bar.stop()
            canceled = cancel_runs_of_this_process()
            runs = ", ".join(f"run {run_id} of source {src!r}" for src, run_id in canceled)
            err_console.print(
                f"interrupted: {runs or 'no run started yet'}"
                + (" marked canceled" if canceled else ""),
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
            sys.stderr.flush()
            os._exit(130)  # 130: the shell's code for Ctrl-C
        finally:
            progress.remove_listener(listener)
        if isinstance(outcome.get("error"), SourceBusy):
            fail(str(outcome["error"]))
        if "error" in outcome:
            raise outcome["error"]
        reports = outcome["reports"]
    _print_reports(reports, as_json, skipped)
    if not all(r.success for r in reports) or any(r.summary.all_failed for r in reports):
        raise typer.Exit(1)


def _check_source_paths(settings: Settings, sources: list[SourceConfig]) -> None:
    for src in sources:
        if not src.remote and not settings.resolve(src.path).exists():
            fail(f"sources.{src.name}.path: {settings.resolve(src.path)} does not exist")


@contextlib.contextmanager
def _terminal_console(draw: bool) -> Iterator[Console]:
    """The console the progress bars draw on: the terminal itself, through a file descriptor
    of its own. Why: Dagster captures a step's output by pointing the process's stdout and
    stderr (fds 1 and 2) at its compute log while the step runs, so bars drawn on
    `sys.stderr` reached the terminal only when the run ended, all at once and frozen."""
    if not draw:
        yield err_console.get()  # type: ignore[attr-defined]
        return
    from clef_pipelines.cli.common import make_console

    stream = os.fdopen(os.dup(sys.stderr.fileno()), "w", encoding="utf-8", errors="replace")
    try:
        console = make_console(stderr=True)
        console.file = stream
        yield console
    finally:
        stream.close()


def _settings_changed(changed: str | None) -> list[tuple[str, Any]]:
    """A row naming the settings that changed since the last sync, when there are some: they
    are why every document shows as changed."""
    return [] if changed is None else [("  settings changed", changed)]


def _dry_run(settings: Settings, names: list[str], force: bool, as_json: bool) -> None:
    from clef_pipelines.embedding import make_embedder
    from clef_pipelines.ingest.documents import (
        changed_settings,
        parts_fingerprint,
        pipeline_parts,
        plan_inventory,
        settings_digest,
        status_counts,
        stored_documents,
    )
    from clef_pipelines.ingest.stages import list_entries
    from clef_pipelines.parsing.models import ParseError
    from clef_pipelines.stores import open_store

    store = open_store(settings.store, settings.data_path)
    embedder = make_embedder(settings.embedder)
    out = []
    try:
        # The same for every source: the settings and the embedder, not the files.
        parts = pipeline_parts(settings, embedder.name)
        for name in names:
            src = settings.source(name)
            coll = settings.collection_of(src)
            try:
                entries = list_entries(settings, src, parts_fingerprint(parts))
            except ParseError as exc:  # the source itself cannot be listed
                fail(str(exc))
            inv = plan_inventory(name, entries, stored_documents(store, coll, name), force=force)
            manifest = store.get_manifest(coll) if store.has_collection(coll) else None
            failed = inv.filter(inv["status"] == "failed").select("doc_id", "reason", "error")
            out.append(
                {
                    "source": name,
                    "collection": coll,
                    "dry_run": True,
                    "documents": status_counts(inv),
                    "settings_changed": changed_settings(manifest, name, settings_digest(parts)),
                    "failed": failed.to_dicts(),
                }
            )
    finally:
        store.close()
    if as_json:
        print(json.dumps(out, indent=2))
        return
    for item in out:
        console.print(
            f"[bold]{lit(item['source'])}[/] -> {lit(item['collection'])} "
            "(dry run, nothing written)"
        )
        for status, n in item["documents"].items():
            console.print(f"  {status:10} {n}")
        for label, value in _settings_changed(settings_change(item["settings_changed"])):
            console.print(f"  {label.strip()}: {lit(value)}")
        for f in item["failed"]:
            console.print(f"  [red]failed[/] {lit(f['doc_id'])}: {lit(f['error'])}")


def _unchanged_sources(settings: Settings, names: list[str]) -> list[dict[str, Any]]:
    """The sources unchanged since their last clean run (`ingest.clean_runs`), each as what
    `ingest --json` prints for it; no Dagster, store or model is imported to tell."""
    from clef_pipelines.ingest.clean_runs import unchanged_since_clean_run
    from clef_pipelines.ingest.fingerprints import configured_pipeline_fingerprint

    pipeline = configured_pipeline_fingerprint(settings)
    out = []
    for name in names:
        src = settings.source(name)
        record = unchanged_since_clean_run(settings, src, pipeline)
        if record is not None:
            out.append(
                {
                    "source": name,
                    "collection": settings.collection_of(src),
                    "success": True,
                    "unchanged_since_run": record.get("run_id"),
                    "recorded_at": record.get("recorded_at"),
                    "failed_checks": record.get("failed_checks") or [],
                }
            )
    return out


def _unchanged_line(item: dict[str, Any]) -> str:
    run = str(item.get("unchanged_since_run") or "?")[:8]
    checks = item.get("failed_checks") or []
    said = f"; its failed checks: {lit(', '.join(checks))}" if checks else ""
    return (
        f"[bold]{lit(item['source'])}[/] -> {lit(item['collection'])}: unchanged since its last "
        f"clean run ({lit(run)}, {lit(item.get('recorded_at') or '?')}{said}): no run "
        "started (--force runs it)"
    )


def _print_reports(
    reports: list[SourceRunReport], as_json: bool, skipped: list[dict[str, Any]] | None = None
) -> None:
    skipped = skipped or []
    if as_json:
        out = [*skipped, *({**r.as_dict(), "quarantine": r.summary.quarantine} for r in reports)]
        print(json.dumps(out, indent=2, default=str))
        return
    for item in skipped:
        console.print(_unchanged_line(item), soft_wrap=True)
    for r in reports:
        s = r.summary
        status = "[green]ok[/]" if r.success else "[red]failed[/]"
        console.print(
            f"[bold]{lit(r.source)}[/] -> {lit(s.collection or '?')}: {status} (run {r.run_id[:8]})"
        )
        from rich.table import Table

        table = Table(show_header=False, box=None, pad_edge=False)
        rows = [
            ("documents", s.documents),
            ("  new / changed / repaired", f"{s.new} / {s.changed} / {s.repaired}"),
            *_settings_changed(s.settings_changed),
            ("  unchanged (skipped)", s.unchanged),
            ("  removed", s.removed),
            ("  failed", s.failed),
            ("paragraphs quarantined / dropped", _screen_counts(s)),
            *_guard_not_judged(s),
            *_guard_context(s),
            ("chunks", s.chunks),
            ("tokens", s.tokens),
            ("embedded / reused", f"{s.embedded} / {s.reused}"),
            *_ray_losses(s),
            ("upserted / deleted", f"{s.upserted} / {s.deleted}"),
            ("records of the source in the store", s.store_records),
            ("records in collection", s.collection_records),
        ]
        for k, v in rows:
            table.add_row(k, "" if v is None else lit(v))
        console.print(table)
        for f in s.failed_documents:
            console.print(
                f"[red]failed[/] ({f.step}) {lit(f.doc_id)}: {lit(f.reason)}: {lit(f.error)}",
                markup=True,
            )
        _print_quarantine(s.quarantine)
        for check in sorted(name for name, passed in r.checks.items() if not passed):
            console.print(
                f"[yellow]check failed:[/] {lit(check)} (see it in `clef-pipelines ui`)",
                soft_wrap=True,
            )
        for line in _clef_failures(s):
            console.print(f"[yellow]warning:[/] {lit(line)}")
        if r.error:
            console.print(f"[red]error:[/] {lit(r.error)}")


def _print_quarantine(quarantine: dict[str, Any] | None) -> None:
    """What the screen quarantined, per kind of document, its highest-scoring blocks, and
    the commands that review and release them; nothing when it quarantined nothing."""
    if not quarantine or not (quarantine["quarantined"] or quarantine["released"]):
        return
    kinds = ", ".join(
        f"{shown(kind)} {n['quarantined']} of {n['judged']}"
        for kind, n in quarantine["by_kind"].items()
        if n["judged"]
    )
    judged = sum(n["judged"] for n in quarantine["by_kind"].values())
    console.print(
        f"[yellow]quarantined[/] {quarantine['quarantined']} of {judged} judged blocks"
        + (f" ({kinds})" if kinds else ""),
        soft_wrap=True,
    )
    if quarantine["released"]:
        console.print(f"  kept as released: {quarantine['released']}")
    for e in quarantine["examples"]:
        section = f" ({shown(e['section'])})" if e["section"] else ""
        console.print(
            f"  {float(e['score']):.3f} by {shown(e['decided_by'] or '?')}  "
            f"{shown(e['document'])}{section}  record {shown(e['record_id'])}",
            soft_wrap=True,
        )
        console.print(f"      {shown(e['text'])}", soft_wrap=True)
    if quarantine["quarantined"]:
        review, release = (quarantine["review"] + ["", ""])[:2]
        console.print(f"  review: {shown(review)}", soft_wrap=True)
        console.print(
            f"  release a wrongly quarantined block: {shown(release)} (the guard stays on)",
            soft_wrap=True,
        )


def _screen_counts(summary: IngestSummary) -> str | None:
    """Quarantined and dropped blocks of this run (screen + enrichment), when they ran."""
    if summary.screened is None:
        return None
    quarantined, dropped = summary.screened
    return f"{quarantined} / {dropped}"


def _guard_not_judged(summary: IngestSummary) -> list[tuple[str, str]]:
    """A row when the guard left paragraphs to Clef: those of documents in other languages
    (guard.languages), and those with no prose for it (`no-prose`). They are kept."""
    if not summary.guard_not_judged:
        return []
    by_reason = ", ".join(f"{why} {n}" for why, n in sorted(summary.guard_not_judged.items()))
    return [("  kept, not judged by the guard (language, no-prose)", by_reason)]


def _guard_context(summary: IngestSummary) -> list[tuple[str, str]]:
    """A row when the guard's reading of a block beside its page decided (steering.guard.
    context): blocks kept as fitting their page although their score flags them, requests for
    an unrelated task quarantined."""
    if not summary.guard_context:
        return []
    said = ", ".join(f"{why} {n}" for why, n in sorted(summary.guard_context.items()))
    return [("  decided by the guard with the page as context", said)]


def _ray_losses(summary: IngestSummary) -> list[tuple[str, str]]:
    """A row when the Ray embedding executor lost actors mid-pass (and sent their batches
    again): the run succeeded, but the cluster lost something on the way."""
    if not summary.actors_lost:
        return []
    said = (
        f"{summary.nodes_lost} / {summary.actors_lost}, "
        f"{summary.batches_retried} batches sent again"
    )
    return [("  ray nodes / actors lost", said)]


def _clef_failures(summary: IngestSummary) -> list[str]:
    """Clef requests that failed after their retries: the kept rows wait for the next run."""
    return [
        f"{p.rows} rows kept with {p.flag} (Clef failed after retries: {'; '.join(p.reasons)}); "
        "the next run asks again for exactly these"
        for p in summary.clef_pending
    ]


@app.command()
def inspect(
    file: Annotated[
        Path | None, typer.Argument(help="A document to show parsed and chunked.")
    ] = None,
    collection: Annotated[str | None, typer.Option(help="Show a collection instead.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    config: ConfigOption = None,
) -> None:
    """Show how a file parses and chunks, or what a collection holds."""
    settings = load_cli_settings(config)
    if collection:
        collection_arg(collection)
        _inspect_collection(settings, collection, as_json)
    elif file:
        _inspect_file(settings, file, as_json)
    else:
        fail("give a FILE or --collection NAME")


def _inspect_file(settings: Settings, file: Path, as_json: bool) -> None:
    from clef_pipelines.chunking import chunk_blocks
    from clef_pipelines.parsing import load_file, parse_document
    from clef_pipelines.parsing.models import ParseError

    try:
        doc = load_file(file, settings.parsing)
        blocks = parse_document(doc, settings.parsing)
    except ParseError as exc:
        fail(f"{exc} [{exc.reason}]")
    pieces = chunk_blocks(blocks, doc.title, doc.doc_id, settings.chunking)
    if as_json:
        print(
            json.dumps(
                {
                    "title": doc.title,
                    "blocks": [
                        {
                            "kind": b.kind,
                            "heading_path": b.heading_path,
                            "char_start": b.char_start,
                            "char_end": b.char_end,
                            "text": b.text,
                        }
                        for b in blocks
                    ],
                    "chunks": [
                        {
                            "index": i,
                            "section_path": c.section_path,
                            "tokens": c.tokens,
                            "char_start": c.char_start,
                            "char_end": c.char_end,
                            "text": c.text,
                        }
                        for i, c in enumerate(pieces)
                    ],
                },
                indent=2,
            )
        )
        return
    console.print(
        f"[bold]{lit(doc.title)}[/] ({lit(file)}): {len(blocks)} blocks, {len(pieces)} chunks "
        f"({settings.chunking.strategy})"
    )
    from rich.table import Table

    table = Table("#", "section", "tokens", "chars", "text")
    for i, c in enumerate(pieces):
        table.add_row(
            str(i),
            lit(c.section_path),
            str(c.tokens),
            f"{c.char_start}-{c.char_end}",
            lit(c.text[:80].replace("\n", " ")),
        )
    console.print(table)


def _inspect_collection(settings: Settings, collection: str, as_json: bool) -> None:
    from clef_pipelines.stores import open_store

    store = open_store(settings.store, settings.data_path)
    try:
        if not store.has_collection(collection):
            fail(
                f"collection {collection!r} does not exist "
                f"(collections: {', '.join(store.list_collections()) or 'none'})"
            )
        manifest = store.get_manifest(collection) or {}
        per_source: dict[str, dict[str, Any]] = {}
        for rec in store.scan(collection, fields=["source", "doc_id", "quarantined"]):
            s = per_source.setdefault(
                rec.get("source") or "?", {"records": 0, "docs": set(), "quarantined": 0}
            )
            s["records"] += 1
            s["docs"].add(rec.get("doc_id"))
            s["quarantined"] += int(bool(rec.get("quarantined")))
        summary = {
            "collection": collection,
            "store": store.kind,
            "manifest": manifest,
            # Whether queries go through an ANN index or search exactly, and how stale it is.
            "index": store.index_status(collection),
            "sources": {
                k: {
                    "records": v["records"],
                    "documents": len(v["docs"]),
                    "quarantined": v["quarantined"],
                }
                for k, v in per_source.items()
            },
        }
    finally:
        store.close()
    if as_json:
        print(json.dumps(summary, indent=2, default=str))
        return
    console.print(
        f"[bold]{lit(collection)}[/] in {summary['store']}: embedder {lit(manifest.get('embedder'))} "
        f"({manifest.get('dimension')}-d, {manifest.get('metric')})"
    )
    index = summary["index"]
    console.print(
        f"ANN index: {index['ann_index'] or 'none (queries search exactly)'}; "
        f"{index['unindexed_rows']} of {index['rows']} rows not in it"
    )
    from rich.table import Table

    table = Table("source", "documents", "records", "quarantined")
    for k, v in summary["sources"].items():
        table.add_row(lit(k), str(v["documents"]), str(v["records"]), str(v["quarantined"]))
    console.print(table)


@app.command()
def delete(
    collection: Annotated[str, typer.Option(help="The collection.")],
    doc: Annotated[list[str] | None, typer.Option(help="Document id(s) to delete.")] = None,
    source: Annotated[str | None, typer.Option(help="Only this source's records.")] = None,
    all_records: Annotated[bool, typer.Option("--all", help="Drop the whole collection.")] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Drop without asking (required off a terminal).")
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Delete documents (all their chunks) from a collection, or drop the collection."""
    from clef_pipelines.ingest.clean_runs import forget_collection
    from clef_pipelines.stores import open_store

    settings = load_cli_settings(config)
    collection_arg(collection)
    if not doc and not all_records and not source:
        fail("give --doc ID (repeatable), --source NAME (all of a source's records) or --all")
    store = open_store(settings.store, settings.data_path)
    try:
        if not store.has_collection(collection):
            fail(f"collection {collection!r} does not exist")
        if all_records:
            _confirm_drop(collection, store.count(collection), yes)
            store.drop(collection)
            forget_collection(settings, collection)
            console.print(f"dropped collection {lit(collection)}")
            _drop_releases(settings, collection)
            return
        where: dict[str, Any] = {"doc_id": {"in": list(doc)}} if doc else {}
        if source:
            where["source"] = source
        n = store.delete(collection, where=where)
        # Its sources' next `ingest` writes the deleted records again.
        forget_collection(settings, collection)
        what = f"{len(doc)} document(s)" if doc else f"source {lit(source)}"
        console.print(f"deleted {n} records of {what} from {lit(collection)}")
        if n == 0:
            raise typer.Exit(1)
    finally:
        store.close()


def _drop_releases(settings: Settings, collection: str) -> None:
    """A dropped collection's releases go with it: a new collection of the name starts with
    every block judged (`steering.release`)."""
    from clef_pipelines.steering.release import release_path

    path = release_path(settings.data_path, collection)
    if path.exists():
        path.unlink()
        console.print(f"removed its releases ({lit(path)})")


def _ui_command(home: Path, port: int) -> tuple[list[str], Path | None]:
    """`dg dev` from the project folder (what Dagster 1.13 recommends); where the package is
    installed without its project folder, `dagster dev` on a workspace file that names the code
    location `clef_pipelines` as `dg` does."""
    import shutil

    from clef_pipelines.definitions import CODE_LOCATION

    project = Path(__file__).resolve().parents[2]
    dg_cli = shutil.which("dg", path=str(Path(sys.executable).parent)) or shutil.which("dg")
    pyproject = project / "pyproject.toml"
    if dg_cli and pyproject.exists() and "[tool.dg]" in pyproject.read_text(encoding="utf-8"):
        return [dg_cli, "dev", "--host", "127.0.0.1", "--port", str(port)], project
    workspace = home / "workspace.yaml"
    workspace.write_text(
        "load_from:\n  - python_module:\n      module_name: clef_pipelines.definitions\n"
        f"      location_name: {CODE_LOCATION}\n",
        encoding="utf-8",
    )
    cmd = [sys.executable, "-m", "dagster", "dev", "-w", str(workspace)]
    return [*cmd, "-h", "127.0.0.1", "-p", str(port)], None


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


#: How long the UI's processes have to stop on SIGINT before they are killed: within 10 s of
#: the signal to `ui`, all of them are gone.
UI_STOP_GRACE_S = 7.0


def stop_process_group(proc: subprocess.Popen, grace_s: float = UI_STOP_GRACE_S) -> None:
    """Stop every process of `proc`'s process group (`dg dev`, its webserver, daemon and code
    server): SIGINT, which `dg dev` passes on to them, then SIGKILL to whatever of the group is
    left after `grace_s` seconds (the group outlives its leader while a child still runs)."""
    group = proc.pid
    try:
        os.killpg(group, signal.SIGINT)
    except ProcessLookupError:
        proc.poll()
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader, or the group still counts its zombie
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=2)


def ui_launch(
    settings: Settings, config: Path | None, port: int
) -> tuple[list[str], Path | None, dict[str, str]]:
    """The UI's command, folder and environment. `dg dev` runs from the package folder, so the
    config this command resolved is handed to it by absolute path in $CLEF_PIPELINES_CONFIG:
    the code location then loads the file the user's other commands load (without it, it
    loaded another, empty config and its sensor removed every partition)."""
    from clef_pipelines.config import CONFIG_ENV
    from clef_pipelines.jobs.launch import ensure_dagster_home

    found = require_config(config, "the UI would show no sources")
    home = ensure_dagster_home(settings)
    env = dict(os.environ)
    env["DAGSTER_HOME"] = str(home)
    env["DAGSTER_DG_UPDATE_CHECK_ENABLED"] = "0"
    env[CONFIG_ENV] = str(found)
    cmd, cwd = _ui_command(home, port)
    return cmd, cwd, env


def _confirm_drop(collection: str, records: int, yes: bool) -> None:
    """Dropping a collection cannot be undone: ask on a terminal, else demand --yes."""
    if yes:
        return
    if sys.stdin.isatty() and sys.stdout.isatty():
        if typer.confirm(f"Drop collection {collection!r} and its {records} records?"):
            return
        fail("nothing dropped", code=1)
    fail(
        f"--all drops collection {collection!r} and its {records} records: pass --yes to "
        "confirm (there is no terminal to ask on)"
    )


@app.command()
def ui(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = 3000,
    config: ConfigOption = None,
) -> None:
    """Start the Dagster UI (webserver + daemon) on 127.0.0.1 with telemetry off."""
    settings = load_cli_settings(config)
    cmd, cwd, env = ui_launch(settings, config, port)
    console.print(
        f"Dagster UI on http://127.0.0.1:{port} (config {lit(env['CLEF_PIPELINES_CONFIG'])}, "
        f"DAGSTER_HOME={lit(env['DAGSTER_HOME'])}); Ctrl-C stops it"
    )
    # `dagster dev` ignores SIGTERM from a parent script: run it in its own process group and
    # stop the whole group, on Ctrl-C and on SIGTERM or SIGHUP to this process alike (Python
    # dies of those without running `finally`, which left the webserver, daemon and code
    # server running).
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, start_new_session=True)
    previous = {s: signal.signal(s, _interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_process_group(proc)
        for s, handler in previous.items():
            signal.signal(s, handler)
