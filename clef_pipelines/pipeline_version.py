"""The version of the ingestion pipeline's output, alone in a module that imports nothing: the
CLI's no-change check (`ingest.clean_runs`) folds it in without importing polars."""

# 2: steering fields (quarantine reason, judges, needs_rescreen / needs_reenrich).
# 3: MyST directives parsed and tiny sections joined (issue 55): every document's chunks change.
PIPELINE_VERSION = "3"
