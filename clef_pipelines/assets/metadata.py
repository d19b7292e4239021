"""Materialisation metadata in Dagster's standard shapes, so the UI can table and plot it.

`dagster/row_count` and `dagster/column_schema` describe a frame; failed documents are a
`TableMetadataValue`; a source's stored totals sit under `store/...` on every materialisation
that knows them, so their plots over time show the data, not only what one run changed.
"""

from __future__ import annotations

from collections.abc import Mapping

import dagster as dg
import polars as pl

from clef_pipelines.ingest.totals import SourceTotals

_FAILURE_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("doc_id", "string", description="The document that failed."),
        dg.TableColumn("reason", "string", description="A short reason: encoding, oversize..."),
        dg.TableColumn("error", "string", description="The error message."),
    ]
)


def failures_table(frame: pl.DataFrame, limit: int = 50) -> dg.TableMetadataValue:
    """Failed documents (at most `limit` rows; the count metadata says how many in all)."""
    rows = [
        dg.TableRecord(
            {
                "doc_id": str(row["doc_id"]),
                "reason": str(row.get("reason") or ""),
                "error": str(row.get("error") or ""),
            }
        )
        for row in frame.head(limit).iter_rows(named=True)
    ]
    return dg.MetadataValue.table(rows, schema=_FAILURE_SCHEMA)


def table_metadata(rows: int, schema: Mapping[str, object]) -> dict[str, dg.MetadataValue]:
    """Row count and column schema of data held as a frame or as Parquet files."""
    columns = [dg.TableColumn(name, str(dtype)) for name, dtype in schema.items()]
    return {
        "dagster/row_count": dg.MetadataValue.int(rows),
        "dagster/column_schema": dg.MetadataValue.table_schema(dg.TableSchema(columns=columns)),
    }


def frame_metadata(frame: pl.DataFrame) -> dict[str, dg.MetadataValue]:
    return table_metadata(frame.height, frame.schema)


def totals_metadata(totals: SourceTotals) -> dict[str, dg.MetadataValue]:
    """The source's records in the store: documents, retrievable chunks, quarantined, tokens."""
    return {f"store/{k}": dg.MetadataValue.int(v) for k, v in totals.as_dict().items()}


_EXAMPLE_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("record_id", "string", description="Give it to `clef-pipelines release`."),
        dg.TableColumn("document", "string", description="source/doc_id"),
        dg.TableColumn("section", "string"),
        dg.TableColumn("text", "string", description="The block's text, shortened."),
        dg.TableColumn(
            "score", "float", description="The higher of P(injection), P(instructs_ai)."
        ),
        dg.TableColumn("decided_by", "string", description="guard, clef or clef+guard."),
    ]
)


def quarantine_metadata(summary: Mapping[str, object], review: list[str]) -> dict[str, object]:
    """The screen's quarantine for the UI (`QuarantineSummary.as_dict`): the count, per kind of
    document, the highest-scoring examples as a table, and the commands that review and
    release them."""
    examples = summary.get("examples") or []
    rows = [
        dg.TableRecord(
            {
                "record_id": str(e["record_id"]),
                "document": f"{e['source']}/{e['doc_id']}",
                "section": str(e["section"]),
                "text": str(e["text"]),
                "score": float(e["score"]),
                "decided_by": str(e["decided_by"]),
            }
        )
        for e in examples  # type: ignore[union-attr]
    ]
    return {
        "quarantined": summary.get("quarantined", 0),
        "released": summary.get("released", 0),
        "quarantined_by_kind": dg.MetadataValue.json(summary.get("by_kind") or {}),
        "quarantined_by_block_kind": dg.MetadataValue.json(summary.get("by_block_kind") or {}),
        "quarantine_examples": dg.MetadataValue.table(rows, schema=_EXAMPLE_SCHEMA),
        "quarantine_top_documents": dg.MetadataValue.json(summary.get("top_documents") or []),
        "quarantine_review": "; ".join(review),
    }
