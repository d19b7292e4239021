"""The portable filter language: parser/validator, a small typed AST, the reference evaluator,
and one compiler per engine (LanceDB SQL ``where`` string, Qdrant ``models.Filter``, Postgres
``psycopg.sql`` with parameters).

Grammar (a filter is a JSON object)::

    {"field": value}                       eq shorthand
    {"field": {"eq"|"ne"|"gt"|"gte"|"lt"|"lte": value}}
    {"field": {"in"|"nin": [value, ...]}}
    {"field": {"exists": true|false}}
    {"field": {"gt": 1, "lt": 5}}          several operators on one field are ANDed
    {"and": [f, ...]}, {"or": [f, ...]}, {"not": f}
    {"a": 1, "b": 2}                       several top-level keys are ANDed
    {}                                     matches everything

Semantics (every adapter agrees with `evaluate`):

- A missing field and a null field are the same thing.
- ``eq``/``in`` match only records that hold the field with an equal value; ``{"f": None}`` (eq
  null) means "f is missing", ``{"f": {"ne": None}}`` means "f is present".
- ``ne``, ``nin`` and the comparisons never match a record that lacks the field.
- ``not`` is plain logical negation: ``{"not": {"f": {"gt": 1}}}`` matches records without f.
- Values are typed by the collection's fields: str fields take strings, int/float fields take
  numbers, bool fields take booleans. Booleans are not numbers (``True`` never equals ``1``).
  Comparisons (gt/gte/lt/lte) apply to int and float fields only.
- ``id`` is always filterable (str; eq/ne/in/nin/exists).
- A field the collection does not declare, an unknown operator, or a value of the wrong type
  raises `FilterError` naming the operator and the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from clef_pipelines.stores.base import QUARANTINE_FIELD, FieldType, Filter, Record

if TYPE_CHECKING:  # pragma: no cover
    from psycopg import sql as _sql
    from qdrant_client import models as _qm

Scalar = str | int | float | bool
CmpOp = Literal["eq", "ne", "gt", "gte", "lt", "lte"]

FIELD_OPS = frozenset({"eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "exists"})
ID_FIELD = "id"


class FilterError(ValueError):
    """An invalid filter; the message names the operator and the field."""

    def __init__(self, message: str, *, op: str | None = None, field: str | None = None):
        super().__init__(message)
        self.op = op
        self.field = field


# --------------------------------------------------------------------------------------- AST


@dataclass(frozen=True)
class Cmp:
    field: str
    op: CmpOp
    value: Scalar | None  # None only with eq / ne (is null / is not null)
    ftype: FieldType


@dataclass(frozen=True)
class In:
    field: str
    values: tuple[Scalar, ...]  # never empty (empty lists are simplified away)
    negate: bool
    ftype: FieldType


@dataclass(frozen=True)
class Exists:
    field: str
    present: bool
    ftype: FieldType


@dataclass(frozen=True)
class And:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    item: Node


@dataclass(frozen=True)
class Const:
    value: bool


Node = Cmp | In | Exists | And | Or | Not | Const
TRUE = Const(True)
FALSE = Const(False)


# ------------------------------------------------------------------------------------ parsing


def _check_value(value: Any, ftype: FieldType, op: str, field: str) -> Scalar:
    """The value, checked against the field's type (booleans are not numbers)."""
    ok: bool
    if ftype == "str":
        ok = isinstance(value, str) and "\x00" not in value
    elif ftype == "bool":
        ok = isinstance(value, bool)
    elif ftype == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:  # float
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and isinstance(value, float):
            ok = math.isfinite(value)
    if ok and ftype != "str" and isinstance(value, int) and not -(2**63) <= value < 2**63:
        # Every engine stores 64-bit integers; a wider value must not reach its SQL.
        raise FilterError(
            f"filter operator {op!r} on field {field!r}: value {value} is outside the 64-bit "
            "integer range",
            op=op,
            field=field,
        )
    if not ok:
        raise FilterError(
            f"filter operator {op!r} on field {field!r}: value {value!r} is not a valid "
            f"{ftype} (booleans are not numbers)",
            op=op,
            field=field,
        )
    return value  # type: ignore[no-any-return]


def _field_type(field: str, fields: Mapping[str, FieldType], op: str) -> FieldType:
    if field == ID_FIELD:
        return "str"
    if not isinstance(field, str) or field not in fields:
        raise FilterError(
            f"filter operator {op!r} on unknown field {field!r} (known: id, "
            f"{', '.join(sorted(fields))})",
            op=op,
            field=str(field),
        )
    return fields[field]


