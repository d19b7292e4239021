"""Keep secrets out of messages and log lines: URL passwords, bearer keys, configured secrets.

Every Clef error message passes through `redact` (see `clef.errors`), so does everything the
CLI prints as an error, and the loggers of this package carry `RedactingFilter`. Secret values
that are known at run time (an API key read from the environment) are registered with
`register_secret` and replaced wherever they appear, even inside an echoed error body.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Mapping

MASK = "***"

# scheme://user:password@host -> scheme://***@host (any userinfo, with or without a password).
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/\s@?#]+)@")
# `Bearer <token>` / `Basic <token>` in any case, as sent in an Authorization header.
_AUTH_SCHEME = re.compile(
    r"(?i)\b(?P<scheme>bearer|basic|token)(?P<sep>\s+)(?P<value>[A-Za-z0-9._~+/=\-]+)"
)
# An echoed header or a key=value pair: authorization: x, api_key=x, "password": "x".
_KEY_VALUE = re.compile(
    r"(?i)(?P<key>\b(?:authorization|proxy-authorization|x-api-key|api[_-]?key|api[_-]?token|"
    r"access[_-]?token|password|passwd|secret)\b[\"']?\s*[:=]\s*[\"']?)"
    r"(?P<value>(?!\*\*\*)(?:bearer\s+|basic\s+)?[^\s\"',;&}]+)"
)

_secrets: set[str] = set()
_lock = threading.Lock()
# Short values would mask ordinary words; real keys are longer than this.
_MIN_SECRET_LEN = 6


#: The HTTP clients' loggers: at DEBUG, httpcore logs every response header, so a provider
#: that echoes the key in a header would put it in a log line. A logger's filter sees only
#: records made on that very logger, so each one that logs is named.
_HTTP_LOGGERS = ("httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2")


def register_secret(value: str | None) -> None:
    """Mask this exact value from now on, wherever it appears in a message (ours, or a log
    line of the HTTP client that carried it)."""
    if value and len(value) >= _MIN_SECRET_LEN:
        with _lock:
            _secrets.add(value)
        for name in _HTTP_LOGGERS:
            redacting_logger(name)


def secret_from_env(name: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The value of the environment variable `name` (None when `name` is empty or the variable
    unset or empty), registered with the redactor before any caller can print or send it.
    Every `*_env` setting (answer provider, embedder, stores, Clef, the API key) is read here,
    so no secret reaches a message unmasked, even inside a provider's echoed 401 body. A value
    that is a URL also has its password registered on its own (a server may echo it bare)."""
    if not name:
        return None
    value = (os.environ if env is None else env).get(name) or None
    register_secret(value)
    register_url_secrets(value)
    return value


def register_url_secrets(url: str | None) -> None:
    """Mask the password of a URL's userinfo (`scheme://user:PASSWORD@host`) from now on: a
    server may echo it bare, where the URL pattern alone would not catch it."""
    if not url or "@" not in url:
        return
    from urllib.parse import unquote, urlsplit

    try:
        password = urlsplit(url).password
    except ValueError:  # a malformed URL fails where it is used, with its own error
        return
    if password:
        register_secret(password)
        register_secret(unquote(password))


def _mask_credential(m: re.Match[str]) -> str:
    """The words bearer, basic and token are also English, so the word after them is masked
    only when it looks like a credential (a digit, a symbol of the token alphabet, or a
    capital inside it): "a token last 90 days", "basic authentication" and "a bearer of the
    card" stay as they are (the demo's first question printed as "token *** before it
    expires")."""
    value = m.group("value")
    if any(c.isdigit() or c in "._~+/=-" for c in value) or any(c.isupper() for c in value[1:]):
        return f"{m.group('scheme')}{m.group('sep')}{MASK}"
    return m.group(0)


def redact(text: str) -> str:
    """`text` without URL userinfo, bearer / basic credentials or registered secret values."""
    if not text:
        return text
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    text = _KEY_VALUE.sub(lambda m: f"{m.group('key')}{MASK}", text)
    text = _AUTH_SCHEME.sub(_mask_credential, text)
    return text


class RedactingFilter(logging.Filter):
    """Rewrites a record's message (arguments merged) with `redact` before any handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string is the logging module's problem, not ours
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def redacting_logger(name: str) -> logging.Logger:
    """A logger of this package whose records are redacted (the filter is added once)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, RedactingFilter) for f in logger.filters):
        logger.addFilter(RedactingFilter())
    return logger


class RedactedError(RuntimeError):
    """Stands in for an exception whose message kept a secret after its arguments were
    redacted (its `__str__` does not come from its arguments). Names the original type."""


def scrub_exception(error: BaseException) -> BaseException:
    """`error` with every message in its chain (cause and context) redacted, in place where the
    message comes from the exception's arguments, so the type and traceback stay as they were.
    Returns the exception to raise: `error` itself, or a `RedactedError` when a message could
    not be cleaned in place (then raise it `from None`, so the original is not shown)."""
    seen: set[int] = set()
    todo: list[BaseException] = [error]
    clean = True
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        try:
            text = str(e)
        except Exception:  # an exception that cannot print itself carries no message to leak
            continue
        if redact(text) != text:
            e.args = tuple(redact(a) if isinstance(a, str) else a for a in e.args)
            try:
                clean = clean and redact(str(e)) == str(e)
            except Exception:
                clean = False
        todo.extend(x for x in (e.__cause__, e.__context__) if x is not None)
    if clean:
        return error
    return RedactedError(f"{type(error).__name__}: {redact(str(error))}")
