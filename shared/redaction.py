"""Secrets out of text: the password of any URL with one (`postgresql://user:pass@host`,
`nats://user:pass@host`) becomes `***`, as SQLAlchemy prints its URLs.

Every log line passes through here (`shared.runtime.logs`), and so do the errors the command line
prints, so a database or NATS URL pasted with its password never reaches a terminal, a log file
or a log aggregator. Pure: no I/O, no logging.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"

_USER = r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@\"'<>]*:"
_URL_PASSWORD = re.compile(rf"(?P<head>{_USER})(?P<password>\S*)@")
"""`scheme://user:` then the password up to the last `@` before a space: one with an unescaped
`@` or quote (which a driver may read either way) is hidden whole, at the cost of some host text."""
_URL_PASSWORD_IN_JSON = re.compile(rf"(?P<head>{_USER})(?P<password>[^\s\"'<>\\]*)@")
"""The same within a rendered JSON line, never past the end of its string."""

_KEYED = re.compile(r"(?P<head>\b(?:password|passwd|secret|token)['\"]?\s*[=:]\s*['\"]?)(?P<value>[^\s'\",;&}]+)", re.I)
"""`password=...`, `'password': '...'` and the like: a driver's connect arguments printed as a
dict or a libpq keyword string."""

SECRET_KEYS = frozenset({"password", "passwd", "secret", "token", "credentials"})
"""Field names whose values are never shown, whatever they hold."""


def redact(text: str, secrets: Iterable[str] = (), *, json: bool = False) -> str:
    """`text` with URL passwords, keyed passwords and every one of `secrets` (literal values, such
    as the configured passwords) masked; `json`: `text` is a rendered JSON document, whose
    strings a mask must not run across."""
    if "@" in text:
        url = _URL_PASSWORD_IN_JSON if json else _URL_PASSWORD
        text = url.sub(lambda m: m["head"] + MASK + "@", text)
    if "=" in text or ":" in text:
        text = _KEYED.sub(lambda m: m["head"] + MASK, text)
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, MASK)
    return text


def url_password(url: str | None) -> str | None:
    """The password a URL carries, if any (to mask it literally where it appears on its own)."""
    if not url:
        return None
    found = _URL_PASSWORD.search(url)
    return found["password"] if found and found["password"] else None
