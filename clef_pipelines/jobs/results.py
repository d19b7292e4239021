"""What an in-process run of a job gives back, built once from its events.

`SourceRunReport` keeps each asset's materialisation metadata as plain values (what
`ingest --json` prints, and what the benchmarks and tests read); `IngestSummary` and
`SourceRunReport.eval_report_json` are the typed views the CLI prints from. The metadata keys
the assets write are read here, and nowhere else on the CLI's side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI imports this module on every start: Dagster only when a run ends
    import dagster as dg

#: The steps that count failed documents and list them, in pipeline order.
_FAILING_STEPS = ("source_documents", "parsed_blocks", "chunks")
#: Steps whose rows wait for Clef when its requests failed: (asset, flag column).
_CLEF_PENDING = (("screened_paragraphs", "needs_rescreen"), ("enrichments", "needs_reenrich"))


def plain_value(value: Any) -> Any:
    """Dagster metadata values -> JSON-friendly Python values (tables -> lists of rows)."""
    import dagster as dg

    if isinstance(value, dg.TableMetadataValue):
        return [dict(record.data) for record in value.records]
    if isinstance(value, dg.TableSchemaMetadataValue):
        return [{"name": c.name, "type": c.type} for c in value.schema.columns]
    inner = getattr(value, "value", value)
    if isinstance(inner, (str, int, float, bool)) or inner is None:
        return inner
    if isinstance(inner, (dict, list)):
        return inner
    return str(inner)


def root_message(err: Any) -> str:
    """The innermost user error message of a Dagster step failure."""
    while getattr(err, "cause", None) is not None:
        err = err.cause
    return f"{getattr(err, 'cls_name', 'Error')}: {getattr(err, 'message', str(err)).strip()}"


def settings_change(recorded: Any) -> str | None:
    """The settings that changed since a source's last sync as `source_documents` records them
    (`settings_changed`); None when none did or the last sync did not record them."""
    return None if recorded in (None, "none", "not recorded") else str(recorded)


@dataclass(frozen=True)
class FailedDocument:
    """A document a step could not process."""

    step: str
    doc_id: str
    reason: str
    error: str


@dataclass(frozen=True)
class ClefPending:
    """Rows a step kept for the next run because Clef failed after its retries."""

    flag: str
    rows: int
    #: The first (at most three) failures, as the step recorded them.
    reasons: tuple[str, ...]


def quarantine_of(screen: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the screen quarantined (the `screened_paragraphs` metadata): how many blocks, how
    many a release kept, per kind of document (judged and quarantined), per kind of block, the
    highest-scoring examples (record id, document, section, shortened text, score, judge), the
    documents with the most, and the commands that review and release them."""
    if screen is None or "quarantined_by_kind" not in screen:
        return None
    review = str(screen.get("quarantine_review") or "")
    return {
        "quarantined": int(screen.get("quarantined") or 0),
        "released": int(screen.get("released") or 0),
        "by_kind": dict(screen.get("quarantined_by_kind") or {}),
        "by_block_kind": dict(screen.get("quarantined_by_block_kind") or {}),
        "examples": list(screen.get("quarantine_examples") or []),
        "top_documents": list(screen.get("quarantine_top_documents") or []),
        "review": [c for c in review.split("; ") if c],
    }