def _parse_field_ops(field: str, spec: Any, fields: Mapping[str, FieldType]) -> Node:
    if not isinstance(spec, Mapping):
        return _parse_eq_shorthand(field, spec, fields)
    if not spec:
        raise FilterError(
            f"filter on field {field!r}: empty operator object", op="<none>", field=field
        )
    parts: list[Node] = []
    for op, value in spec.items():
        if op not in FIELD_OPS:
            raise FilterError(
                f"unknown filter operator {op!r} on field {field!r}", op=str(op), field=field
            )
        parts.append(_parse_op(field, op, value, _field_type(field, fields, op)))
    return _and(parts)


def _parse_eq_shorthand(field: str, spec: Any, fields: Mapping[str, FieldType]) -> Node:
    """`{field: value}`: equality (None: the field is missing)."""
    ftype = _field_type(field, fields, "eq")
    if spec is None:
        return Exists(field, False, ftype)
    if isinstance(spec, list | tuple | set):
        raise FilterError(
            f"filter operator 'eq' on field {field!r}: a list is not a value (use 'in')",
            op="eq",
            field=field,
        )
    return Cmp(field, "eq", _check_value(spec, ftype, "eq", field), ftype)


def _parse_op(field: str, op: str, value: Any, ftype: FieldType) -> Node:
    """One operator of a field's operator object (`op` is one of FIELD_OPS)."""
    if op == "exists":
        if not isinstance(value, bool):
            raise FilterError(
                f"filter operator 'exists' on field {field!r} takes true or false",
                op=op,
                field=field,
            )
        return Exists(field, value, ftype)
    if op in ("in", "nin"):
        return _parse_in(field, op, value, ftype)
    if op in ("eq", "ne"):
        if value is None:
            return Exists(field, op == "ne", ftype)
        return Cmp(field, op, _check_value(value, ftype, op, field), ftype)  # type: ignore[arg-type]
    # gt gte lt lte
    if ftype not in ("int", "float"):
        raise FilterError(
            f"filter operator {op!r} on field {field!r}: comparisons apply to int and "
            f"float fields only ({field!r} is {ftype})",
            op=op,
            field=field,
        )
    return Cmp(field, op, _check_value(value, ftype, op, field), ftype)  # type: ignore[arg-type]


def _parse_in(field: str, op: str, value: Any, ftype: FieldType) -> Node:
    if not isinstance(value, list | tuple | set | frozenset):
        raise FilterError(
            f"filter operator {op!r} on field {field!r} takes a list",
            op=op,
            field=field,
        )
    vals: list[Scalar] = []
    for v in value:
        cv = _check_value(v, ftype, op, field)
        if not any(_equal(cv, x) for x in vals):
            vals.append(cv)
    if op == "in":
        return In(field, tuple(vals), False, ftype) if vals else FALSE
    return In(field, tuple(vals), True, ftype) if vals else Exists(field, True, ftype)


def _and(items: list[Node]) -> Node:
    flat: list[Node] = []
    for it in items:
        if isinstance(it, Const):
            if not it.value:
                return FALSE
            continue
        if isinstance(it, And):
            flat.extend(it.items)
        else:
            flat.append(it)
    if not flat:
        return TRUE
    return flat[0] if len(flat) == 1 else And(tuple(flat))


def _or(items: list[Node]) -> Node:
    flat: list[Node] = []
    for it in items:
        if isinstance(it, Const):
            if it.value:
                return TRUE
            continue
        if isinstance(it, Or):
            flat.extend(it.items)
        else:
            flat.append(it)
    if not flat:
        return FALSE
    return flat[0] if len(flat) == 1 else Or(tuple(flat))


def _not(item: Node) -> Node:
    if isinstance(item, Const):
        return Const(not item.value)
    if isinstance(item, Not):
        return item.item
    return Not(item)


def _parse(flt: Any, fields: Mapping[str, FieldType]) -> Node:
    if not isinstance(flt, Mapping):
        raise FilterError(f"a filter must be an object, got {type(flt).__name__}", op="<filter>")
    parts: list[Node] = []
    for key, value in flt.items():
        if key in ("and", "or"):
            if not isinstance(value, list | tuple):
                raise FilterError(f"filter operator {key!r} takes a list of filters", op=key)
            subs = [_parse(v, fields) for v in value]
            parts.append(_and(subs) if key == "and" else _or(subs))
        elif key == "not":
            parts.append(_not(_parse(value, fields)))
        else:
            parts.append(_parse_field_ops(key, value, fields))
    return _and(parts)


def parse_filter(flt: Filter | None, fields: Mapping[str, FieldType]) -> Node:
    """Validate a filter against the collection's fields and return its (simplified) AST."""
    if flt is None:
        return TRUE
    return _parse(flt, fields)


def with_quarantine(node: Node, fields: Mapping[str, FieldType], include: bool) -> Node:
    """Add 'not quarantined' to a query filter unless quarantined records are asked for."""
    if include or QUARANTINE_FIELD not in fields:
        return node
    return _and([node, Not(Cmp(QUARANTINE_FIELD, "eq", True, "bool"))])


