"""clef-pipelines: RAG ingestion, retrieval and evaluation on Dagster, steered by Clef."""

__version__ = "0.1.0"
