"""The tests' S3 on loopback: moto's server behind a proxy that fails chosen requests.

It lives in `clef_pipelines.testing.s3_server` (the benchmarks use it too, and nothing under
`bench/` imports `tests/`); the fixtures `s3_server` and `s3` are in tests/conftest.py."""

from clef_pipelines.testing.s3_server import (
    KEY,
    KEY_ENV,
    REGION,
    SECRET,
    SECRET_ENV,
    Rule,
    S3Server,
    Traffic,
    running_s3,
)

__all__ = [
    "KEY",
    "KEY_ENV",
    "REGION",
    "SECRET",
    "SECRET_ENV",
    "Rule",
    "S3Server",
    "Traffic",
    "running_s3",
]
