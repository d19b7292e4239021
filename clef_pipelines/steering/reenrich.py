"""Re-enrich a stored collection: apply a changed taxonomy or question set to its records
without re-parsing or re-embedding (each record keeps its vector; only payload changes).

Records whose `enrich_version` differs from the current one (or that carry `needs_reenrich`)
are asked again, packed, with unchanged (ask, text) pairs served from the per-text cache; their
new `q_` / `tag_` / `x_` fields are written back, fields of asks no longer configured are
cleared, and a chunk whose P(instructs_ai) now reaches `enrich.quarantine_at` is quarantined.
A chunk the quality answers would drop is counted, not deleted: the next `ingest --force`
drops it with its document's other chunks, so the document's chunk count stays whole.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from clef_pipelines.records import CHUNK_RECORD, DYNAMIC_PREFIXES, FILTER_FIELDS
from clef_pipelines.steering.enrich import QUARANTINE, ask_enrichment, decide, enrichment_dtypes
from clef_pipelines.steering.questions import enrich_version
from clef_pipelines.steering.runtime import Steering
from clef_pipelines.stores.base import CollectionSpec, FieldType, StoreError, VectorStore

_FIELD_TYPES: dict[str, FieldType] = {"String": "str", "Float64": "float"}


@dataclass
class ReenrichReport:
    collection: str
    version: str = ""
    records: int = 0
    asked: int = 0
    updated: int = 0
    quarantined: int = 0
    would_drop: int = 0
    needs_reenrich: int = 0
    failures: list[str] = field(default_factory=list)
    requests: int = 0
    input_tokens: int = 0
    cached_answers: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def reenrich_collection(
    store: VectorStore,
    collection: str,
    steering: Steering,
    *,
    source: str | None = None,
    everything: bool = False,
    batch: int = 1000,
) -> ReenrichReport:
    started = time.perf_counter()
    if not steering.clef_enabled:
        raise StoreError(
            "reenrich needs Clef: configure clef.backend (or CLOUDFLARE_ACCOUNT_ID and "
            "CLOUDFLARE_API_TOKEN, or CLEF_BASE_URL)"
        )
    if not store.has_collection(collection):
        known = ", ".join(store.list_collections()) or "none"
        raise StoreError(f"collection {collection!r} does not exist (collections: {known})")
    manifest = store.get_manifest(collection) or {}
    cfg = steering.cfg.enrich
    taxonomy = steering.taxonomy()
    version = enrich_version(cfg, taxonomy)
    rep = ReenrichReport(collection=collection, version=version)
    where: dict[str, Any] = {"quarantined": False}
    if source is not None:
        where["source"] = source
    todo: list[tuple[str, str]] = []
    for rec in store.scan(
        collection, where=where, fields=["text", "enrich_version", "needs_reenrich"]
    ):
        rep.records += 1
        if everything or rec.get("enrich_version") != version or rec.get("needs_reenrich"):
            todo.append((rec["id"], rec.get("text") or ""))
    rep.asked = len(todo)
    if not todo:
        rep.seconds = round(time.perf_counter() - started, 3)
        return rep

    spec_fields: dict[str, FieldType] = dict(CHUNK_RECORD)
    dtypes: dict[str, Any] = {}
    for start in range(0, len(todo), batch):
        part = todo[start : start + batch]
        result, asks = ask_enrichment(part, steering, taxonomy)
        rep.requests += result.requests
        rep.input_tokens += result.input_tokens
        rep.cached_answers += result.cached
        rep.failures = sorted(set(rep.failures) | set(result.failures))
        if not dtypes:
            dtypes = enrichment_dtypes(asks)
            for name, dtype in dtypes.items():
                spec_fields[name] = _FIELD_TYPES.get(str(dtype), "str")
            store.ensure_collection(
                CollectionSpec(
                    name=collection,
                    dimension=int(manifest.get("dimension") or 0) or _dimension(store, collection),
                    metric=manifest.get("metric") or "cosine",
                    fields=spec_fields,
                    filter_fields=FILTER_FIELDS,
                )
            )
        records = store.get(collection, [cid for cid, _ in part], with_vectors=True)
        updated: list[dict[str, Any]] = []
        for rec in records:
            cid = rec["id"]
            values = result.values.get(cid, {})
            done = cid in result.complete
            # Fields of asks no longer configured are cleared; the others are rewritten.
            row = {
                k: v
                for k, v in rec.items()
                if not (k.startswith(DYNAMIC_PREFIXES) and not k.startswith("m_"))
            }
            if done:
                row.update(values)
                row["enrich_version"] = version
                row["needs_reenrich"] = False
                decision = decide(values, cfg)
                if decision == QUARANTINE and cfg.mode == "on":
                    row.update(
                        quarantined=True,
                        quarantine_reason="instructs_ai",
                        decided_by="clef:enrichment",
                    )
                    rep.quarantined += 1
                elif decision == "drop":
                    rep.would_drop += 1
            else:
                # Keep what it had; ask again next time.
                row.update({k: rec.get(k) for k in dtypes})
                row["needs_reenrich"] = True
                rep.needs_reenrich += 1
            updated.append(row)
        rep.updated += store.upsert(collection, updated)
    rep.seconds = round(time.perf_counter() - started, 3)
    return rep


def _dimension(store: VectorStore, collection: str) -> int:
    ids = store.list_ids(collection)[:1]
    recs = store.get(collection, ids, with_vectors=True) if ids else []
    if not recs:
        raise StoreError(f"collection {collection!r} holds no record to take a dimension from")
    return len(recs[0]["vector"])
