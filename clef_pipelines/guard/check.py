"""What the offline guard makes of given files or texts, without ingesting them, or of a
collection's quarantined records: each text's P(injection), whether the screen would
quarantine it, and the window (one or two sentences, or a short text whole) that scored
highest. For a person reviewing a quarantine, or a docs repository checking its pages before
they are published.

Blocks come from the ingestion's own loader and parsers, and only the kinds the screen judges
(`steering.screen.kinds`) are scored, with the configured guard and threshold. The language
gate (`steering.guard.languages`) is not applied: every block is judged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clef_pipelines.config import SourceConfig
from clef_pipelines.guard.config import GuardContextConfig
from clef_pipelines.guard.context import judge_in_context
from clef_pipelines.guard.language import document_languages
from clef_pipelines.guard.model import InjectionGuard
from clef_pipelines.guard.prose import NO_PROSE
from clef_pipelines.parsing.loaders import iter_source_entries, load_file
from clef_pipelines.parsing.models import Document, ParseError, is_screenable
from clef_pipelines.parsing.parse import parse_blocks
from clef_pipelines.stores.base import VectorStore


@dataclass
class GuardInput:
    """A text to judge, where it comes from and, for a stored record, how it was decided."""

    where: str
    text: str
    #: A stored record's decision at ingest (``STORED_DECISION`` fields) and its ``id``; None
    #: for files.
    stored: dict[str, Any] | None = None
    #: The document the text belongs to: the language gate reads a document as a whole.
    #: None: the text is a document of its own.
    doc: str | None = None
    #: For a file's block: its kind (``paragraph``, ``list_item``...) and the document's
    #: format (``md``, ``rst``, ``html``, ``txt``, ``pdf``...); None otherwise.
    kind: str | None = None
    format: str | None = None
    #: Why a stored record was judged otherwise than ingest judged it (alone, its document
    #: gone or changed since ingest); None otherwise.
    note: str | None = None


#: A stored record's fields that say how it was quarantined.
STORED_DECISION = ("quarantine_reason", "decided_by", "p_guard", "p_instructs_ai")


@dataclass
class GuardFinding:
    """One judged text: where it is, its score, the decision and the deciding window."""

    where: str
    text: str
    p_injection: float
    quarantine: bool
    #: The window that scored highest (a decoded reading's shows the decoded words).
    window: str
    stored: dict[str, Any] | None = None
    #: Why the guard did not judge the text (its document's language, or ``no-prose``), as
    #: the screen records it; None when judged. Such a text is kept, and left to Clef.
    not_judged: str | None = None
    #: Why, with its document as context (``guard.context``): ``instructs_ai``,
    #: ``off_topic_request`` (quarantined) or ``fits_document`` (kept although it scores
    #: over the threshold); None otherwise.
    reason: str | None = None
    #: Its highest similarity to a neighbouring block, where the context was read.
    fit: float | None = None
    #: ``GuardInput.note``.
    note: str | None = None

    @property
    def decision(self) -> str:
        """``quarantine``, ``keep`` or ``not_judged``: what the screen's guard would do."""
        if self.not_judged:
            return "not_judged"
        return "quarantine" if self.quarantine else "keep"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "decision": self.decision}


@dataclass
class GuardCheck:
    """Every judged text (``findings``, in input order) and the files that could not be read."""

    version: str
    threshold: float
    findings: list[GuardFinding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def quarantined(self) -> list[GuardFinding]:
        return [f for f in self.findings if f.quarantine]

    @property
    def not_judged(self) -> list[GuardFinding]:
        return [f for f in self.findings if f.not_judged]

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "threshold": self.threshold,
            "judged": len(self.findings) - len(self.not_judged),
            "not_judged": len(self.not_judged),
            "quarantined": len(self.quarantined),
            "findings": [f.as_dict() for f in self.findings],
            "errors": self.errors,
        }


