"""What kind of location a string names: an object-store URL, a web URL or a local path.

Apart from `objectstore` (which re-exports these names) so that a settings object can tell
where its data lives without importing the object-store settings model (pydantic).
"""

from __future__ import annotations

import os

#: URL scheme -> the extra that installs its fsspec implementation.
CLOUD_SCHEMES = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "gcs": "gcs",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
}
WEB_SCHEMES = ("http", "https")


def scheme_of(location: str | os.PathLike[str]) -> str | None:
    """The URL scheme of `location` in lower case (None for a local path, a Windows drive
    letter included)."""
    text = str(location)
    head, sep, _ = text.partition("://")
    if not sep or len(head) < 2 or not head.replace("+", "").replace("-", "").isalnum():
        return None
    return head.lower()


def is_cloud_url(location: str | os.PathLike[str]) -> bool:
    return scheme_of(location) in CLOUD_SCHEMES


def is_web_url(location: str | os.PathLike[str]) -> bool:
    return scheme_of(location) in WEB_SCHEMES


def is_remote(location: str | os.PathLike[str]) -> bool:
    """Whether `location` is an object-store or web URL rather than a local path."""
    return is_cloud_url(location) or is_web_url(location)