# -------------------------------------------------------------------------- reference evaluator


def _get(record: Mapping[str, Any], field: str) -> Any:
    return record.get(field)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


def evaluate(node: Node, record: Mapping[str, Any]) -> bool:
    """The reference semantics: does this record match?"""
    if isinstance(node, Const):
        return node.value
    if isinstance(node, And):
        return all(evaluate(n, record) for n in node.items)
    if isinstance(node, Or):
        return any(evaluate(n, record) for n in node.items)
    if isinstance(node, Not):
        return not evaluate(node.item, record)
    value = _get(record, node.field)
    if isinstance(node, Exists):
        return (value is not None) == node.present
    if value is None:
        return False
    if isinstance(node, In):
        hit = any(_equal(value, v) for v in node.values)
        return not hit if node.negate else hit
    op, ref = node.op, node.value
    if op == "eq":
        return _equal(value, ref)
    if op == "ne":
        return not _equal(value, ref)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if op == "gt":
        return bool(value > ref)  # type: ignore[operator]
    if op == "gte":
        return bool(value >= ref)  # type: ignore[operator]
    if op == "lt":
        return bool(value < ref)  # type: ignore[operator]
    return bool(value <= ref)  # type: ignore[operator]


def matches(flt: Filter | None, record: Record, fields: Mapping[str, FieldType]) -> bool:
    """Parse and evaluate in one step (handy in tests)."""
    return evaluate(parse_filter(flt, fields), record)


# ------------------------------------------------------------------------ LanceDB (SQL string)


def sql_string_literal(value: str) -> str:
    """A SQL string literal: single quotes doubled; NUL refused."""
    if "\x00" in value:
        raise FilterError("filter string values may not contain NUL characters", op="eq")
    return "'" + value.replace("'", "''") + "'"


def _lance_literal(value: Scalar, ftype: FieldType) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return sql_string_literal(value)
    if ftype == "int" and isinstance(value, int):
        return str(int(value))
    return repr(float(value))


def _lance_col(field: str) -> str:
    return f"`{field}`"


