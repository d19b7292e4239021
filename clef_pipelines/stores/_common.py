"""Helpers shared by the store adapters: spec validation, record checking, scores."""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from clef_pipelines.stores.base import (
    QUARANTINE_FIELD,
    CollectionSpec,
    FieldType,
    Filter,
    Metric,
    NoTextSearch,
    Record,
    StoreError,
    normalise_score,
)
from clef_pipelines.stores.text import LANGUAGES

if TYPE_CHECKING:
    from clef_pipelines.stores.filters import Node

COLLECTION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,47}$")
FIELD_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,62}$")
RESERVED_FIELDS = frozenset({"id", "vector"})
FIELD_TYPES: frozenset[str] = frozenset({"str", "int", "float", "bool"})
METRICS: frozenset[str] = frozenset({"cosine", "l2", "dot"})
#: Batch size for engines that take records in chunks.
BATCH = 1000


def check_collection_name(name: str) -> str:
    if not isinstance(name, str) or not COLLECTION_RE.match(name):
        raise StoreError(
            f"invalid collection name {name!r}: use letters, digits, '_' or '-' (max 48 chars, "
            "starting with a letter or digit)"
        )
    return name


def normalise_spec(spec: CollectionSpec) -> CollectionSpec:
    """Validate a spec and add the ``quarantined`` bool field (always filterable)."""
    check_collection_name(spec.name)
    if not isinstance(spec.dimension, int) or spec.dimension <= 0:
        raise StoreError(f"collection {spec.name!r}: dimension must be a positive int")
    if spec.metric not in METRICS:
        raise StoreError(f"collection {spec.name!r}: unknown metric {spec.metric!r}")
    fields = dict(spec.fields)
    for name, ftype in fields.items():
        if not isinstance(name, str) or not FIELD_RE.match(name) or name in RESERVED_FIELDS:
            raise StoreError(
                f"collection {spec.name!r}: invalid field name {name!r} (letters, digits, '_'; "
                "not 'id' or 'vector')"
            )
        if ftype not in FIELD_TYPES:
            raise StoreError(f"collection {spec.name!r}: field {name!r} has unknown type {ftype!r}")
    if fields.get(QUARANTINE_FIELD, "bool") != "bool":
        raise StoreError(f"collection {spec.name!r}: field {QUARANTINE_FIELD!r} must be bool")
    fields[QUARANTINE_FIELD] = "bool"
    filter_fields = list(dict.fromkeys(spec.filter_fields))
    for f in filter_fields:
        if f not in fields:
            raise StoreError(f"collection {spec.name!r}: filter field {f!r} is not a field")
    if QUARANTINE_FIELD not in filter_fields:
        filter_fields.append(QUARANTINE_FIELD)
    text_fields = tuple(dict.fromkeys(spec.text_fields))
    for f in text_fields:
        if fields.get(f) != "str":
            raise StoreError(f"collection {spec.name!r}: text field {f!r} is not a str field")
    if spec.text_language not in LANGUAGES:
        raise StoreError(
            f"collection {spec.name!r}: text_language {spec.text_language!r} is not supported "
            f"(one of {', '.join(sorted(LANGUAGES))})"
        )
    return replace(spec, fields=fields, filter_fields=tuple(filter_fields), text_fields=text_fields)


def merge_specs(existing: CollectionSpec, wanted: CollectionSpec) -> CollectionSpec:
    """The spec of an existing collection after `ensure_collection(wanted)`: dimension and
    metric must agree, field types must agree, new fields and filter fields are added."""
    if existing.dimension != wanted.dimension or existing.metric != wanted.metric:
        raise StoreError(
            f"collection {existing.name!r} exists with dimension {existing.dimension} and metric "
            f"{existing.metric!r}; asked for dimension {wanted.dimension} and metric "
            f"{wanted.metric!r} (drop it or use another name)"
        )
    fields = dict(existing.fields)
    for name, ftype in wanted.fields.items():
        if name in fields and fields[name] != ftype:
            raise StoreError(
                f"collection {existing.name!r}: field {name!r} is {fields[name]}, asked for {ftype}"
            )
        fields[name] = ftype
    ff = tuple(dict.fromkeys((*existing.filter_fields, *wanted.filter_fields)))
    text_fields, language = existing.text_fields, existing.text_language
    if wanted.text_fields:
        if text_fields and (text_fields, language) != (wanted.text_fields, wanted.text_language):
            raise StoreError(
                f"collection {existing.name!r} has full-text search over {list(text_fields)} "
                f"({language}); asked for {list(wanted.text_fields)} ({wanted.text_language}) "
                "(drop it or use another name)"
            )
        # A collection made before full-text search gains it: the adapter fills it in.
        text_fields, language = wanted.text_fields, wanted.text_language
    return replace(
        existing,
        fields=fields,
        filter_fields=ff,
        text_fields=text_fields,
        text_language=language,
    )


