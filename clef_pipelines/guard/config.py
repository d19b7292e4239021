"""The offline guard's settings (`steering.guard` in the YAML)."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator

from clef_pipelines._strict import Mode, StrictModel

#: The languages the shipped guard was trained and validated on (MODEL_CARD.md).
DEFAULT_LANGUAGES = ("en",)


class GuardContextConfig(StrictModel):
    """How the guard reads a block with its document around it (``guard/context.py``)."""

    enabled: bool = Field(
        True,
        description=(
            "Judge each block next to the blocks around it: a block the score flags is kept "
            "when it is as close to a neighbour as the document's own blocks are (`fit`), and "
            "a request for a task unlike every neighbour is quarantined (`request_departure`). "
            "false: the score alone decides."
        ),
    )
    neighbours: int = Field(
        3, ge=1, le=20, description="Blocks on each side of a block that are its context."
    )
    fit: float = Field(
        0.35,
        ge=-1,
        le=1,
        description=(
            "Cosine similarity (MiniLM) to the closest neighbour at which a flagged block is "
            "kept as part of its document (`fits_document`); chosen on the guard's validation "
            "documents, docs/steering.md gives the figures. 1: never kept."
        ),
    )
    request_departure: float = Field(
        0.25,
        ge=0,
        le=1,
        description=(
            'A request for a task ("Write a script that ...", "Could you ...") whose '
            "similarity to every neighbour is below this is quarantined as "
            "`off_topic_request`; 0: requests are judged by the score alone."
        ),
    )


class GuardConfig(StrictModel):
    """The offline injection guard: a small classifier on MiniLM vectors, no keys needed."""

    mode: Mode = Field("on", description="on | shadow | off. The only judge when Clef is off.")
    threshold: float | None = Field(
        None, ge=0, le=1, description="P(injection) that quarantines; None: the model's own."
    )
    weights: str | None = Field(
        None,
        description=(
            "A weights file written by the guard's trainer (`lab/guard/`, "
            "not packaged; its README gives the recipes), relative to the config file; None: "
            "the weights shipped in the package. Other weights re-screen every document on the "
            "next run."
        ),
    )
    languages: list[str] | None = Field(
        default_factory=lambda: list(DEFAULT_LANGUAGES),
        min_length=1,
        description=(
            "Languages the guard judges (ISO 639-1); null: every document, whatever its "
            "language. The guard's encoder is English and flags about half of clean prose in "
            "other languages, so by default a document written as a whole in another language "
            "is not judged by the guard: it is kept, each paragraph recorded with its "
            "`language`, counted in the run's `guard_not_judged` and the `guard_coverage` "
            "check, and left to Clef's screen when Clef is on (a warning says so when it is "
            "off). An instruction in another language planted in an English document is still "
            "judged."
        ),
    )

    context: GuardContextConfig = Field(
        default_factory=GuardContextConfig,
        description="Judging a block with its document as context (see `guard/context.py`).",
    )

    @field_validator("languages")
    @classmethod
    def _languages(cls, v: list[str] | None) -> list[str] | None:
        bad = [code for code in v or [] if not re.fullmatch(r"[a-z]{2,3}", code)]
        if bad:
            raise ValueError(f"language codes are ISO 639-1 like 'en' or 'de', got {bad}")
        return v

    def resolved_weights(self, base_dir: str | Path = ".") -> Path | None:
        """The configured weights file as a path (relative to ``base_dir``); None: the
        package's own."""
        if not self.weights:
            return None
        p = Path(self.weights).expanduser()
        return p if p.is_absolute() else (Path(base_dir) / p).resolve()
