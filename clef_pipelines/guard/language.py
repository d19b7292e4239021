"""The language a document is written in, for a judge that reads one language well.

The offline guard's encoder (all-MiniLM-L6-v2) is an English model. On clean prose in other
languages it is no judge: weights v9 quarantine 75% of the translated man-page paragraphs
(`lab/guard/bench_quality.py --sources manpages-intl`). With `steering.guard.languages` set, the screen
asks this module which language each DOCUMENT is in, and the guard leaves documents in other
languages to Clef; every such paragraph is recorded (`language`, and the run's
`guard_not_judged`), never skipped in silence.

Per document, not per paragraph, on purpose: an instruction in German planted in an English
document is still judged by the guard (an attacker cannot leave the guard's view by changing
the language of one paragraph); only a document written in another language as a whole is.

py3langid (langid.py's model inside its wheel, numpy only, BSD) names the language. The guard
steps aside only when the identifier is sure the document is written in another natural
language: that language gets at least `OTHER_AT` of the probability and each wanted one less
than `WANTED_BELOW`. Text with no language in it (`zxx`: base64, hex) or none clearly (leetspeak,
characters split by backslashes: the probability spread thin) is judged, since obfuscation is
how injections hide. On neuralchemy's test texts this rule leaves 2.0% unjudged where "not
English" alone left 15.3% (docs/BENCHMARKS.md, "The language gate").
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clef_pipelines.guard.deobfuscate import deobfuscated

#: A document is left to Clef when its most likely language is not wanted, gets at least
#: OTHER_AT, and every wanted language gets less than WANTED_BELOW.
OTHER_AT = 0.5
WANTED_BELOW = 0.1
#: langid.py's label for text with no linguistic content (codes, base64): always judged.
NO_LANGUAGE = "zxx"
#: Characters of a document's screened text the identifier reads (its start; enough to be sure).
SAMPLE_CHARS = 4000

_identifier: Any = None
_lock = threading.Lock()


class LanguageCheckUnavailable(RuntimeError):
    """`steering.guard.languages` is set but py3langid is not installed."""


@dataclass(frozen=True)
class DocumentLanguage:
    language: str  # the most likely language (ISO 639-1, as langid.py names them)
    judged: bool  # False only when surely written in a language not wanted


def _identify(text: str) -> dict[str, float]:
    return dict(_loaded().rank(text))


def _loaded() -> Any:
    global _identifier
    with _lock:
        if _identifier is None:
            try:
                import py3langid.langid  # noqa: F401
            except ModuleNotFoundError as exc:
                raise LanguageCheckUnavailable(
                    "steering.guard.languages needs py3langid (the `minilm` extra brings it): "
                    "pip install 'clef-pipelines[minilm]', or unset the setting"
                ) from exc
            from clef_pipelines.guard.langid_model import load_identifier

            # Unpacked once per machine and memory-mapped (`langid_model`), not per process.
            _identifier = load_identifier(norm_probs=True)
    return _identifier


def check_codes(wanted: Sequence[str]) -> None:
    """A code the identifier does not know (``eng``, ``xx``) would match no document, and the
    guard would leave every document in a known language: refuse it, naming the setting."""
    known = set(_loaded().nb_classes)
    unknown = sorted(set(wanted) - known)
    if unknown:
        raise ValueError(
            f"steering.guard.languages: unknown language code(s) {unknown}; "
            f"py3langid knows {', '.join(sorted(known))}"
        )


def language_of(text: str, wanted: Sequence[str]) -> DocumentLanguage:
    """The language of one text, and whether the guard judges it: always, unless the text is
    surely written in a natural language outside `wanted`."""
    sample = text[:SAMPLE_CHARS]
    # An English instruction written in fullwidth or look-alike letters is English: identify
    # the reading the guard decodes too (``deobfuscate``), so encoding cannot pass as a language.
    probabilities = _identify(deobfuscated(sample) or sample)
    top = max(probabilities, key=probabilities.__getitem__)
    other = (
        top not in wanted
        and top != NO_LANGUAGE
        and probabilities[top] >= OTHER_AT
        and all(probabilities.get(lang, 0.0) < WANTED_BELOW for lang in wanted)
    )
    return DocumentLanguage(top, not other)


def document_languages(
    doc_ids: Sequence[str], texts: Sequence[str], wanted: Sequence[str]
) -> dict[str, DocumentLanguage]:
    """doc_id -> its language, from the document's texts (in order) read together."""
    check_codes(wanted)
    joined: dict[str, list[str]] = {}
    for doc_id, text in zip(doc_ids, texts, strict=True):
        parts = joined.setdefault(doc_id, [])
        if sum(len(p) for p in parts) < SAMPLE_CHARS:
            parts.append(text)
    return {doc_id: language_of("\n\n".join(parts), wanted) for doc_id, parts in joined.items()}
