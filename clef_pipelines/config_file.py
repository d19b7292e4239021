"""Finding, reading and explaining the config file, without the settings models.

`config.load_settings` validates the whole file with `config.Settings`, which imports every
section's model (stores, embedder, API, evals, ingest...). A one-shot command that reads a
few sections (`compact`: see `config_sections`) reads the file here and validates only
those, with the same models, the same rules for unknown keys and the same error lines.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

CONFIG_ENV = "CLEF_PIPELINES_CONFIG"
DEFAULT_CONFIG_NAME = "clef-pipelines.yaml"


class ConfigError(ValueError):
    """The config file is missing, unreadable or invalid; the message names file and field."""


def find_config_file(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The config file every command, the UI and the code location use (the one rule, in
    docs/configuration.md): `explicit` (`--config`), else $CLEF_PIPELINES_CONFIG, else
    ./clef-pipelines.yaml; None when none of them names a file. The path is absolute, so a
    child process started elsewhere (`ui` runs `dg dev` from the package folder) that is
    handed it reads the same file."""
    if explicit:
        return Path(explicit).resolve()
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Path(env).resolve()
    here = Path.cwd() / DEFAULT_CONFIG_NAME
    return here.resolve() if here.exists() else None


#: Characters of a config file that `plain_json` reads: printable ASCII, space and line
#: ends. No tab, no backslash (no escapes) and nothing YAML reads as a line break or refuses.
_PLAIN_CHARS = frozenset(chr(c) for c in range(0x20, 0x7F)) - {"\\"} | {"\n", "\r"}
_KEY_GAP = re.compile(r"[ \r\n]*:")
#: PyYAML forgets a "simple key" that starts 1024 characters or more before its ':'.
_LONGEST_KEY = 1000


class _NotPlain(Exception):
    """The text is not JSON that YAML reads the same way: YAML must read it."""


def _plain_float(literal: str) -> float:
    # YAML 1.1 reads 1e3 and 1.0e3 (no exponent sign) as strings, not numbers.
    if "e" in literal or "E" in literal:
        raise _NotPlain(literal)
    return float(literal)


def _no_constant(literal: str) -> Any:
    raise _NotPlain(literal)  # NaN, Infinity: JSON's extensions, strings to YAML


def plain_json(text: str) -> tuple[bool, Any]:
    """(True, value) when `text` is JSON that `yaml.safe_load` reads as the same value, else
    (False, None). Why: a config file written as JSON (a program's output; the benchmarks'
    own) then costs no PyYAML import, about 0.1 G instructions of a cold `compact`. Only a
    conservative subset is taken: `_PLAIN_CHARS`, no exponent or NaN, and each key on its
    colon's line and shorter than `_LONGEST_KEY`; anything else, valid JSON included, goes to
    YAML as before. `tests/test_config_file.py` checks that the two readers agree."""
    if not text.lstrip().startswith(("{", "[")) or not _PLAIN_CHARS.issuperset(text):
        return False, None
    # Without backslashes, the text between two quotes is a string and outside them is JSON's
    # punctuation: a string is a key when a colon follows it.
    parts = text.split('"')
    for i in range(1, len(parts) - 1, 2):
        gap = _KEY_GAP.match(parts[i + 1])
        if gap and ("\n" in gap.group() or "\r" in gap.group() or len(parts[i]) > _LONGEST_KEY):
            return False, None
    try:
        return True, json.loads(text, parse_float=_plain_float, parse_constant=_no_constant)
    except (_NotPlain, ValueError):
        return False, None


def read_config_file(cfg_path: Path) -> dict[str, Any]:
    """The mapping a config file holds, or a ConfigError naming the file. YAML, or the JSON
    that YAML reads the same way (`plain_json`), which is read without PyYAML."""
    if not cfg_path.exists():
        raise ConfigError(f"config file not found: {cfg_path}")
    try:
        text = cfg_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {cfg_path}: {exc}") from exc
    is_json, raw = plain_json(text)
    if not is_json:
        import yaml

        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"cannot read config file {cfg_path}: {exc}") from exc
    raw = raw or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {cfg_path} must hold a mapping at the top level")
    # YAML reads `1: x` or `true: x` as a number or a boolean key; every setting is named.
    odd = [key for key in raw if not isinstance(key, str)]
    if odd:
        raise ConfigError(
            f"invalid configuration in {cfg_path}:\n  unknown key {odd[0]!r} "
            f"(a {type(odd[0]).__name__}: every top-level key is a setting's name)"
        )
    return raw


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """Walk a validation error location down the model tree to the model that owns it."""
    from pydantic import BaseModel

    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            return current
        ann = field.annotation
        args = getattr(ann, "__args__", ()) or ()
        candidates = [ann, *args]
        nxt = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
        current = nxt
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def explain_validation_error(err: ValidationError, model: type[BaseModel], origin: str) -> str:
    """Turn pydantic errors into lines naming the file, the dotted field and a suggestion."""
    import difflib

    lines = [f"invalid configuration in {origin}:"]
    for e in err.errors():
        loc = tuple(e.get("loc", ()))
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        if e.get("type") == "extra_forbidden":
            owner = _model_at(model, loc[:-1])
            key = str(loc[-1])
            hint = ""
            if owner is not None:
                close = difflib.get_close_matches(key, list(owner.model_fields), n=1, cutoff=0.5)
                if close:
                    prefix = ".".join(str(p) for p in loc[:-1])
                    hint = f"; did you mean '{prefix + '.' if prefix else ''}{close[0]}'?"
            lines.append(f"  unknown key '{dotted}'{hint}")
        else:
            lines.append(f"  {dotted}: {e.get('msg')}")
    return "\n".join(lines)


class PathsMixin:
    """`resolve` and `data_path` of a settings model with `base_dir` and `data_dir`."""

    base_dir: str
    data_dir: str
    local_dir: str | None

    def resolve(self, path: str) -> Path:
        p = Path(path).expanduser()
        return p if p.is_absolute() else (Path(self.base_dir) / p).resolve()

    @property
    def data_url(self) -> str | None:
        """`data_dir` when it is an object-store URL (s3://, gs://, az://), else None."""
        from clef_pipelines.urls import is_cloud_url

        return self.data_dir.rstrip("/") if is_cloud_url(self.data_dir) else None

    @property
    def data_path(self) -> Path:
        """The local data folder: `data_dir`, or `local_dir` (default `.clef`) when `data_dir`
        is an object-store URL (caches, locks and a run's staging stay on local disk)."""
        if self.data_url is not None:
            return self.resolve(self.local_dir or ".clef")
        return self.resolve(self.data_dir)

    @property
    def intermediates_location(self) -> str:
        """Where the Parquet intermediates live: `<data_dir>/intermediates`, a URL or a path."""
        if self.data_url is not None:
            return f"{self.data_url}/intermediates"
        return str(self.data_path / "intermediates")
