"""Issue 7: metadata keys of any language or length, and filter values past 64 bits, in every
store (memory, LanceDB, Qdrant, pgvector)."""

from __future__ import annotations

import uuid

import pytest

from clef_pipelines.ingest.metadata import metadata_field
from clef_pipelines.stores.base import CollectionSpec, StoreError, VectorStore
from clef_pipelines.stores.filters import FilterError

KEYS = ["année", "x" * 80, "Größe-Ω", "日本語", "Year"]


def test_any_metadata_key_becomes_a_field_every_store_holds(store: VectorStore) -> None:
    fields = {metadata_field(k): "str" for k in KEYS}
    assert len(fields) == len(KEYS)  # distinct keys stay distinct fields
    assert metadata_field("année") == "m_annee"
    assert all(len(f) <= 63 for f in fields)
    spec = CollectionSpec(
        name="meta_keys", dimension=4, fields={"doc_id": "str", "quarantined": "bool", **fields}
    )
    store.ensure_collection(spec)
    rid = str(uuid.uuid4())
    record = {"id": rid, "vector": [1.0, 0.0, 0.0, 0.0], "doc_id": "d", "quarantined": False}
    record.update({f: f"value of {f}" for f in fields})
    store.upsert("meta_keys", [record])
    for name in fields:
        hits = store.query("meta_keys", [1.0, 0.0, 0.0, 0.0], where={name: f"value of {name}"})
        assert [h.id for h in hits] == [rid], name


def test_a_filter_value_past_64_bits_is_a_clear_error(store: VectorStore) -> None:
    spec = CollectionSpec(name="wide", dimension=4, fields={"n": "int", "x": "float"})
    store.ensure_collection(spec)
    store.upsert("wide", [{"id": str(uuid.uuid4()), "vector": [1.0, 0, 0, 0], "n": 1, "x": 1.0}])
    for field in ("n", "x"):
        with pytest.raises((FilterError, StoreError)) as info:
            store.query("wide", [1.0, 0, 0, 0], where={field: {"gt": 2**70}})
        message = str(info.value)
        assert "64-bit" in message and field in message
        assert "SELECT" not in message.upper() and "Traceback" not in message
