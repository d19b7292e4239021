"""`release`: put a wrongly quarantined block back, without turning the guard off."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from clef_pipelines.cli.app import app
from clef_pipelines.cli.common import (
    ConfigOption,
    collection_arg,
    console,
    fail,
    lit,
    load_cli_settings,
    shown,
)

if TYPE_CHECKING:
    from clef_pipelines.config import Settings
    from clef_pipelines.steering.release import Releases

RecordOption = Annotated[
    list[str] | None,
    typer.Option(
        "--record",
        help="A quarantined record's id (repeatable; `guard --quarantined` lists them).",
    ),
]
DocOption = Annotated[
    list[str] | None,
    typer.Option("--doc", help="A document id: every block of it is kept (repeatable)."),
]
CollectionOption = Annotated[
    str | None, typer.Option(help="The collection (default: the config's).")
]
SourceOption = Annotated[
    str | None, typer.Option(help="Only records and documents of this source.")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


@app.command("release")
def release_command(
    record: RecordOption = None,
    doc: DocOption = None,
    collection: CollectionOption = None,
    source: SourceOption = None,
    list_releases: Annotated[
        bool, typer.Option("--list", help="List the collection's releases.")
    ] = False,
    undo: Annotated[
        bool, typer.Option("--undo", help="Take the records or documents off the releases.")
    ] = False,
    as_json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Put wrongly quarantined blocks back (--record ID, or every block of --doc DOC_ID),
    with the guard left on: a per-collection allow-list under data_dir, kept across
    re-ingests. It takes effect on the next ingest of the documents' sources, which screens
    exactly those documents again; a released block whose text changes is judged afresh."""
    settings = load_cli_settings(config)
    name = collection_arg(collection) or settings.collection
    if list_releases:
        if record or doc or undo:
            fail("--list takes no --record, --doc or --undo")
        _list(settings, name, source, as_json)
        return
    if not record and not doc:
        fail("give --record ID or --doc DOC_ID (repeatable), or --list")
    _change(settings, name, record or [], doc or [], source, undo, as_json)


@app.command("unrelease")
def unrelease_command(
    record: RecordOption = None,
    doc: DocOption = None,
    collection: CollectionOption = None,
    source: SourceOption = None,
    as_json: JsonOption = False,
    config: ConfigOption = None,
) -> None:
    """Undo a release (`release --undo`): the blocks are judged again on the next ingest."""
    release_command(record, doc, collection, source, False, True, as_json, config)


def _load(settings: Settings, collection: str) -> Releases:
    from clef_pipelines.steering.release import ReleaseFileError, load_releases

    try:
        return load_releases(settings.data_path, collection)
    except ReleaseFileError as exc:
        fail(str(exc))


def _list(settings: Settings, collection: str, source: str | None, as_json: bool) -> None:
    releases = _load(settings, collection)
    listed = releases.as_dict()
    if source:
        listed["records"] = [r for r in listed["records"] if r["source"] == source]
        listed["documents"] = [d for d in listed["documents"] if d["source"] == source]
    if as_json:
        print(json.dumps({"collection": collection, **listed}, indent=2))
        return
    if not listed["records"] and not listed["documents"]:
        console.print(f"no releases in collection {lit(collection)}")
        return
    for r in listed["records"]:
        section = f" ({shown(r['section'])})" if r["section"] else ""
        console.print(
            f"record {shown(r['id'])}  {shown(r['source'])}/{shown(r['doc_id'])}{section}  "
            f"released {shown(r['released_at'])}",
            soft_wrap=True,
        )
        console.print(f"    {shown(r['text'])}", soft_wrap=True)
    for d in listed["documents"]:
        console.print(
            f"document {shown(d['source'])}/{shown(d['doc_id'])} (every block)  "
            f"released {shown(d['released_at'])}",
            soft_wrap=True,
        )


def _change(
    settings: Settings,
    collection: str,
    records: list[str],
    docs: list[str],
    source: str | None,
    undo: bool,
    as_json: bool,
) -> None:
    """Release (or, with `undo`, unrelease) under the collection's write lock."""
    from clef_pipelines.ingest.locks import CollectionBusy, collection_lock
    from clef_pipelines.steering.release import (
        ReleaseError,
        release_documents,
        release_records,
        save_releases,
        unrelease,
    )
    from clef_pipelines.stores import StoreError, open_store

    try:
        with collection_lock(
            settings.data_path, collection, timeout_s=settings.ingest_lock_timeout_s
        ):
            releases = _load(settings, collection)
            if undo:
                removed, removed_docs = unrelease(releases, records, docs, source)
                changed = [*removed, *removed_docs]
            else:
                store = open_store(settings.store, settings.data_path)
                try:
                    if not store.has_collection(collection):
                        fail(f"no collection {collection!r} in the store")
                    changed = [
                        *release_records(store, collection, releases, records, source),
                        *release_documents(store, collection, releases, docs, source),
                    ]
                finally:
                    store.close()
            path = save_releases(settings.data_path, collection, releases)
    except (ReleaseError, StoreError, CollectionBusy) as exc:
        fail(str(exc))
    sources = sorted({c.source for c in changed})
    _report(collection, changed, sources, undo, str(path), as_json)


def _report(
    collection: str,
    changed: list,
    sources: list[str],
    undo: bool,
    path: str,
    as_json: bool,
) -> None:
    verb = "unreleased" if undo else "released"
    effect = "quarantined again if the judges still say so" if undo else "kept, and retrievable"
    commands = [f"clef-pipelines ingest --source {s}" for s in sources]
    next_step = (
        f"takes effect on the next ingest of source {', '.join(sources)}: "
        f"`{'`, `'.join(commands)}` screens those documents again (no --force needed), and "
        f"the blocks are {effect}; the guard still screens everything else"
    )
    if as_json:
        out = {
            "collection": collection,
            verb: [vars(c) for c in changed],
            "file": path,
            "next": next_step if changed else None,
        }
        print(json.dumps(out, indent=2))
        return
    if not changed:
        console.print(f"nothing new: already {verb} in collection {lit(collection)}")
        return
    for c in changed:
        what = f"record {shown(c.id)}" if hasattr(c, "id") else "document (every block)"
        console.print(f"{verb} {what}  {shown(c.source)}/{shown(c.doc_id)}", soft_wrap=True)
    console.print(f"(kept in {lit(path)})", soft_wrap=True)
    console.print(shown(next_step), soft_wrap=True)
