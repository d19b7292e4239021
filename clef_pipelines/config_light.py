"""Settings sections without pydantic, for a cold `compact`: the same names, defaults and
values as the models, read from a table derived from them.

pydantic's import and its first model cost about 0.5 G instructions, more than a whole
cold run of clef-compactor, so a one-shot `compact` reads `clef`, `retrieval` and
`steering.guard` here. The models stay the one source: `SPECS` (in `config_light_spec.py`)
is generated from their fields (`python -m clef_pipelines.config_light`, then `ruff format`),
and `tests/test_config_light.py` fails when it no longer matches them.

`light_section(name, raw)` takes only what it checks exactly as pydantic would (a value of the
field's own type, within its bounds or choices); anything else (a value pydantic would
coerce or refuse, a field with a validator of its own) gives None, and the caller lets the
model decide: the same values, or the model's own error lines. What it builds is a `Section`:
plain attributes, `model_copy` and `model_dump` as a model has; `as_model` turns one into the
model itself where a model's methods are needed (the offline guard's weights).
"""

from __future__ import annotations

import copy
import math
from typing import Any

#: `Settings.data_dir`'s default (`config_sections.CompactSettings` uses it too).
DEFAULT_DATA_DIR = ".clef"
#: `Settings.private_files`' default.
DEFAULT_PRIVATE_FILES = True
#: Top-level keys of `Settings` that `compact` does not read: accepted here, not validated
#: (the commands that read them do).
NOT_READ = (
    "collection",
    "sources",
    "parsing",
    "chunking",
    "embedder",
    "store",
    "api",
    "evals",
    "refresh_cron",
    "sync_batch_rows",
    "batching",
    "ingest_lock_timeout_s",
    "object_store",
    "executor",
)
#: Top-level keys `compact` reads (`base_dir` is never a key of the file).
READ = ("data_dir", "local_dir", "private_files", "clef", "retrieval", "steering")

#: The models a cold `compact` reads, by name: module and class.
MODELS = {
    "ClefConfig": "clef_pipelines.clef.config",
    "RetrievalConfig": "clef_pipelines.retrieval.config",
    "GuardConfig": "clef_pipelines.guard.config",
}


def yaml_switch(value: object) -> object:
    """A YAML 1.1 boolean read back as the word it was written as: PyYAML reads a bare `on`,
    `yes` or `true` as True and `off`, `no` or `false` as False, so the README's own
    `mode: on` reached the model as a bool. Applied before the Literal check, so any other
    value is still refused with the choices named."""
    if value is True:
        return "on"
    if value is False:
        return "off"
    return value


def yaml_off(value: object) -> object:
    """`yaml_switch` for a setting whose choices hold `off` but not `on` (`clef.backend`): a
    bare `off` is False in YAML; True stays a bool and is refused."""
    return "off" if value is False else value


#: The models' before-validators that `light_section` applies too: they change no string.
BEFORE = {"yaml_switch": yaml_switch, "yaml_off": yaml_off}


class Section:
    """A settings section read without pydantic: its fields as attributes."""

    def __init__(self, model: str, values: dict[str, Any]) -> None:
        self.__dict__.update(values)
        self.__dict__["_model"] = model

    def model_dump(self) -> dict[str, Any]:
        return {
            k: v.model_dump() if isinstance(v, Section) else copy.deepcopy(v)
            for k, v in self.__dict__.items()
            if k != "_model"
        }

    def model_copy(self, *, deep: bool = False) -> Section:
        return copy.deepcopy(self) if deep else copy.copy(self)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Section)
            and self._model == other._model
            and self.model_dump() == other.model_dump()
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, as a model is

    def __repr__(self) -> str:
        return f"Section({self._model!r}, {self.model_dump()!r})"


def _specs() -> dict[str, Any]:
    from clef_pipelines.config_light_spec import SPECS

    return SPECS


def _defaults(model: str, values: dict[str, Any]) -> Section:
    """A section from a model's own dump (trusted: the defaults in `SPECS`)."""
    fields = _specs()[model]["fields"]
    out: dict[str, Any] = {}
    for name, value in values.items():
        kind, arg = fields[name][0], fields[name][1]
        out[name] = _defaults(arg, value) if kind == "model" else copy.deepcopy(value)
    return Section(model, out)


_FAIL = object()


def _value(spec: list[Any], value: Any) -> Any:
    """`value` as the model would hold it, or _FAIL when the model must decide."""
    kind, arg, optional, bounds, before = spec[0], spec[1], spec[2], spec[3], spec[5]
    if before is not None:
        value = BEFORE[before](value)
    if value is None:
        return None if optional else _FAIL
    if kind == "model":
        section = light_section(arg, value)
        return _FAIL if section is None else section
    if kind == "bool":
        return value if type(value) is bool else _FAIL
    if kind == "choice":
        return value if type(value) is str and value in arg else _FAIL
    if kind == "str":
        if type(value) is not str:
            return _FAIL
        size = len(value)
    elif kind == "int":
        if type(value) is not int:
            return _FAIL
        size = value
    elif kind == "float":
        if type(value) not in (int, float) or not math.isfinite(value):
            return _FAIL
        value = size = float(value)
    else:
        return _FAIL
    ok = (
        ("ge" not in bounds or size >= bounds["ge"])
        and ("gt" not in bounds or size > bounds["gt"])
        and ("le" not in bounds or size <= bounds["le"])
        and ("lt" not in bounds or size < bounds["lt"])
    )
    return value if ok else _FAIL