_SQL_CMP = {"eq": "=", "ne": "<>", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


def to_lance(node: Node) -> str | None:
    """A LanceDB (DataFusion SQL) where clause, or None for 'match everything'. Every atom is
    written so it is never NULL (missing fields give false, not unknown), so NOT is exact."""
    if isinstance(node, Const):
        return None if node.value else "false"
    return _lance(node)


def _lance(node: Node) -> str:
    if isinstance(node, Const):
        return "true" if node.value else "false"
    if isinstance(node, And):
        return "(" + " AND ".join(_lance(n) for n in node.items) + ")"
    if isinstance(node, Or):
        return "(" + " OR ".join(_lance(n) for n in node.items) + ")"
    if isinstance(node, Not):
        return f"(NOT {_lance(node.item)})"
    col = _lance_col(node.field)
    if isinstance(node, Exists):
        return f"({col} IS {'NOT ' if node.present else ''}NULL)"
    if isinstance(node, In):
        vals = ", ".join(_lance_literal(v, node.ftype) for v in node.values)
        return f"({col} IS NOT NULL AND {col} {'NOT ' if node.negate else ''}IN ({vals}))"
    assert node.value is not None
    lit = _lance_literal(node.value, node.ftype)
    return f"({col} IS NOT NULL AND {col} {_SQL_CMP[node.op]} {lit})"


# --------------------------------------------------------------------------------- Postgres


def to_pg(
    node: Node, columns: Mapping[str, str] | None = None, *, named: str | None = None
) -> _sql.Composable:
    """A ``psycopg.sql`` condition with ``%s`` placeholders (each cast to the column's type);
    the values travel separately as parameters, from `pg_params`, never formatted into SQL.
    With ``named``, the placeholders are ``%(<named>0)s``, ``%(<named>1)s``, ... in the order
    of `pg_params` (a statement that uses the condition twice)."""
    from psycopg import sql

    count = 0

    def col(field: str) -> sql.Composable:
        return sql.Identifier((columns or {}).get(field, field))

    casts = {"str": "text", "int": "bigint", "float": "double precision", "bool": "boolean"}

    def param(ftype: FieldType, array: bool = False) -> sql.Composable:
        nonlocal count
        holder = sql.Placeholder() if named is None else sql.Placeholder(f"{named}{count}")
        count += 1
        return sql.SQL("CAST({} AS {})").format(
            holder, sql.SQL(casts[ftype] + ("[]" if array else ""))
        )

    def go(n: Node) -> sql.Composable:
        if isinstance(n, Const):
            return sql.SQL("TRUE" if n.value else "FALSE")
        if isinstance(n, And):
            return sql.SQL("(") + sql.SQL(" AND ").join(go(x) for x in n.items) + sql.SQL(")")
        if isinstance(n, Or):
            return sql.SQL("(") + sql.SQL(" OR ").join(go(x) for x in n.items) + sql.SQL(")")
        if isinstance(n, Not):
            return sql.SQL("(NOT {})").format(go(n.item))
        c = col(n.field)
        if isinstance(n, Exists):
            return sql.SQL("({} IS NOT NULL)" if n.present else "({} IS NULL)").format(c)
        if isinstance(n, In):
            tmpl = "({c} IS NOT NULL AND {c} <> ALL({p}))" if n.negate else "({c} = ANY({p}))"
            return sql.SQL(tmpl).format(c=c, p=param(n.ftype, array=True))
        return sql.SQL("({c} IS NOT NULL AND {c} " + _SQL_CMP[n.op] + " {p})").format(
            c=c, p=param(n.ftype)
        )

    return go(node)


def pg_params(node: Node) -> list[Any]:
    """The parameters for `to_pg`'s placeholders, in order."""
    out: list[Any] = []

    def conv(v: Scalar, ftype: FieldType) -> Any:
        return float(v) if ftype == "float" else v

    def go(n: Node) -> None:
        if isinstance(n, And | Or):
            for x in n.items:
                go(x)
        elif isinstance(n, Not):
            go(n.item)
        elif isinstance(n, In):
            out.append([conv(v, n.ftype) for v in n.values])
        elif isinstance(n, Cmp):
            out.append(conv(n.value, n.ftype))  # type: ignore[arg-type]

    go(node)
    return out


# ----------------------------------------------------------------------------------- Qdrant


def to_qdrant(node: Node) -> _qm.Filter | None:
    """A Qdrant ``models.Filter``, or None for 'match everything'."""
    from qdrant_client import models as qm

    if isinstance(node, Const):
        if node.value:
            return None
        return qm.Filter(must=[qm.HasIdCondition(has_id=[])])
    return _qdrant(node, qm)


def _present(field: str, qm: Any) -> Any:
    return qm.Filter(must_not=[qm.IsEmptyCondition(is_empty=qm.PayloadField(key=field))])


def _qdrant_eq(field: str, value: Scalar, ftype: FieldType, qm: Any) -> Any:
    if field == ID_FIELD:
        return qm.HasIdCondition(has_id=[value])
    if ftype == "float":
        return qm.FieldCondition(key=field, range=qm.Range(gte=float(value), lte=float(value)))
    return qm.FieldCondition(key=field, match=qm.MatchValue(value=value))


def _qdrant_any(field: str, values: tuple[Scalar, ...], ftype: FieldType, qm: Any) -> Any:
    if field == ID_FIELD:
        return qm.HasIdCondition(has_id=list(values))
    if ftype in ("str", "int"):
        return qm.FieldCondition(key=field, match=qm.MatchAny(any=list(values)))
    return qm.Filter(should=[_qdrant_eq(field, v, ftype, qm) for v in values])


def _qdrant(node: Node, qm: Any) -> Any:
    if isinstance(node, Const):
        return qm.Filter() if node.value else qm.Filter(must=[qm.HasIdCondition(has_id=[])])
    if isinstance(node, And):
        return qm.Filter(must=[_qdrant(n, qm) for n in node.items])
    if isinstance(node, Or):
        return qm.Filter(should=[_qdrant(n, qm) for n in node.items])
    if isinstance(node, Not):
        return qm.Filter(must_not=[_qdrant(node.item, qm)])
    f = node.field
    if isinstance(node, Exists):
        if f == ID_FIELD:
            return qm.Filter() if node.present else qm.Filter(must=[qm.HasIdCondition(has_id=[])])
        cond = qm.IsEmptyCondition(is_empty=qm.PayloadField(key=f))
        return qm.Filter(must_not=[cond]) if node.present else qm.Filter(must=[cond])
    if isinstance(node, In):
        anyc = _qdrant_any(f, node.values, node.ftype, qm)
        if not node.negate:
            return qm.Filter(must=[anyc])
        if f == ID_FIELD:
            return qm.Filter(must_not=[anyc])
        return qm.Filter(must=[_present(f, qm)], must_not=[anyc])
    assert node.value is not None
    if node.op == "eq":
        return qm.Filter(must=[_qdrant_eq(f, node.value, node.ftype, qm)])
    if node.op == "ne":
        eqc = _qdrant_eq(f, node.value, node.ftype, qm)
        if f == ID_FIELD:
            return qm.Filter(must_not=[eqc])
        return qm.Filter(must=[_present(f, qm)], must_not=[eqc])
    rng = qm.Range(**{node.op: float(node.value)})
    return qm.Filter(must=[qm.FieldCondition(key=f, range=rng)])
