"""The base for every config model: unknown keys are errors, not silently ignored."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A pydantic model that rejects unknown keys (see `config.load_settings` for the hint)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
