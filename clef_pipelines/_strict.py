"""The base for every config model: unknown keys are errors, not silently ignored."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict

# Here since `config_light` (settings without pydantic) applies them too.
from clef_pipelines.config_light import yaml_off, yaml_switch  # noqa: F401 - yaml_off: its users import it here

#: A stage's mode: `on` asks and acts; `shadow` asks and records what it would have done but
#: acts as `off`; `off` asks nothing. Unquoted `on` / `off` in YAML are accepted.
Mode = Annotated[Literal["on", "shadow", "off"], BeforeValidator(yaml_switch)]

#: A switch without a shadow mode; unquoted `on` / `off` in YAML are accepted.
OnOff = Annotated[Literal["on", "off"], BeforeValidator(yaml_switch)]

# Source and dataset names become partition keys, folder names and report titles.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class StrictModel(BaseModel):
    """A pydantic model that rejects unknown keys (see `config.load_settings` for the hint)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def check_name(kind: str, value: str) -> str:
    """`value` if it is a valid `kind` name (source, dataset), else a ValueError naming it."""
    if not _NAME.fullmatch(value):
        raise ValueError(
            f"{kind} name {value!r} must start with a letter or digit and hold only "
            "letters, digits, '.', '_' and '-'"
        )
    return value
