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


# --- Markdown reference (docs/configuration.md) -------------------------------------------------

MARKDOWN_COMMAND = "python -m clef_pipelines.config_doc > docs/configuration.md"


def _type_text(annotation: Any) -> str:
    """A short, stable name for a field's type: `int`, `str | None`, `"on" | "off"`, ..."""
    import types
    import typing

    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_text(a) for a in args)
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(_type_text(a) for a in args)}]" if args else name
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _rows(model: type[BaseModel], prefix: str) -> list[str]:
    rows: list[str] = []
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        path = f"{prefix}{name}"
        sub = _model_type(field)
        if sub is not None and _list_item_model(field) is None:
            rows += _rows(sub, f"{path}.")
            continue
        item = _list_item_model(field)
        default = "[]" if item is not None and not field.is_required() else _default_text(field)
        rows.append(
            f"| `{path}` | `{_cell(_type_text(field.annotation))}` | `{_cell(default)}` "
            f"| {_cell(_describe(field))} |"
        )
        if item is not None:
            rows += _rows(item, f"{path}[].")
    return rows


def markdown(model: type[BaseModel] | None = None) -> str:
    """The settings reference as Markdown: one table per top-level section, one row per setting
    (dotted path, type, default, description), in the order the models declare them."""
    if model is None:
        from clef_pipelines.config import Settings

        model = Settings
    header = "| setting | type | default | description |\n|---|---|---|---|"
    out = [
        "# Configuration",
        "",
        "<!-- Generated from the pydantic settings in clef_pipelines/config.py and the models it",
        f"     imports; do not edit. Regenerate: {MARKDOWN_COMMAND} -->",
        "",
        "One YAML file, found the same way by every command, by `clef-pipelines ui` (which hands",
        "it to `dg dev` by absolute path) and by the code location: `--config` if given, else",
        "`$CLEF_PIPELINES_CONFIG`, else `clef-pipelines.yaml` in the working directory.",
        "Every setting has a default; an unknown key is an error that names the key",
        "and the nearest valid one. `compact` validates only what it reads (`data_dir`,",
        "`private_files`, `clef`, `retrieval`, `steering`) and the top-level keys; a mistake inside",
        "another section is reported by the commands that read it.",
        "`clef-pipelines init` writes a starter file with every setting",
        "and its meaning as a comment. A setting ending in `_env` names the environment variable",
        "that holds a secret; the secret itself never goes in the file. `x[].y` is the field `y`",
        "of each entry of the list `x`. A setting that takes `on` / `off` takes them unquoted",
        "too (YAML 1.1 reads them as booleans).",
    ]
    top: list[str] = []
    sections: list[tuple[str, str, list[str]]] = []
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        sub = _model_type(field)
        if sub is not None and _list_item_model(field) is None:
            sections.append((name, _describe(field, sub), _rows(sub, f"{name}.")))
        else:
            top.append(name)
    top_rows = [r for r in _rows(model, "") if r.split("`")[1].split("[")[0] in top]
    out += ["", "## Top level", "", header, *top_rows]
    for name, text, rows in sections:
        out += ["", f"## `{name}`", ""]
        if text:
            out += [text, ""]
        out += [header, *rows]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(markdown())
