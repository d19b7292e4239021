"""The settings as a commented YAML file: each setting with its meaning and default (`init`).

Written from the pydantic models themselves (field descriptions and defaults), so a new setting
is documented in the starter file as soon as it has a description.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

WIDTH = 100


def _model_type(field: FieldInfo) -> type[BaseModel] | None:
    ann = field.annotation
    for candidate in (ann, *getattr(ann, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _list_item_model(field: FieldInfo) -> type[BaseModel] | None:
    args = getattr(field.annotation, "__args__", ())
    if len(args) == 1 and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0]
    return None


def _default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return json.dumps(value, default=str)


def _comment(text: str, pad: str) -> list[str]:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(pad) + 2 + len(line) + 1 + len(word) > WIDTH:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    if line:
        lines.append(line)
    return [f"{pad}# {line}" for line in lines]


def _describe(field: FieldInfo, model: type[BaseModel] | None = None) -> str:
    text = (field.description or "").strip()
    if not text and model is not None:
        text = (model.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(text.split())


def _value_lines(name: str, value: Any, pad: str) -> list[str]:
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        dumped = yaml.safe_dump({name: value}, sort_keys=False, width=1000)
        return [pad + line for line in dumped.rstrip("\n").splitlines()]
    # Scalars and lists of scalars as JSON, which YAML reads as the same values.
    return [f"{pad}{name}: {json.dumps(value)}"]


def commented_yaml(model: BaseModel, indent: int = 0) -> str:
    """YAML for `model`: a comment before every setting (meaning, then its default)."""
    pad = " " * indent
    lines: list[str] = []
    for name, field in type(model).model_fields.items():
        if field.exclude:
            continue
        value = getattr(model, name)
        sub = _model_type(field)
        if sub is not None and isinstance(value, BaseModel):
            lines.append("")
            lines += _comment(_describe(field, sub), pad)
            lines.append(f"{pad}{name}:")
            lines.append(commented_yaml(value, indent + 2))
            continue
        item = _list_item_model(field)
        lines += _comment(f"{_describe(field)} (default: {_default_text(field)})", pad)
        if item is not None:
            lines += _comment(f"Each entry: {' '.join((item.__doc__ or '').split())}", pad)
            for sub_name, sub_field in item.model_fields.items():
                lines += _comment(
                    f"  {sub_name}: {_describe(sub_field)} (default: {_default_text(sub_field)})",
                    pad,
                )
            value = [v.model_dump(mode="json") for v in value]
        elif isinstance(value, BaseModel):
            value = value.model_dump(mode="json")
        lines += _value_lines(name, json.loads(json.dumps(value, default=str)), pad)
    return "\n".join(lines)