def spec_to_json(spec: CollectionSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "dimension": spec.dimension,
        "metric": spec.metric,
        "fields": dict(spec.fields),
        "filter_fields": list(spec.filter_fields),
        "text_fields": list(spec.text_fields),
        "text_language": spec.text_language,
    }


def spec_from_json(data: Mapping[str, Any]) -> CollectionSpec:
    return CollectionSpec(
        name=data["name"],
        dimension=int(data["dimension"]),
        metric=data["metric"],
        fields=dict(data["fields"]),
        filter_fields=tuple(data["filter_fields"]),
        # Collections written before full-text search have neither key.
        text_fields=tuple(data.get("text_fields") or ()),
        text_language=data.get("text_language") or "english",
    )


def check_id(value: Any, collection: str) -> str:
    if isinstance(value, str):
        try:
            if str(uuid.UUID(value)) == value:
                return value
        except ValueError:
            pass
    raise StoreError(
        f"collection {collection!r}: record id {value!r} is not a canonical UUID string "
        "(lower-case, hyphenated)"
    )


def check_ids(ids: Iterable[Any], collection: str) -> list[str]:
    return list(dict.fromkeys(check_id(i, collection) for i in ids))


def _check_field(value: Any, ftype: FieldType, name: str, collection: str) -> Any:
    if value is None:
        return None
    if ftype == "str" and isinstance(value, str):
        return value
    if ftype == "bool" and isinstance(value, bool | np.bool_):
        return bool(value)
    if ftype == "int" and isinstance(value, int | np.integer) and not isinstance(value, bool):
        return int(value)
    if (
        ftype == "float"
        and isinstance(value, int | float | np.integer | np.floating)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    ):
        return float(value)
    raise StoreError(
        f"collection {collection!r}: field {name!r} is {ftype}, got {type(value).__name__} "
        f"{value!r}"
    )


@dataclass
class Prepared:
    """Checked records: parallel lists, duplicates removed (the last one wins)."""

    ids: list[str]
    vectors: np.ndarray  # (n, dim) float32
    payloads: list[dict[str, Any]]  # every spec field, None where missing
    extras: list[dict[str, Any]]  # scalar fields the spec does not declare (not filterable)

    def __len__(self) -> int:
        return len(self.ids)


def prepare_records(spec: CollectionSpec, records: Sequence[Record]) -> Prepared:
    by_id: dict[str, int] = {}
    for i, rec in enumerate(records):
        if not isinstance(rec, Mapping) or "id" not in rec:
            raise StoreError(f"collection {spec.name!r}: record #{i} has no 'id'")
        by_id[check_id(rec["id"], spec.name)] = i
    order = list(by_id.values())
    ids = list(by_id.keys())
    vecs = np.zeros((len(order), spec.dimension), dtype=np.float32)
    payloads: list[dict[str, Any]] = []
    extras: list[dict[str, Any]] = []
    for row, i in enumerate(order):
        rec = records[i]
        vec = rec.get("vector")
        if vec is None:
            raise StoreError(f"collection {spec.name!r}: record {ids[row]} has no vector")
        arr = np.asarray(vec, dtype=np.float32)
        if arr.shape != (spec.dimension,):
            raise StoreError(
                f"collection {spec.name!r}: record {ids[row]} has a vector of shape {arr.shape}, "
                f"expected ({spec.dimension},)"
            )
        if not np.all(np.isfinite(arr)):
            raise StoreError(f"collection {spec.name!r}: record {ids[row]} has a non-finite vector")
        vecs[row] = arr
        payload = {f: _check_field(rec.get(f), t, f, spec.name) for f, t in spec.fields.items()}
        extra: dict[str, Any] = {}
        for k, v in rec.items():
            if k in ("id", "vector") or k in spec.fields:
                continue
            if not isinstance(k, str) or k.startswith("_"):
                raise StoreError(f"collection {spec.name!r}: invalid field name {k!r}")
            if v is not None and not isinstance(v, str | int | float | bool):
                raise StoreError(
                    f"collection {spec.name!r}: field {k!r} must be a scalar, got "
                    f"{type(v).__name__}"
                )
            if v is not None:
                extra[k] = v
        payloads.append(payload)
        extras.append(extra)
    return Prepared(ids, vecs, payloads, extras)


def _typed(value: Any, ftype: FieldType) -> Any:
    if value is None:
        return None
    if ftype == "float":
        return float(value)
    if ftype == "int":
        return int(value)
    return value


