"""Evaluation settings: which labelled datasets to evaluate, how deep to recall, which systems."""

from __future__ import annotations

from pydantic import Field, field_validator

from clef_pipelines._strict import StrictModel, check_name

DATASET_KINDS = ("beir", "squad", "jsonl", "injections")


class EvalDatasetConfig(StrictModel):
    """One labelled dataset, named by `KIND:PATH` (the partition key is `name`)."""

    name: str = Field(description="Partition key; also the name of the dataset's source.")
    spec: str = Field(description="KIND:PATH with KIND one of beir, squad, jsonl, injections.")
    split: str = Field("train", description="Qrels split of a BEIR directory.")
    limit: int | None = Field(None, ge=1, description="Evaluate only the first N queries.")
    host: str | None = Field(
        None,
        description="injections only: a squad:PATH whose paragraphs receive planted injections.",
    )

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str) -> str:
        return check_name("dataset", v)

    @field_validator("spec")
    @classmethod
    def _valid_spec(cls, v: str) -> str:
        kind, sep, path = v.partition(":")
        if not sep or kind not in DATASET_KINDS or not path:
            raise ValueError(
                f"dataset {v!r} must be KIND:PATH with KIND one of {', '.join(DATASET_KINDS)}"
            )
        return v

    @property
    def kind(self) -> str:
        return self.spec.partition(":")[0]

    @property
    def path(self) -> str:
        return self.spec.partition(":")[2]


class EvalConfig(StrictModel):
    datasets: list[EvalDatasetConfig] = Field(default_factory=list)
    top_k: int = Field(20, ge=1, le=1000, description="Candidates recalled per query.")
    context_k: int = Field(5, ge=1, description="Chunks the vector system sends to a prompt.")
    systems: list[str] = Field(
        default_factory=lambda: ["all"],
        description="Systems to score ('all', or names from the systems registry).",
    )
    compact_budget: int = Field(
        300, ge=1, description="clef-compact's token budget when retrieval.compact has none."
    )
    bootstrap_samples: int = Field(1000, ge=100, description="Resamples for the 95% intervals.")
    seed: int = Field(13, description="Seed of the bootstrap and of any sampling.")
    clef_note: str | None = Field(
        None, description="Said beside the Clef rows, e.g. which release or endpoint answered."
    )
    collection_prefix: str = Field("eval-", description="A dataset's collection: prefix + name.")

    @field_validator("datasets")
    @classmethod
    def _unique(cls, v: list[EvalDatasetConfig]) -> list[EvalDatasetConfig]:
        names = [d.name for d in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"evals.datasets names must be unique; repeated: {', '.join(dupes)}")
        return v

    def dataset(self, name: str) -> EvalDatasetConfig:
        for d in self.datasets:
            if d.name == name:
                return d
        known = ", ".join(d.name for d in self.datasets) or "none"
        raise ValueError(f"unknown eval dataset {name!r} (configured: {known})")