def light_section(model: str, raw: Any) -> Section | None:
    """The section `model` (a key of `SPECS`) from `raw` (a config file's mapping for it),
    or None when pydantic must decide (see the module docstring)."""
    spec = _specs()[model]
    fields = spec["fields"]
    if not isinstance(raw, dict) or (raw and spec["checked"]):
        return None
    if any(not isinstance(k, str) or k not in fields for k in raw):
        return None
    out: dict[str, Any] = {}
    for name, field in fields.items():
        if name not in raw:
            default = field[4]
            out[name] = (
                _defaults(field[1], default) if field[0] == "model" else copy.deepcopy(default)
            )
            continue
        value = _value(field, raw[name])
        if value is _FAIL:
            return None
        out[name] = value
    return Section(model, out)


def as_model(section: Any) -> Any:
    """The pydantic model of a `Section` (anything else as it is)."""
    if not isinstance(section, Section):
        return section
    return _all_models()[section._model].model_validate(section.model_dump())


# ---- the table, from the models ------------------------------------------------------------


def _field_spec(field: Any, validated: bool) -> list[Any]:
    """[kind, arg, optional, bounds, default, before-validator] of one pydantic field."""
    import types
    import typing

    import annotated_types as at
    from pydantic import BaseModel
    from pydantic.functional_validators import BeforeValidator

    ann, optional = field.annotation, False
    args = typing.get_args(ann)
    if typing.get_origin(ann) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        ann, optional = (rest[0], True) if len(rest) == 1 else (ann, True)
    bounds: dict[str, Any] = {}
    before = None
    known = True
    for meta in field.metadata:
        if isinstance(meta, BeforeValidator) and BEFORE.get(meta.func.__name__) is meta.func:
            before = meta.func.__name__
            continue
        names = {at.Ge: "ge", at.Gt: "gt", at.Le: "le", at.Lt: "lt"}
        if type(meta) in names:
            bounds[names[type(meta)]] = getattr(meta, names[type(meta)])
        elif isinstance(meta, at.MinLen):
            bounds["ge"] = meta.min_length
        elif isinstance(meta, at.MaxLen):
            bounds["le"] = meta.max_length
        else:
            known = False
    default = field.get_default(call_default_factory=True)
    if isinstance(default, BaseModel):
        default = default.model_dump()
    kind: str
    arg: Any = None
    if not known or validated:
        kind = "other"
    elif ann in (bool, int, float, str):
        kind = ann.__name__
    elif typing.get_origin(ann) is typing.Literal and all(
        type(a) is str for a in typing.get_args(ann)
    ):
        kind, arg = "choice", list(typing.get_args(ann))
    elif isinstance(ann, type) and issubclass(ann, BaseModel) and ann.__name__ in _all_models():
        kind, arg = "model", ann.__name__
    else:
        kind = "other"
    if kind in ("bool", "choice", "model") and bounds:
        kind = "other"
    return [kind, arg, optional, bounds, default, before]


def _all_models() -> dict[str, type]:
    """The models in `MODELS` and every model they hold, by class name."""
    import importlib

    from pydantic import BaseModel

    found: dict[str, type] = {}
    todo = [getattr(importlib.import_module(m), name) for name, m in MODELS.items()]
    while todo:
        cls = todo.pop()
        if cls.__name__ in found:
            continue
        found[cls.__name__] = cls
        for field in cls.model_fields.values():
            ann = field.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                todo.append(ann)
    return found


def specs_from_models() -> dict[str, Any]:
    """`SPECS` as the models say it should be."""
    out: dict[str, Any] = {}
    for name, cls in sorted(_all_models().items()):
        decorators = cls.__pydantic_decorators__
        validated = {f for d in decorators.field_validators.values() for f in d.info.fields}
        out[name] = {
            # A model-level validator may refuse any combination: the model decides.
            "checked": bool(decorators.model_validators),
            "fields": {
                f: _field_spec(field, f in validated) for f, field in cls.model_fields.items()
            },
        }
    return out


if __name__ == "__main__":
    import pprint

    # The module's own functions, not __main__'s copies: the models hold the former.
    from clef_pipelines.config_light import specs_from_models as from_models

    print('"""Generated by `python -m clef_pipelines.config_light` from the settings models:')
    print('do not edit (`tests/test_config_light.py` checks it). See `config_light`."""\n')
    print("from typing import Any\n")
    print("SPECS: dict[str, Any] = " + pprint.pformat(from_models(), width=100, sort_dicts=False))
