"""`config_light`: the table matches the settings models, and every value it takes gives what
the model gives (a value the model would coerce or refuse is left to the model)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from clef_pipelines.config_light import (
    Section,
    _all_models,
    as_model,
    light_section,
    specs_from_models,
)
from clef_pipelines.config_light_spec import SPECS


def same(a: Any, b: Any) -> bool:
    """Equal values of the same types all the way down (True is not 1, 1.0 is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    return a == b


def model_class(name: str) -> Any:
    return _all_models()[name]


def test_the_table_is_the_models() -> None:
    assert specs_from_models() == SPECS, (
        "regenerate: python -m clef_pipelines.config_light > clef_pipelines/config_light_spec.py"
        " && ruff format clef_pipelines/config_light_spec.py"
    )


def candidates(field: list[Any]) -> list[Any]:
    kind, arg, _optional, bounds, default, _before = field
    out: list[Any] = [None, True, False, 0, 1, -1, 0.5, 1.0, 2, 3.0, 64, 65, 257, 10**6]
    out += [float("inf"), float("nan"), "", " ", "x", "on", "off", "yes", "1", "0.5", [], {}]
    out += [["en"], {"mode": "off"}, default]
    for bound in bounds.values():
        out += [bound, bound - 1, bound + 1, bound - 0.5, bound + 0.5, float(bound)]
    if kind == "choice":
        out += [*arg, arg[0].upper(), arg[0] + " "]
    if kind == "str" and bounds:
        out += ["a" * int(b) for b in bounds.values() if b >= 0] + [
            "a" * (int(max(bounds.values())) + 1)
        ]
    return out


def check(name: str, raw: dict[str, Any]) -> bool:
    """light_section agrees with the model on `raw`; True when it took it."""
    cls = model_class(name)
    try:
        expected: Any = cls.model_validate(raw).model_dump()
    except ValidationError:
        expected = None
    got = light_section(name, raw)
    if got is None:
        return False
    assert expected is not None, f"{name}: light took what the model refuses: {raw!r}"
    assert same(got.model_dump(), expected), (name, raw, got, expected)
    return True


@pytest.mark.parametrize("name", sorted(SPECS))
def test_each_field_and_value_gives_the_models_value_or_is_left_to_it(name: str) -> None:
    took = 0
    for field_name, field in SPECS[name]["fields"].items():
        for value in candidates(field):
            took += check(name, {field_name: value})
    assert check(name, {}) and took > 0
    assert not check(name, {"no_such_key": 1})


def test_nested_sections_and_defaults() -> None:
    raw = {"top_k": 7, "compact": {"token_budget": 900}, "gate": {"mode": "off"}}
    assert check("RetrievalConfig", raw)
    assert not check("RetrievalConfig", {"compact": {"token_budget": 0}})
    assert not check("RetrievalConfig", {"compact": None})
    got = light_section("RetrievalConfig", raw)
    assert isinstance(got, Section) and got.select.max_passages == 5
    copied = got.model_copy(deep=True)
    copied.select.max_passages = 200
    assert got.select.max_passages == 5 and copied != got
    assert check("GuardConfig", {"mode": "shadow", "context": {"neighbours": 2}})
    assert not check("GuardConfig", {"languages": ["en"]})  # a validator of its own


def test_as_model_gives_the_model() -> None:
    guard = light_section("GuardConfig", {"mode": "off", "threshold": 0.7})
    model = as_model(guard)
    assert type(model).__name__ == "GuardConfig"
    assert model == model_class("GuardConfig").model_validate({"mode": "off", "threshold": 0.7})
    assert as_model(model) is model
