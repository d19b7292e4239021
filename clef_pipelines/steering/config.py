"""Steering settings: which stages ask Clef, the thresholds that turn answers into decisions,
the taxonomy and the custom questions. Every threshold is visible here, in the YAML.

`mode` of a stage: `on` asks and acts; `shadow` asks and records every probability and the
decision it would have taken, but acts as `off` (nothing is cut, quarantined or retagged);
`off` asks nothing.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from clef_pipelines._strict import Mode, StrictModel
from clef_pipelines.guard.config import GuardConfig

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
#: Paragraph kinds the screen asks about; headings and code are never screened.
SCREENABLE_KINDS = ("paragraph", "list_item", "table", "quote")


def _check_name(value: str, what: str) -> str:
    if not _NAME.match(value):
        raise ValueError(
            f"{what} {value!r} must be lower case letters, digits and '_', starting with a "
            "letter (at most 40): it becomes a stored field name"
        )
    return value


class ScreenConfig(StrictModel):
    """The paragraph screen (`screened_paragraphs`): every paragraph, list item, table and
    quote is asked whether it is boilerplate and whether it instructs an AI."""

    mode: Mode = Field("on", description="on | shadow | off for the Clef screen.")
    drop_boilerplate_at: float = Field(0.85, ge=0, le=1, description="P(boilerplate) that cuts.")
    quarantine_instructs_ai_at: float = Field(
        0.70, ge=0, le=1, description="P(instructs_ai) that quarantines."
    )
    judges: Literal["either", "clef", "guard", "both"] = Field(
        "either",
        description=(
            "With Clef on, who quarantines: either judge (the default: the guard catches what "
            "Clef misses and the other way round), only Clef, only the guard, or both together. "
            "Both judges' probabilities are always recorded (p_instructs_ai, p_guard)."
        ),
    )
    kinds: list[str] = Field(
        default_factory=lambda: list(SCREENABLE_KINDS),
        description="Block kinds screened (headings and code never are).",
    )
    layout: Literal["state_key", "inline"] = "state_key"
    max_subjects_per_request: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Paragraphs and the chunks asked along with them (steering.preask).",
    )

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, v: list[str]) -> list[str]:
        bad = sorted(set(v) - set(SCREENABLE_KINDS))
        if bad:
            raise ValueError(
                f"cannot screen {bad}: screenable kinds are {list(SCREENABLE_KINDS)} "
                "(headings and code are never screened)"
            )
        return v


class TaxonomyField(StrictModel):
    """One tag field: exactly one of its options per chunk, `other` included."""

    name: str
    description: str = Field("", description="What the field classifies (sent to Clef).")
    options: dict[str, str | None] = Field(
        description="Option id -> short description (or null); must include `other`."
    )
    route: bool = Field(
        False,
        description="Queries may be routed by this field (retrieval.route filters tag_<name>).",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "taxonomy field")

    @field_validator("options")
    @classmethod
    def _options(cls, v: dict[str, str | None]) -> dict[str, str | None]:
        if "other" not in v:
            raise ValueError("every taxonomy field needs an `other` option")
        if len(v) < 2 or len(v) > 255:
            raise ValueError("a taxonomy field has 2 to 255 options (`other` included)")
        return v


class Taxonomy(StrictModel):
    fields: list[TaxonomyField] = Field(default_factory=list)

    @field_validator("fields")
    @classmethod
    def _unique(cls, v: list[TaxonomyField]) -> list[TaxonomyField]:
        names = [f.name for f in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"taxonomy field names must be unique; repeated: {dupes}")
        return v


def load_taxonomy(path: str | Path) -> Taxonomy:
    """Read a taxonomy YAML (`fields: [{name, description, options: {id: description}}]`);
    errors name the file and the field."""
    # Imported here: a cold `compact` without a config file reads no YAML (about 6% of it).
    import yaml

    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read taxonomy file {p}: {exc}") from exc
    if isinstance(raw, list):
        raw = {"fields": raw}
    try:
        return Taxonomy.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first.get("loc", ()))
        msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        raise ValueError(f"invalid taxonomy in {p}: {loc}: {msg}") from None


class CustomQuestion(StrictModel):
    """A question of your own, asked about every chunk; stored as `x_<name>`: P(true) for a
    noul, the chosen option for a choice, the weighted level for a score."""

    name: str
    type: Literal["noul", "choice", "score"] = "noul"
    instructions: str = Field(min_length=3)
    criteria: dict[str, str | None] | list[str] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "custom question")

    @model_validator(mode="after")
    def _criteria(self) -> CustomQuestion:
        if self.type == "choice" and not (isinstance(self.criteria, dict) and self.criteria):
            raise ValueError(f"custom question {self.name!r}: a choice needs criteria {{id: ...}}")
        if self.type == "score" and not (
            isinstance(self.criteria, list) and 2 <= len(self.criteria) <= 10
        ):
            raise ValueError(f"custom question {self.name!r}: a score needs 2 to 10 levels")
        if self.type == "noul" and self.criteria is not None:
            raise ValueError(f"custom question {self.name!r}: a noul takes no criteria")
        return self


class EnrichConfig(StrictModel):
    """Chunk enrichment (`enrichments`): quality answers, taxonomy tags, custom questions."""

    mode: Mode = Field("on", description="on | shadow | off.")
    drop_at: float = Field(
        0.85, ge=0, le=1, description="P(low_information) or P(boilerplate) that drops a chunk."
    )
    quarantine_at: float = Field(0.70, ge=0, le=1, description="P(instructs_ai) that quarantines.")
    taxonomy: Taxonomy | None = Field(None, description="Tag fields inline ...")
    taxonomy_file: str | None = Field(None, description="... or a YAML file of them.")
    tag_min_confidence: float = Field(
        0.5, ge=0, le=1, description="A tag is stored only above this; its probability always."
    )
    questions: list[CustomQuestion] = Field(default_factory=list)
    max_subjects_per_request: int | None = Field(None, ge=1, le=64)

    @model_validator(mode="after")
    def _one_taxonomy(self) -> EnrichConfig:
        if self.taxonomy is not None and self.taxonomy_file:
            raise ValueError("give enrich.taxonomy or enrich.taxonomy_file, not both")
        names = [q.name for q in self.questions]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"custom question names must be unique; repeated: {dupes}")
        return self

    def resolved_taxonomy(self, base_dir: str | Path = ".") -> Taxonomy:
        if self.taxonomy is not None:
            return self.taxonomy
        if self.taxonomy_file:
            p = Path(self.taxonomy_file).expanduser()
            return load_taxonomy(p if p.is_absolute() else Path(base_dir) / p)
        return Taxonomy()


class ChecksConfig(StrictModel):
    """Bounds the ingestion asset checks hold each partition's run to."""

    max_quarantine_rate: float = Field(
        0.02,
        ge=0,
        le=1,
        description=(
            "Share of a run's screened blocks quarantined, at most. 0.02: the guard's "
            "threshold is chosen to quarantine at most 2% of each kind of real prose (0.5 to "
            "1.6% of technical documentation held out), so a run above it holds either an "
            "attack campaign or a kind of document the guard misjudges; both deserve a look "
            "(`clef-pipelines guard --quarantined`, `clef-pipelines release`)."
        ),
    )
    max_drop_rate: float = Field(
        0.5, ge=0, le=1, description="Share of screened blocks and chunks dropped, at most."
    )


class SteeringConfig(StrictModel):
    guard: GuardConfig = GuardConfig()
    screen: ScreenConfig = ScreenConfig()
    enrich: EnrichConfig = EnrichConfig()
    checks: ChecksConfig = ChecksConfig()

    def decision_fingerprint(self) -> dict[str, Any]:
        """What decides which chunks exist (part of each document's hash): changing a
        threshold or mode re-decides the documents, from cached answers, without new
        requests. Taxonomy and custom questions are not here: `reenrich` applies them."""
        s, g, e = self.screen, self.guard, self.enrich
        return {
            # Languages only when set: collections that never set them keep their hashes.
            "guard": [g.mode, g.threshold] + ([sorted(g.languages)] if g.languages else []),
            "screen": [
                s.mode,
                s.drop_boilerplate_at,
                s.quarantine_instructs_ai_at,
                s.judges,
                sorted(s.kinds),
            ],
            "enrich": [e.mode, e.drop_at, e.quarantine_at],
        }