def check_texts(
    guard: InjectionGuard,
    inputs: Sequence[GuardInput],
    threshold: float,
    languages: Sequence[str] | None = None,
    context: GuardContextConfig | None = None,
) -> GuardCheck:
    """Judge each input as the screen judges one block: texts of a document written in a
    language outside ``languages`` (``steering.guard.languages``; None: every language) and
    texts with no prose (``InjectionGuard.judges``) are not judged, the rest are scored, and
    with ``context`` (``steering.guard.context``, when enabled) decided next to the other
    inputs of their document (``GuardInput.doc``, in input order; ``guard.context``)."""
    report = GuardCheck(str(guard.version), threshold)
    skipped = _not_judged(guard, inputs, languages)
    judged = [item for n, item in enumerate(inputs) if n not in skipped]
    # A text scores as its highest window (``InjectionGuard.score``), so the first window of
    # ``explain`` is both the score and what decided it. One call: one MiniLM pass for all.
    ranked_of = iter(guard.explain([i.text for i in judged]))
    for n, item in enumerate(inputs):
        if n in skipped:
            report.findings.append(
                GuardFinding(
                    item.where, item.text, 0.0, False, "", item.stored, skipped[n], note=item.note
                )
            )
            continue
        window, p = (next(ranked_of) or [("", 0.0)])[0]
        report.findings.append(
            GuardFinding(
                item.where, item.text, p, p >= threshold, window, item.stored, note=item.note
            )
        )
    if context is not None and context.enabled:
        _decide_in_context(guard, inputs, report, context)
    return report


def _decide_in_context(
    guard: InjectionGuard,
    inputs: Sequence[GuardInput],
    report: GuardCheck,
    context: GuardContextConfig,
) -> None:
    verdicts = judge_in_context(
        [item.doc or f"#{n}" for n, item in enumerate(inputs)],
        [item.text for item in inputs],
        [None if f.not_judged else f.p_injection for f in report.findings],
        report.threshold,
        context,
        guard.plain_vectors,
    )
    for finding, verdict in zip(report.findings, verdicts, strict=True):
        finding.quarantine = verdict.quarantine
        finding.reason = verdict.reason
        finding.fit = None if verdict.fit is None else round(verdict.fit, 4)


def _not_judged(
    guard: InjectionGuard, inputs: Sequence[GuardInput], languages: Sequence[str] | None
) -> dict[int, str]:
    """Input index -> why the guard leaves it to Clef: its document's language, else
    ``no-prose``."""
    out: dict[int, str] = {}
    if languages:
        docs = [item.doc or f"#{n}" for n, item in enumerate(inputs)]
        langs = document_languages(docs, [item.text for item in inputs], list(languages))
        out = {n: langs[doc].language for n, doc in enumerate(docs) if not langs[doc].judged}
    for n, item in enumerate(inputs):
        if n not in out and not guard.judges(item.text):
            out[n] = NO_PROSE
    return out


def screenable_blocks(
    paths: Iterable[Path], kinds: Sequence[str]
) -> tuple[list[GuardInput], list[str]]:
    """Each screenable block of each file, and an error per document that cannot be read or
    parsed (the others are still judged). A folder or a JSONL file is read as ingestion reads
    a source (the same files, records and link rules)."""
    texts: list[GuardInput] = []
    errors: list[str] = []
    for path in paths:
        try:
            documents = list(_documents(path))
        except ParseError as exc:  # the folder or JSONL file as a whole
            errors.append(str(exc))
            continue
        for where, load in documents:
            try:
                document = load()
                blocks = parse_blocks(document)
            except ParseError as exc:
                errors.append(str(exc))
                continue
            except OSError as exc:
                errors.append(f"{where}: {exc.strerror or exc}")
                continue
            for n, block in enumerate(blocks, start=1):
                if is_screenable(block.kind, block.text, kinds):
                    section = " > ".join(block.heading_path)
                    label = f"{where}, block {n}" + (f" ({section})" if section else "")
                    texts.append(
                        GuardInput(
                            label, block.text, doc=where, kind=block.kind, format=document.format
                        )
                    )
    return texts, errors


def _documents(path: Path) -> Iterator[tuple[str, Callable[[], Document]]]:
    """``(where, load)`` of each document a path names: itself, or a folder's or JSONL
    file's documents listed as a source's."""
    if path.is_dir() or path.suffix.lower() in (".jsonl", ".ndjson"):
        source = SourceConfig(name="guard", path=str(path))
        for entry in iter_source_entries(source, "."):
            where = f"{path}/{entry.doc_id}" if path.is_dir() else f"{path}: {entry.doc_id}"
            yield where, entry.load
    else:
        yield str(path), lambda: load_file(path)


