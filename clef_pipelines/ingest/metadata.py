"""User metadata -> typed payload fields, by one rule that every store can hold.

The rule (also in the README and in the `chunks` asset's metadata):

* **Names.** A key becomes the field `m_<key>`: accents are dropped (`année` -> `m_annee`),
  every other character outside `A-Z a-z 0-9 _` becomes `_`, and a name over 63 characters
  is cut to 54 and given `_` + 8 hex digits of the key's hash, so every key maps to a valid
  column in LanceDB, Qdrant, PostgreSQL (63-byte identifiers) and memory alike.
* **Collisions.** Two keys of one document that map to the same field (`a-b` and `a_b`) fail
  that document, with an error naming both keys; no value is dropped in silence.
* **Types.** A field's type is the one the collection already has; for a new field, the type of
  its first value in the source's document order (an int followed by floats makes it float).
  A document whose value does not fit fails alone with reason `metadata`, naming the key, its
  value and the field's type. Integers must fit in 64 bits and floats must be finite.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from clef_pipelines.stores.base import FieldType

METADATA_RULE = (
    "m_<key> (accents dropped, other characters -> '_', over 63 chars cut + hash); a key's type "
    "is the collection's, else its first value's in document order (int widens to float); a "
    "document whose value does not fit, or with two keys on one field, fails alone"
)
MAX_FIELD_CHARS = 63  # PostgreSQL truncates identifiers past 63 bytes
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class MetadataError(ValueError):
    """One document's metadata cannot be stored; the message names the key(s)."""


def metadata_field(key: str) -> str:
    """User metadata key -> payload field name (see the module's rule)."""
    folded = unicodedata.normalize("NFKD", str(key))
    folded = "".join(c for c in folded if not unicodedata.combining(c))
    name = "m_" + _UNSAFE.sub("_", folded)
    if len(name) > MAX_FIELD_CHARS:
        digest = hashlib.sha256(str(key).encode("utf-8")).hexdigest()[:8]
        name = f"{name[:54]}_{digest}"
    return name


def value_type(value: Any) -> FieldType:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "str"


def metadata_fields(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A document's metadata as {field name: value}; MetadataError on a collision or a value
    no store can hold. Lists and objects are kept as JSON text (the loaders do that too)."""
    import json

    out: dict[str, Any] = {}
    keys: dict[str, str] = {}
    for key, raw in metadata.items():
        if raw is None:
            continue
        name = metadata_field(key)
        if name in keys:
            raise MetadataError(
                f"metadata keys {keys[name]!r} and {key!r} both become the field {name!r}; "
                "rename one of them"
            )
        keys[name] = key
        value = raw
        if isinstance(value, dict | list):
            value = json.dumps(value, sort_keys=True, ensure_ascii=False)
        elif isinstance(value, int) and not isinstance(value, bool):
            if not INT64_MIN <= value <= INT64_MAX:
                raise MetadataError(f"metadata {key!r}: {value} does not fit in a 64-bit integer")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise MetadataError(f"metadata {key!r}: {value} is not a finite number")
        elif not isinstance(value, str | bool):
            value = str(value)
        out[name] = value
    return out


class FieldTypes:
    """The type of each metadata field for one run: the collection's first, then first seen."""

    def __init__(self, known: Mapping[str, FieldType] | None = None) -> None:
        self.types: dict[str, FieldType] = dict(known or {})
        self._first: dict[str, str] = {}

    def admit(self, doc_id: str, fields: Mapping[str, Any]) -> None:
        """Check a document's fields against the types so far (and fix new ones); raise
        MetadataError naming the first value that does not fit. Nothing is fixed on error."""
        new: dict[str, FieldType] = {}
        for name, value in fields.items():
            have = value_type(value)
            want = self.types.get(name)
            if want is None:
                new[name] = have
                continue
            if want == have or (want == "float" and have == "int"):
                continue
            if want == "int" and have == "float" and name in self._first:
                # Widen a field this run introduced: ints already admitted fit a float column.
                new[name] = "float"
                continue
            origin = (
                f"set by document {self._first[name]!r}"
                if name in self._first
                else "the collection's type"
            )
            raise MetadataError(
                f"metadata field {name!r} is {want} ({origin}), but this document has "
                f"{have} {value!r}"
            )
        for name, ftype in new.items():
            self.types[name] = ftype
            self._first.setdefault(name, doc_id)


def stored_field_types(store: Any, collection: str) -> dict[str, FieldType]:
    """The metadata field types a collection already has (empty when it does not exist)."""
    get_spec = getattr(store, "get_spec", None)
    if get_spec is None or not store.has_collection(collection):
        return {}
    spec = get_spec(collection)
    return {k: v for k, v in spec.fields.items() if k.startswith("m_")}