def output_record(
    spec: CollectionSpec,
    rid: str,
    payload: Mapping[str, Any],
    extra: Mapping[str, Any] | None,
    fields: Sequence[str] | None = None,
    vector: Any = None,
) -> Record:
    """The record as every adapter returns it: id, the spec fields (None where missing) or the
    requested ones, undeclared extra fields (when all fields are asked for), vector if given."""
    out: Record = {"id": rid}
    if fields is None:
        for f, t in spec.fields.items():
            out[f] = _typed(payload.get(f), t)
        if extra:
            for k, v in extra.items():
                out.setdefault(k, v)
    else:
        for f in fields:
            if f == "id":
                continue
            if f in spec.fields:
                out[f] = _typed(payload.get(f), spec.fields[f])
            else:
                out[f] = (extra or {}).get(f)
    if vector is not None:
        out["vector"] = [float(x) for x in np.asarray(vector, dtype=np.float32)]
    return out


def extras_to_json(extra: Mapping[str, Any]) -> str | None:
    return json.dumps(extra, separators=(",", ":"), ensure_ascii=False) if extra else None


def extras_from_json(text: str | None) -> dict[str, Any]:
    return json.loads(text) if text else {}


def score(metric: Metric, value: float) -> float:
    """Similarity in [0, 1] from the canonical value: cosine distance, L2 distance (not
    squared) or inner product."""
    return normalise_score(metric, float(value))


def exact_values(metric: Metric, matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Canonical value per row (see `score`) and whether lower is better is metric-specific."""
    if metric == "dot":
        return matrix @ query
    if metric == "l2":
        return np.sqrt(np.maximum(((matrix - query) ** 2).sum(axis=1), 0.0))
    qn = float(np.linalg.norm(query))
    norms = np.linalg.norm(matrix, axis=1) * (qn if qn > 0 else 1.0)
    norms[norms == 0] = 1.0
    return 1.0 - (matrix @ query) / norms


def check_query_vector(spec: CollectionSpec, vector: Sequence[float]) -> np.ndarray:
    arr = np.asarray(vector, dtype=np.float32)
    if arr.shape != (spec.dimension,):
        raise StoreError(
            f"collection {spec.name!r}: query vector has shape {arr.shape}, expected "
            f"({spec.dimension},)"
        )
    if not np.all(np.isfinite(arr)):
        raise StoreError(f"collection {spec.name!r}: query vector is not finite")
    return arr


def check_top_k(top_k: int) -> int:
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0:
        raise StoreError(f"top_k must be a non-negative int, got {top_k!r}")
    return top_k


def require_delete_target(collection: str, ids: object, where: object) -> None:
    """A delete with neither ids nor a filter is a mistake, not "delete everything"."""
    if ids is None and where is None:
        raise StoreError(
            f"collection {collection!r}: delete needs ids or where (use where={{}} to "
            "delete everything)"
        )


def delete_filter(
    collection: str,
    fields: Mapping[str, FieldType],
    ids: Sequence[str] | None,
    where: Filter | None,
) -> Node | None:
    """The filter a delete applies (ids AND where), or None when it can match nothing."""
    from clef_pipelines.stores.filters import And, Const, In, parse_filter

    require_delete_target(collection, ids, where)
    node = parse_filter(where, fields)
    if ids is not None:
        id_list = check_ids(ids, collection)
        if not id_list:
            return None
        by_id = In("id", tuple(id_list), False, "str")
        node = by_id if (isinstance(node, Const) and node.value) else And((by_id, node))
    if isinstance(node, Const) and not node.value:
        return None
    return node


def query_plan(
    spec: CollectionSpec,
    vector: Sequence[float],
    where: Filter | None,
    top_k: int,
    include_quarantined: bool,
) -> tuple[np.ndarray, Node] | None:
    """The checked query vector and the full filter (quarantine included) of a query, or None
    when it can return nothing (top_k 0, or a filter that matches nothing)."""
    from clef_pipelines.stores.filters import Const, parse_filter, with_quarantine

    q = check_query_vector(spec, vector)
    check_top_k(top_k)
    node = with_quarantine(parse_filter(where, spec.fields), spec.fields, include_quarantined)
    if top_k == 0 or (isinstance(node, Const) and not node.value):
        return None
    return q, node


def text_plan(
    spec: CollectionSpec,
    text: str,
    where: Filter | None,
    top_k: int,
    include_quarantined: bool,
) -> Node | None:
    """The full filter (quarantine included) of a full-text query, or None when it can return
    nothing (top_k 0, a blank query, or a filter that matches nothing)."""
    from clef_pipelines.stores.filters import Const, parse_filter, with_quarantine

    if not spec.text_fields:
        raise NoTextSearch(
            f"collection {spec.name!r} has no full-text search (no text fields); ingest it "
            "again with this version, or query with mode 'vector'"
        )
    if not isinstance(text, str):
        raise StoreError(f"collection {spec.name!r}: text query must be a str, got {text!r}")
    check_top_k(top_k)
    node = with_quarantine(parse_filter(where, spec.fields), spec.fields, include_quarantined)
    if top_k == 0 or not text.strip() or (isinstance(node, Const) and not node.value):
        return None
    return node
