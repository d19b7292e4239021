"""The evaluation job (`jobs.launch.run_evaluation` runs it in-process for the CLI)."""

from __future__ import annotations

import dagster as dg

from clef_pipelines.assets.evaluation import GROUP

eval_job = dg.define_asset_job(
    name="eval_job",
    selection=dg.AssetSelection.groups(GROUP),
    description=(
        "Evaluate one labelled dataset: candidates once, every system scored on them, the "
        "report. Ingest the dataset's source first (ingestion_job, same partition key)."
    ),
    executor_def=dg.in_process_executor,
)
