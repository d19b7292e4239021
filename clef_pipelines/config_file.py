"""Finding, reading and explaining the config file, without the settings models.

`config.load_settings` validates the whole file with `config.Settings`, which imports every
section's model (stores, embedder, API, evals, ingest...). A one-shot command that reads a
few sections (`compact`: see `config_sections`) reads the file here and validates only
those, with the same models, the same rules for unknown keys and the same error lines.
"""

from __future__ import annotations

import os
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


def read_config_file(cfg_path: Path) -> dict[str, Any]:
    """The mapping a config file holds, or a ConfigError naming the file."""
    import yaml

    if not cfg_path.exists():
        raise ConfigError(f"config file not found: {cfg_path}")
    try:
        raw = yaml.safe_load(cfg_path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config file {cfg_path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {cfg_path} must hold a mapping at the top level")
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
        from clef_pipelines.objectstore import is_cloud_url

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
