"""The filter language itself: parsing, the reference evaluator, and the engine compilers."""

from __future__ import annotations

from typing import Any

import pytest

from clef_pipelines.stores.filters import (
    FALSE,
    TRUE,
    And,
    Cmp,
    Exists,
    FilterError,
    In,
    Not,
    evaluate,
    matches,
    parse_filter,
    pg_params,
    to_lance,
    to_pg,
    to_qdrant,
    with_quarantine,
)

F: dict[str, Any] = {"s": "str", "n": "int", "x": "float", "b": "bool", "quarantined": "bool"}


def test_shorthand_and_multi_operator_objects() -> None:
    assert parse_filter({"s": "a"}, F) == Cmp("s", "eq", "a", "str")
    assert parse_filter({"n": {"gt": 1, "lt": 5}}, F) == And(
        (Cmp("n", "gt", 1, "int"), Cmp("n", "lt", 5, "int"))
    )
    assert parse_filter({"s": "a", "n": 2}, F) == And(
        (Cmp("s", "eq", "a", "str"), Cmp("n", "eq", 2, "int"))
    )
    assert parse_filter({"s": {"in": ["a", "a", "b"]}}, F) == In("s", ("a", "b"), False, "str")


def test_simplification() -> None:
    assert parse_filter(None, F) is TRUE
    assert parse_filter({}, F) == TRUE
    assert parse_filter({"s": {"in": []}}, F) == FALSE
    assert parse_filter({"s": {"nin": []}}, F) == Exists("s", True, "str")
    assert parse_filter({"or": []}, F) == FALSE
    assert parse_filter({"and": []}, F) == TRUE
    assert parse_filter({"not": {"not": {"s": "a"}}}, F) == Cmp("s", "eq", "a", "str")
    assert parse_filter({"s": None}, F) == Exists("s", False, "str")
    assert parse_filter({"s": {"ne": None}}, F) == Exists("s", True, "str")


@pytest.mark.parametrize(
    ("flt", "record", "want"),
    [
        ({"n": {"ne": 1}}, {}, False),
        ({"n": {"nin": [1]}}, {}, False),
        ({"n": {"gt": 0}}, {"n": None}, False),
        ({"not": {"n": {"gt": 0}}}, {}, True),
        ({"n": {"exists": False}}, {"n": None}, True),
        ({"b": False}, {"b": False}, True),
        ({"b": False}, {}, False),
        ({"n": 1}, {"n": True}, False),  # booleans are not numbers
        ({"n": {"in": [0, 1]}}, {"n": False}, False),
        ({"x": 1}, {"x": 1.0}, True),
        ({"x": {"gte": 1, "lt": 2}}, {"x": 1.5}, True),
        ({"or": [{"s": "a"}, {"n": 3}]}, {"s": "b", "n": 3}, True),
        ({"id": {"nin": ["a"]}}, {"id": "b"}, True),
    ],
)
def test_reference_evaluator(flt: dict[str, Any], record: dict[str, Any], want: bool) -> None:
    assert matches(flt, record, F) is want


@pytest.mark.parametrize(
    ("flt", "op", "field"),
    [
        ({"s": {"like": "a%"}}, "like", "s"),
        ({"zz": 1}, "eq", "zz"),
        ({"zz": {"in": [1]}}, "in", "zz"),
        ({"n": True}, "eq", "n"),
        ({"n": 1.5}, "eq", "n"),
        ({"x": {"gt": True}}, "gt", "x"),
        ({"b": {"lt": 1}}, "lt", "b"),
        ({"b": 0}, "eq", "b"),
        ({"s": {"gte": "a"}}, "gte", "s"),
        ({"s": {"in": "abc"}}, "in", "s"),
        ({"s": {"exists": 1}}, "exists", "s"),
        ({"s": {}}, "<none>", "s"),
        ({"x": {"lt": float("inf")}}, "lt", "x"),
        ({"s": "a\x00b"}, "eq", "s"),
    ],
)
def test_errors_name_operator_and_field(flt: dict[str, Any], op: str, field: str) -> None:
    with pytest.raises(FilterError) as err:
        parse_filter(flt, F)
    assert err.value.op == op and err.value.field == field
    assert repr(field) in str(err.value)


def test_structural_errors() -> None:
    for bad in ([1], {"and": {"s": "a"}}, {"or": "x"}, {"not": 3}):
        with pytest.raises(FilterError):
            parse_filter(bad, F)  # type: ignore[arg-type]


def test_quarantine_clause() -> None:
    node = with_quarantine(TRUE, F, include=False)
    assert node == Not(Cmp("quarantined", "eq", True, "bool"))
    assert evaluate(node, {}) and evaluate(node, {"quarantined": False})
    assert not evaluate(node, {"quarantined": True})
    assert with_quarantine(TRUE, F, include=True) is TRUE


def test_lance_literals_are_escaped() -> None:
    where = to_lance(parse_filter({"s": "it's' OR '1'='1"}, F))
    assert where == "(`s` IS NOT NULL AND `s` = 'it''s'' OR ''1''=''1')"
    assert to_lance(TRUE) is None
    assert to_lance(parse_filter({"b": True, "x": 0.5}, F)) == (
        "((`b` IS NOT NULL AND `b` = true) AND (`x` IS NOT NULL AND `x` = 0.5))"
    )


def test_pg_values_travel_as_parameters() -> None:
    node = parse_filter(
        {"s": "x'; DROP TABLE t; --", "n": {"in": [1, 2]}, "x": {"gt": 1}, "not": {"b": True}},
        F,
    )
    text = to_pg(node).as_string(None)
    assert "DROP" not in text and "'" not in text
    assert text.count("%s") == 4
    assert pg_params(node) == ["x'; DROP TABLE t; --", [1, 2], 1.0, True]


def test_qdrant_compiles_to_models() -> None:
    from qdrant_client import models as qm

    flt = to_qdrant(parse_filter({"s": {"nin": ["a"]}, "or": [{"n": 1}, {"x": 2.5}]}, F))
    assert isinstance(flt, qm.Filter)
    assert to_qdrant(TRUE) is None
    assert isinstance(to_qdrant(FALSE), qm.Filter)
