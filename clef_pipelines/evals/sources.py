"""An eval dataset is ingested as a source of its own, by the normal ingestion graph.

The source is named after the dataset (so the ingestion and evaluation partitions share a key)
and writes to the collection `<collection_prefix><name>`.
"""

from __future__ import annotations

import re

from clef_pipelines.config import ConfigError, Settings, SourceConfig
from clef_pipelines.evals.config import EvalDatasetConfig
from clef_pipelines.evals.datasets import DatasetError, corpus_path


def eval_collection(settings: Settings, dataset: EvalDatasetConfig) -> str:
    """`<prefix><name>` in the characters every store accepts (no '.', at most 48)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{settings.evals.collection_prefix}{dataset.name}")[:48]


def eval_source(settings: Settings, dataset: EvalDatasetConfig) -> SourceConfig | None:
    """The source that indexes the dataset's documents; None when it has none (bare injection
    texts)."""
    try:
        path = corpus_path(dataset, settings.data_path)
    except DatasetError as exc:
        raise ConfigError(f"evals.datasets[{dataset.name}]: {exc}") from None
    if path is None:
        return None
    return SourceConfig(
        name=dataset.name,
        path=str(path.resolve()),
        kind="jsonl",
        collection=eval_collection(settings, dataset),
    )


def with_eval_sources(settings: Settings) -> Settings:
    """Settings whose sources include one per eval dataset. A configured source of the same name
    must be that very source (same path and collection), else the clash is an error."""
    if not settings.evals.datasets:
        return settings
    sources = list(settings.sources)
    by_name = {s.name: s for s in sources}
    for dataset in settings.evals.datasets:
        wanted = eval_source(settings, dataset)
        if wanted is None:
            continue
        have = by_name.get(dataset.name)
        if have is None:
            sources.append(wanted)
            continue
        if settings.resolve(have.path) != settings.resolve(wanted.path) or settings.collection_of(
            have
        ) != (wanted.collection or settings.collection):
            raise ConfigError(
                f"evals.datasets: {dataset.name!r} is also the name of a configured source with "
                "another path or collection; rename the dataset"
            )
    return settings.model_copy(update={"sources": sources})
