"""The sentence segmenter: abbreviations, numbers, URLs, e-mails, ellipses, exact spans."""

from __future__ import annotations

import pytest

from clef_pipelines.chunking.sentences import sentence_spans, split_sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Use a token, e.g. The read token. Then sync.",
            ["Use a token, e.g. The read token.", "Then sync."],
        ),
        (
            "Pick one, i.e. The closest region. Done.",
            ["Pick one, i.e. The closest region.", "Done."],
        ),
        (
            "The U.S. Region is in Ohio. EU is in Dublin.",
            ["The U.S. Region is in Ohio.", "EU is in Dublin."],
        ),
        (
            "Dr. Okafor wrote it. Prof. Lind reviewed it.",
            ["Dr. Okafor wrote it.", "Prof. Lind reviewed it."],
        ),
        (
            "The ratio is 3.14 today. It was 2.5 before.",
            ["The ratio is 3.14 today.", "It was 2.5 before."],
        ),
        (
            "Install v1.2.3 now. Version 2.0.1 follows.",
            ["Install v1.2.3 now.", "Version 2.0.1 follows."],
        ),
        (
            "See https://example.com/a.b?c=d for details. Then log in.",
            ["See https://example.com/a.b?c=d for details.", "Then log in."],
        ),
        (
            "Write to help.desk@northwind.example today. We answer fast.",
            ["Write to help.desk@northwind.example today.", "We answer fast."],
        ),
        (
            "Sync paused... then it resumed. All good.",
            ["Sync paused... then it resumed.", "All good."],
        ),
        ("Is it safe? Yes! It is encrypted.", ["Is it safe?", "Yes!", "It is encrypted."]),
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        (
            "Smith et al. Showed this (p = 0.016). Fine.",
            ["Smith et al. Showed this (p = 0.016).", "Fine."],
        ),
        (
            "First paragraph without a stop\n\nSecond one",
            ["First paragraph without a stop", "Second one"],
        ),
        ("no terminal punctuation at all", ["no terminal punctuation at all"]),
    ],
)
def test_segmenter_cases(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_spans_are_exact_and_cover_all_words() -> None:
    text = "  Alpha beta. Gamma e.g. delta 1.5.\n\nEpsilon v2.0.1 zeta!  "
    spans = sentence_spans(text)
    assert [text[s:e] for s, e in spans] == [
        "Alpha beta.",
        "Gamma e.g. delta 1.5.",
        "Epsilon v2.0.1 zeta!",
    ]
    assert " ".join(text[s:e] for s, e in spans).split() == text.split()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_empty_text() -> None:
    assert sentence_spans("") == [] and sentence_spans("   \n ") == []