def quarantined_records(
    store: VectorStore, collection: str, source: str | None = None
) -> list[GuardInput]:
    """A collection's quarantined records (of one source, when given), with how each was
    decided at ingest and its record id (`stored["id"]`, what `clef-pipelines release`
    takes)."""
    where: dict[str, Any] = {"quarantined": True}
    if source:
        where["source"] = source
    fields = ["source", "doc_id", "section_path", "text", *STORED_DECISION]
    records = sorted(
        store.scan(collection, where=where, fields=fields),
        key=lambda r: (r["source"], r["doc_id"], r["id"]),
    )
    return [
        GuardInput(
            f"{r['source']}/{r['doc_id']}"
            + (f" ({r['section_path']})" if r["section_path"] else ""),
            r["text"],
            {"id": r["id"], **{k: r.get(k) for k in STORED_DECISION}},
            doc=f"{r['source']}/{r['doc_id']}",
        )
        for r in records
    ]


def records_in_their_documents(
    records: Sequence[GuardInput],
    sources: Sequence[SourceConfig],
    base_dir: Path,
    parsing: Any,
    kinds: Sequence[str],
    object_store: Any = None,
) -> list[GuardInput]:
    """Stored records (``quarantined_records``) with their documents around them, so that the
    guard judges each as the screen did at ingest: each record's document is read again from
    its source as ingest reads it (``parsing`` settings), and its screenable blocks are given
    in reading order, the record's own block carrying the stored decision. A record whose
    source is no longer configured, whose document is gone, or whose text is no longer a block
    of it is judged alone, with a note saying so."""
    from clef_pipelines.parsing.parse import parse_document

    by_source: dict[str, dict[str, list[GuardInput]]] = {}
    for record in records:
        source, _, doc_id = (record.doc or "").partition("/")
        by_source.setdefault(source, {}).setdefault(doc_id, []).append(record)
    configured = {s.name: s for s in sources}
    out: list[GuardInput] = []
    for source_name, documents in by_source.items():
        left = dict(documents)
        source = configured.get(source_name)
        if source is not None:
            try:
                entries = list(iter_source_entries(source, base_dir, parsing, object_store))
            except (ParseError, OSError):
                entries = []
            for entry in entries:
                if entry.doc_id not in left:
                    continue
                mine = left.pop(entry.doc_id)
                try:
                    document = entry.load()
                    blocks = parse_document(document, parsing)
                except Exception:  # read as ingest does: one broken document is reported
                    left[entry.doc_id] = mine
                    continue
                out += _document_with_records(source_name, entry.doc_id, blocks, mine, kinds)
        for doc_id, mine in left.items():
            why = (
                f"judged alone: source {source_name!r} is not configured"
                if source is None
                else f"judged alone: document {doc_id!r} is no longer in its source"
            )
            out += [_alone(record, why) for record in mine]
    return out


def _document_with_records(
    source: str, doc_id: str, blocks: Sequence[Any], records: list[GuardInput], kinds: Sequence[str]
) -> list[GuardInput]:
    """The document's screenable blocks, each record in place of the block with its text."""
    doc = f"{source}/{doc_id}"
    waiting: dict[str, list[GuardInput]] = {}
    for record in records:
        waiting.setdefault(record.text, []).append(record)
    out: list[GuardInput] = []
    for n, block in enumerate(blocks, start=1):
        if not is_screenable(block.kind, block.text, kinds):
            continue
        if waiting.get(block.text):
            record = waiting[block.text].pop(0)
            out.append(
                GuardInput(record.where, record.text, record.stored, doc=doc, kind=block.kind)
            )
        else:
            out.append(GuardInput(f"{doc}, block {n}", block.text, doc=doc, kind=block.kind))
    for rest in waiting.values():
        out += [
            _alone(r, "judged alone: its text is no longer a block of its document") for r in rest
        ]
    return out


def _alone(record: GuardInput, why: str) -> GuardInput:
    return GuardInput(record.where, record.text, record.stored, doc=None, note=why)
