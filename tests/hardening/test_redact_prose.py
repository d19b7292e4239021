"""Redaction masks credentials, not the words after "token", "basic" or "bearer" in a question
or a passage: the demo's first question used to print as "a personal access token *** before it
expires"."""

from __future__ import annotations

import pytest

from clef_pipelines.redact import MASK, redact


@pytest.mark.parametrize(
    "text",
    [
        "How long does a personal access token last before it expires?",
        "Use basic authentication only on a private network.",
        "Token Expires is shown in the admin console.",
        "A bearer of the card may enter.",
    ],
)
def test_prose_after_token_or_basic_is_kept(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("sent Bearer abc123", "abc123"),
        ("proxy Bearer zz-unknown-token-9", "zz-unknown-token-9"),
        ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
        ("header was token ghp_abc123", "ghp_abc123"),
        ("basic QWxhZGRpbjpvcGVu", "QWxhZGRpbjpvcGVu"),
    ],
)
def test_credentials_after_a_scheme_are_masked(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out and MASK in out
