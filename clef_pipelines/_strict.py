"""The base for every config model: unknown keys are errors, not silently ignored."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict


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
