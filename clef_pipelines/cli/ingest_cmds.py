"""`init`, `ingest`, `query`, `inspect`, `delete`, `ui`."""
