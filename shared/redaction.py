"""Secrets out of text: the password of any URL with one (`postgresql://user:pass@host`,
`nats://user:pass@host`) becomes `***`, as SQLAlchemy prints its URLs.

Every log line passes through here (`shared.runtime.logs`), and so do the errors the command line
prints, so a database or NATS URL pasted with its password never reaches a terminal, a log file
or a log aggregator. A password a URL should have escaped (`@`, `/`, `#`, `?`, a quote, a space)
is hidden whole, however the URL is malformed: the mask runs to the URL's last `@`, at the cost
of some host text. A driver parsing such a URL may print a piece of it with no URL around it, so
settings refuse one before any driver sees it (`check_url`). Pure: no I/O, no logging.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from urllib.parse import unquote

MASK = "***"

_SCHEME = r"\b[a-zA-Z][a-zA-Z0-9+.-]*://"
_USER = rf"{_SCHEME}[^\s:/\"'<>]*:"
"""`scheme://user:`; a user may hold an unescaped `@` (`user@server`, as some clouds name logins)."""
_NEXT_URL = rf"[\s,;]+{_SCHEME}"
"""Where a list of URLs (`nats://a@h1, nats://b@h2`) starts its next one."""
_URL_PASSWORD = re.compile(rf"(?P<head>{_USER})(?P<password>(?:(?!{_NEXT_URL})[^\n])*)@")
"""`scheme://user:` then the password, up to the last `@` on the line before another URL starts:
spaces, quotes, `/`, `#` and `?` included, which a driver may read either way."""
_URL_PASSWORD_IN_JSON = re.compile(rf"(?P<head>{_USER})(?P<password>(?:(?!{_NEXT_URL})(?:[^\"\\\n]|\\.))*)@")
"""The same within a rendered JSON line, never past the end of its string (an escaped quote or
backslash inside the password is part of it)."""

_KEYED = re.compile(
    r"(?P<head>\b(?:password|passwd|secret|token)['\"]?\s*[=:]\s*)"
    r"(?P<value>'(?:[^'\\\n]|\\.)*'?|\"(?:[^\"\\\n]|\\.)*\"?|[^\s'\",;&}]+)",
    re.I,
)
"""`password=...`, `'password': '...'` and the like: a driver's connect arguments printed as a
dict or a libpq keyword string, where a quoted value may hold spaces and escaped quotes."""

SECRET_KEYS = frozenset({"password", "passwd", "secret", "token", "credentials"})
"""Field names whose values are never shown, whatever they hold."""

ESCAPES = "'@' as %40, '/' as %2F, '#' as %23, '?' as %3F, '%' as %25, a space as %20, '\"' as %22"
_USERINFO = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|%[0-9A-Fa-f]{2})*")
"""What RFC 3986 lets a URL's `user:password` hold as written; anything else must be escaped."""


def redact(text: str, secrets: Iterable[str] = (), *, json: bool = False) -> str:
    """`text` with URL passwords, keyed passwords and every one of `secrets` (literal values, such
    as the configured passwords) masked; `json`: `text` is a rendered JSON document, whose
    strings a mask must not run across."""
    if "@" in text:
        url = _URL_PASSWORD_IN_JSON if json else _URL_PASSWORD
        text = url.sub(lambda m: m["head"] + MASK + "@", text)
    if "=" in text or ":" in text:
        text = _KEYED.sub(_masked_value, text)
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, MASK)
    return text


def _masked_value(match: re.Match[str]) -> str:
    value = match["value"]
    quote = value[0] if value[0] in "'\"" else ""
    return match["head"] + quote + MASK + quote


def userinfo(url: str) -> str | None:
    """A URL's `user:password`, read as no driver would misread it: everything between `://` and
    the URL's last `@` (a host never holds one); None without an `@`."""
    _, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return None
    return rest.rpartition("@")[0]


def url_password(url: str | None) -> str | None:
    """The password a URL carries, if any (to mask it literally where it appears on its own)."""
    info = userinfo(url or "")
    if info is None or ":" not in info:
        return None
    return info.partition(":")[2] or None


def url_secrets(url: str | None) -> set[str]:
    """The password as written and as a driver decodes it: either may turn up in a message."""
    password = url_password(url)
    return {password, unquote(password)} if password else set()


SECRET_ENVS = ("NODEWRIGHT_DATABASE_URL", "NODEWRIGHT_NATS_URL")
SHORTEST_SECRET = 6
"""Configured passwords shorter than this are masked only where a URL or `password=` shows them:
masking a short word everywhere would mangle the lines."""


def configured_secrets(environ: Mapping[str, str]) -> list[str]:
    """The secrets a process was given (the passwords in its URLs, as written and decoded, NATS's
    own, the signing key) long enough to mask wherever they appear, longest first."""
    found = set().union(*(url_secrets(environ.get(name)) for name in SECRET_ENVS))
    found.add(environ.get("NODEWRIGHT_NATS_PASSWORD") or "")
    found.add(environ.get("NODEWRIGHT_SIGNING_KEY") or "")
    return sorted((s for s in found if len(s) >= SHORTEST_SECRET), key=len, reverse=True)


def check_url(url: str, setting: str) -> None:
    """Refuse a URL whose user or password holds a character it should have escaped: drivers
    split such a URL each their own way and may print a piece of the password in their error.
    The error names `setting` and the rule, never the password."""
    info = userinfo(url)
    if info is not None and not _USERINFO.fullmatch(info):
        raise ValueError(
            f"{setting}: its user name or password (not shown) holds a character a URL must"
            f" percent-encode: write {ESCAPES} (urllib.parse.quote(password, safe=''))"
        )


def check_servers(urls: str, setting: str) -> None:
    """`check_url` for each of a comma-separated list of servers (a NATS cluster's), each of
    which must name its scheme when it names a user: a piece without one would be read as a
    host."""
    for url in urls.split(","):
        if "@" in url and "://" not in url:
            raise ValueError(
                f"{setting}: each server is scheme://[user:password@]host:port, and a user name or"
                f" password (not shown) must percent-encode a ',' as %2C"
            )
        check_url(url.strip(), setting)


def location(url: str) -> str:
    """Where a URL points, for a message: `scheme://host:port/path` without its user, password,
    query or fragment (an embedded server's socket directory, given as `?host=`, when that is all
    there is)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "an unnamed server"
    info = userinfo(url)
    if info is not None:
        rest = rest[len(info) + 1 :]
    where, _, query = rest.partition("?")
    where = where.partition("#")[0]
    if where.split("/", 1)[0] == "":
        host = next((v for k, _, v in (p.partition("=") for p in query.split("&")) if k == "host"), "")
        where = f"{unquote(host)}{where}" if host else where
    return f"{scheme.partition('+')[0]}://{where}"
