"""Undo the encodings an instruction can hide in, so that the injection guard also reads it
decoded.

Why: the guard's words and MiniLM's vectors see ``Ignore\\x20all\\x20previous\\x20instructions``
or ``Ignore%20all%20previous%20instructions`` as a string of codes, not as the instruction a
model reading the page would decode and obey. The training data holds a few such encodings
(the guard catches spaced letters, fullwidth letters and HTML entities as written), but an
attacker picks the one it has not seen. So ``deobfuscated`` gives the text with the common
encodings undone, and the guard scores that view's windows next to the text's own
(``guard.main_windows``): a text is as suspect as the worse of its two readings.

Decoded: backslash escapes (``\\x41``, ``\\u0041``, ``\\U00000041``) and HTML character
references to printable characters, percent-encoding, base64 runs that decode to readable text,
invisible format characters (zero-width spaces and joiners, soft hyphens, direction marks),
fullwidth, circled and mathematical letters and digits (``Ｉｇｎｏｒｅ``, ``𝐈𝐠𝐧𝐨𝐫𝐞``), and
Cyrillic or Greek look-alike letters inside a word that also holds Latin letters (``ignоre``
with a Cyrillic ``о``). A word wholly in Cyrillic or Greek is left as it is, and so is
lower-case Greek, which science writes inside Latin names. Leetspeak is not decoded: digits
inside words are too common in real text to be read as letters.

Ordinary prose, in any script, has nothing to decode: ``deobfuscated`` returns None for it
after a few regex searches, and the guard scores it exactly as before, at the same cost.
"""

from __future__ import annotations

import base64
import binascii
import html
import re
import unicodedata
from urllib.parse import unquote

_ESCAPE = re.compile(r"\\(?:x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8}))")
_REFERENCE = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,7});")
_PERCENT = re.compile(r"(?:%[0-9A-Fa-f]{2})+")
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{16,}={0,2}(?![A-Za-z0-9+/=])")
_WORD = re.compile(r"\w+")
_LATIN = re.compile(r"[A-Za-z]")

#: Cyrillic and Greek letters drawn like Latin ones (the usual homoglyph set). Not lower-case
#: Greek: science writes it inside Latin names (NF-κB, TNFα), and reading those as Latin only
#: costs windows.
_LOOKALIKES = str.maketrans(
    {
        **dict(zip("аеорсухіјѕԁԛԝһӏ", "aeopcyxijsdqwhl", strict=True)),
        **dict(zip("АВЕКМНОРСТХУІЈЅ", "ABEKMHOPCTXYIJS", strict=True)),
        **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "ABEZHIKMNOPTYX", strict=True)),
    }
)
_LOOKALIKE_CHARS = frozenset(chr(c) for c in _LOOKALIKES)
_LOOKALIKE_CLASS = "".join(sorted(_LOOKALIKE_CHARS))
#: Invisible format characters: soft hyphen, zero-width spaces and joiners, direction marks
#: and isolates, word joiner, byte-order mark, tag characters.
_INVISIBLE = re.compile(
    "[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
    "\U000e0000-\U000e007f]"
)
#: Fullwidth forms, circled letters, mathematical alphanumerics: NFKC folds them to ASCII.
_FOLDED = re.compile("[\uff01-\uff5e\u24b6-\u24e9\U0001d400-\U0001d7ff]+")
#: Codes in ASCII text: a backslash escape, a character reference, a percent code.
_ASCII_CODES = re.compile(r"\\[xuU][0-9a-fA-F]{2}|&#?[0-9A-Za-z]{2,8};|%[0-9A-Fa-f]{2}")
#: Characters outside ASCII that hide letters: invisible ones, folded ones, and a look-alike
#: next to a Latin letter (prose in Cyrillic or Greek has none of these pairs).
_UNICODE_CODES = re.compile(
    f"{_INVISIBLE.pattern}|{_FOLDED.pattern}|"
    f"[A-Za-z][{_LOOKALIKE_CLASS}]|[{_LOOKALIKE_CLASS}][A-Za-z]"
)


def _printable(text: str) -> bool:
    return all(c.isprintable() or c in "\t\n" for c in text)


def _escape(match: re.Match[str]) -> str:
    code = int(next(g for g in match.groups() if g), 16)
    char = chr(code) if code <= 0x10FFFF else ""
    # An escape of a control character (a terminal colour code) stays as written.
    return char if char and _printable(char) else match.group(0)


def _reference(match: re.Match[str]) -> str:
    char = html.unescape(match.group(0))
    return char if char != match.group(0) and _printable(char) else match.group(0)


def _percent(match: re.Match[str]) -> str:
    try:
        decoded = unquote(match.group(0), errors="strict")
    except UnicodeDecodeError:
        return match.group(0)
    return decoded if _printable(decoded) else match.group(0)


def _may_be_base64(token: str) -> bool:
    """A run worth decoding: whole 4-character groups, and not just a long word (base64 of
    text holds a digit, ``+`` or ``/`` nearly always)."""
    return len(token) % 4 == 0 and not token.rstrip("=").isalpha()


def _base64(match: re.Match[str]) -> str:
    token = match.group(0)
    if not _may_be_base64(token):
        return token
    try:
        decoded = base64.b64decode(token, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return token
    # Readable text: printable, words with spaces between them. A hash or a key decodes
    # to bytes that fail one of these.
    readable = sum(c.isalpha() or c == " " for c in decoded)
    if _printable(decoded) and " " in decoded.strip() and readable >= 0.8 * len(decoded):
        return decoded
    return token


def _lookalikes(match: re.Match[str]) -> str:
    word = match.group(0)
    if _LATIN.search(word) and any(c in _LOOKALIKE_CHARS for c in word):
        return word.translate(_LOOKALIKES)
    return word


def deobfuscated(text: str) -> str | None:
    """``text`` with the encodings above undone, or None when that changes nothing but
    whitespace (nearly all real prose)."""
    if not (
        _ASCII_CODES.search(text)
        or (not text.isascii() and _UNICODE_CODES.search(text))
        or any(_may_be_base64(m.group(0)) for m in _BASE64.finditer(text))
    ):
        return None
    out = text
    # Twice: an escape may hide inside a reference or a percent code ("%5Cx41").
    for _ in range(2):
        out = _INVISIBLE.sub("", out)
        out = _REFERENCE.sub(_reference, out)
        out = _ESCAPE.sub(_escape, out)
        out = _PERCENT.sub(_percent, out)
        out = _BASE64.sub(_base64, out)
    out = _FOLDED.sub(lambda m: unicodedata.normalize("NFKC", m.group(0)), out)
    out = _WORD.sub(_lookalikes, out)
    return out if out.split() != text.split() else None