@dataclass(frozen=True)
class IngestSummary:
    """One ingestion run of a source, as `ingest` reports it. Counts the run did not record
    (a step that did not materialise) are None."""

    collection: str | None
    documents: int | None
    new: int
    changed: int
    repaired: int
    unchanged: int | None
    removed: int | None
    #: Documents that failed in any step (listing, parsing, chunking).
    failed: int
    #: The settings that changed since the source's last sync (why every document changed);
    #: None when none did or the last sync did not record them.
    settings_changed: str | None
    #: Paragraphs quarantined and dropped by the screen and the enrichment; None when the
    #: screen did not run.
    screened: tuple[int, int] | None
    #: Paragraphs the guard left to Clef, by their document's language
    #: (`steering.guard.languages`) and `no-prose` (no sentence for it to judge).
    guard_not_judged: dict[str, int]
    #: What the guard decided with each block's page as context (`steering.guard.context`):
    #: `fits_document` (kept although its score flags it), `off_topic_request` (quarantined).
    guard_context: dict[str, int]
    #: The screen's quarantine of this run (`quarantine_of`); None when the screen did not run.
    quarantine: dict[str, Any] | None
    chunks: int | None
    tokens: int | None
    embedded: int
    reused: int
    upserted: int
    deleted: int
    #: The source's records in the store after the run (the inventory's when nothing synced).
    store_records: int | None
    collection_records: int | None
    failed_documents: tuple[FailedDocument, ...]
    clef_pending: tuple[ClefPending, ...]
    #: What the Ray embedding executor survived (0 in-process): actors and nodes lost
    #: mid-pass, and the batches it sent again to the actors left.
    actors_lost: int = 0
    nodes_lost: int = 0
    batches_retried: int = 0

    @property
    def all_failed(self) -> bool:
        """Documents were there to ingest and every one of them failed."""
        total = self.documents or 0
        return total > 0 and self.failed >= total

    @classmethod
    def from_assets(cls, assets: dict[str, dict[str, Any]]) -> IngestSummary:
        docs = assets.get("source_documents", {})
        chunks = assets.get("chunks", {})
        emb = assets.get("embeddings", {})
        sync = assets.get("store_sync", {})
        screen = assets.get("screened_paragraphs")
        enrich = assets.get("enrichments") or {}
        screened = None
        if screen is not None:
            actions = screen.get("actions") or {}
            screened = (
                int(actions.get("quarantine", 0)) + int(enrich.get("quarantined") or 0),
                int(actions.get("drop", 0)) + int(enrich.get("dropped") or 0),
            )
        return cls(
            collection=docs.get("collection"),
            documents=docs.get("documents"),
            new=docs.get("documents_new", 0),
            changed=docs.get("documents_changed", 0),
            repaired=docs.get("documents_repair", 0),
            unchanged=docs.get("documents_unchanged"),
            removed=docs.get("documents_removed"),
            failed=sum(
                assets.get(step, {}).get("documents_failed") or 0 for step in _FAILING_STEPS
            ),
            settings_changed=settings_change(docs.get("settings_changed")),
            screened=screened,
            guard_not_judged=dict((screen or {}).get("guard_not_judged") or {}),
            guard_context=dict((screen or {}).get("guard_context") or {}),
            quarantine=quarantine_of(screen),
            chunks=chunks.get("chunks"),
            tokens=chunks.get("tokens"),
            embedded=emb.get("embedded", 0),
            reused=emb.get("reused", 0),
            upserted=sync.get("upserted", 0),
            deleted=(sync.get("deleted_stale") or 0) + (sync.get("deleted_removed") or 0),
            # A run that changed nothing skips the sync: the inventory has the stored totals.
            store_records=sync.get("store/records", docs.get("store/records")),
            collection_records=sync.get("collection_records"),
            failed_documents=tuple(
                FailedDocument(step, row["doc_id"], row["reason"], row["error"])
                for step in _FAILING_STEPS
                for row in assets.get(step, {}).get("failed_documents") or []
            ),
            clef_pending=tuple(
                ClefPending(
                    flag,
                    int(meta.get(flag) or 0),
                    tuple(str(f) for f in (meta.get("failed_requests") or [])[:3]),
                )
                for asset, flag in _CLEF_PENDING
                if int((meta := assets.get(asset) or {}).get(flag) or 0)
            ),
            actors_lost=int(emb.get("actors_lost") or 0),
            nodes_lost=int(emb.get("nodes_lost") or 0),
            batches_retried=int(emb.get("batches_retried") or 0),
        )


@dataclass
class SourceRunReport:
    """One run of a job for one partition (a source, or an eval dataset)."""

    source: str
    run_id: str
    success: bool
    #: Each materialised asset's metadata as plain values, by asset name without the key
    #: prefix ("chunks", not "clef/chunks").
    assets: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Asset check results: "asset:check" -> passed.
    checks: dict[str, bool] = field(default_factory=dict)
    #: Each asset check's metadata as plain values, by the same "asset:check" name.
    check_facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None
    status: str = ""
    #: What a failed step recorded with its failure (`dg.Failure` metadata), by asset name:
    #: the sync's figures up to the failure.
    failed_steps: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_run(
        cls, source: str, result: dg.ExecuteInProcessResult, status: str = ""
    ) -> SourceRunReport:
        """The report of a finished in-process run, from its events."""
        report = cls(source=source, run_id=result.run_id, success=result.success, status=status)
        for event in result.all_events:
            if event.event_type_value == "ASSET_MATERIALIZATION":
                mat = event.event_specific_data.materialization  # type: ignore[union-attr]
                report.assets[mat.asset_key.path[-1]] = {
                    k: plain_value(v) for k, v in mat.metadata.items()
                }
            elif event.event_type_value == "ASSET_CHECK_EVALUATION":
                check = event.event_specific_data  # type: ignore[union-attr]
                name = f"{check.asset_key.path[-1]}:{check.check_name}"
                report.checks[name] = bool(check.passed)
                report.check_facts[name] = {
                    k: plain_value(v) for k, v in (check.metadata or {}).items()
                }
            elif event.event_type_value == "STEP_FAILURE":
                data = event.event_specific_data
                if report.error is None:
                    report.error = root_message(data.error)  # type: ignore[union-attr]
                failure = getattr(data, "user_failure_data", None)
                if failure is not None and failure.metadata and event.step_key:
                    report.failed_steps[event.step_key.split("__")[-1]] = {
                        k: plain_value(v) for k, v in failure.metadata.items()
                    }
        return report

    @cached_property
    def summary(self) -> IngestSummary:
        """The ingestion run's figures, typed (see `IngestSummary`)."""
        # A failed sync's figures stand for the sync when it did not materialise.
        return IngestSummary.from_assets({**self.failed_steps, **self.assets})

    @property
    def eval_report_json(self) -> str | None:
        """The evaluation run's report document (`eval_report`'s JSON file), if it wrote one."""
        path = self.assets.get("eval_report", {}).get("report_json")
        return None if path is None else str(path)

    @property
    def clean(self) -> bool:
        """A run that left nothing for a later one: it succeeded, no document failed and no
        Clef request waits for an answer (`ingest.clean_runs`). A failed check does not count:
        it judges what the store holds, which a run on the same input leaves as it is."""
        if not self.success or self.error:
            return False
        summary = self.summary
        return not summary.failed and not summary.clef_pending

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "run_id": self.run_id,
            "success": self.success,
            "status": self.status,
            "error": self.error,
            "assets": self.assets,
            "checks": self.checks,
            "check_facts": self.check_facts,
            "failed_steps": self.failed_steps,
        }
