"""A URL's password never shows, however malformed the URL: each character a URL should have
escaped, in a plain message, a rendered JSON line, a repr or a libpq keyword string; and the
settings refuse such a URL, naming the variable and the rule, before any driver parses it."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import ValidationError

from shared.config import Settings
from shared.redaction import check_servers, check_url, configured_secrets, location, redact, url_password

UNESCAPED = ["@", "/", ":", "#", "?", '"', "'", " ", "\\", "%", "<"]
"""Every character a careless password holds that a URL parser may split on."""


def password_with(char: str) -> str:
    return f"Hunt{char}er2x{char}Sekrit"


def pieces(password: str) -> list[str]:
    """The password, and every piece of it a parser splitting on its odd characters could print."""
    return [password, *(p for p in re.split(r"[@/:#?\"' \\%<]", password) if len(p) >= 4)]


def shown(text: str, password: str) -> list[str]:
    return [p for p in pieces(password) if p in text]


@pytest.mark.parametrize("char", UNESCAPED)
@pytest.mark.parametrize(
    "template",
    [
        "could not connect to {url}",
        "connect({url!r}) failed: timeout",
        "{{'dsn': '{url}', 'timeout': 10}}",
        "servers: {url}, nats://nats-1:4222",
        "{url} is down; retry at 10:00",
    ],
)
@pytest.mark.parametrize("scheme", ["postgresql", "postgresql+asyncpg", "nats"])
def test_a_malformed_password_is_hidden_whole_in_any_message(char: str, template: str, scheme: str):
    password = password_with(char)
    url = f"{scheme}://nodewright:{password}@db.internal:5432/nodewright"
    text = template.format(url=url)
    masked = redact(text)
    assert shown(masked, password) == [], masked
    assert f"{scheme}://nodewright:***@" in masked


@pytest.mark.parametrize("char", UNESCAPED)
def test_a_malformed_password_is_hidden_in_a_rendered_json_line(char: str):
    password = password_with(char)
    line = json.dumps({"message": "store out of reach", "url": f"postgresql://u:{password}@h/db", "next": "a@b"})
    masked = redact(line, json=True)
    assert shown(masked, password) == [], masked
    assert json.loads(masked)["next"] == "a@b"  # the mask never runs past its string


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password='Hunt er2' host=h", "password='***' host=h"),
        ('password="Hunt \\"er2" host=h', 'password="***" host=h'),
        ("{'password': 'Hunt\\'er 2', 'user': 'u'}", "{'password': '***', 'user': 'u'}"),
        ("host=h password=Hunter2 dbname=d", "host=h password=*** dbname=d"),
        ("token: abc.def", "token: ***"),
    ],
)
def test_a_keyed_password_is_hidden_quoted_or_not(text: str, expected: str):
    assert redact(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://us@er:Hunter2@h/db", "postgresql://us@er:***@h/db"),  # a cloud's user@server login
        ("nats://nats-0:4222, nats://svc@nats-1:4222", "nats://nats-0:4222, nats://svc@nats-1:4222"),
        ("nats://a:x1@h1:4222,nats://b:y2@h2:4222", "nats://a:***@h1:4222,nats://b:***@h2:4222"),
        ("postgresql://u@h:5432/db", "postgresql://u@h:5432/db"),
        ("no url here, mail me@example.com", "no url here, mail me@example.com"),
    ],
)
def test_what_is_not_a_password_is_left(text: str, expected: str):
    assert redact(text) == expected


@pytest.mark.parametrize("char", ["@", "/", "#", "?", '"', " ", "\\", "<", "%"])
def test_settings_refuse_a_url_that_should_have_escaped_its_password(monkeypatch: pytest.MonkeyPatch, char: str):
    password = password_with(char)
    for variable, url in (
        ("NODEWRIGHT_DATABASE_URL", f"postgresql://u:{password}@db:5432/d"),
        ("NODEWRIGHT_NATS_URL", f"nats://u:{password}@nats:4222"),
    ):
        monkeypatch.delenv("NODEWRIGHT_DATABASE_URL", raising=False)
        monkeypatch.delenv("NODEWRIGHT_NATS_URL", raising=False)
        monkeypatch.setenv(variable, url)
        with pytest.raises(ValidationError) as refused:
            Settings()
        said = str(refused.value)
        assert f"{variable}: its user name or password (not shown)" in said and "percent-encode" in said
        assert shown(said, password) == [], said


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:Hunt%40er2%2F@db/d",  # escaped as asked
        "postgresql://u:Hunt:er2@db/d",  # a ':' after the first is a password's own
        "postgresql://u:Hunt'er2!$&()*+,;=~@db/d",
        "postgresql://db/d",
        "postgresql+asyncpg://postgres@/postgres?host=/tmp/nw%20data&port=5",
    ],
)
def test_settings_take_a_well_formed_url(url: str):
    check_url(url, "NODEWRIGHT_DATABASE_URL")


def test_a_server_list_is_checked_server_by_server():
    check_servers("nats://a:x1@h1:4222, nats://b:y%402@h2:4222", "NODEWRIGHT_NATS_URL")
    for bad in ("nats://a:Hunt,er2x@h1:4222", "nats://a:Hunt@er2x@h1:4222,nats://h2:4222"):
        with pytest.raises(ValueError, match=r"NODEWRIGHT_NATS_URL: .* must percent-encode") as refused:
            check_servers(bad, "NODEWRIGHT_NATS_URL")
        assert "Hunt" not in str(refused.value) and "er2x" not in str(refused.value)


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("postgresql+asyncpg://u:Hunter2@db.internal:5432/nw?ssl=require", "postgresql://db.internal:5432/nw"),
        ("nats://svc:Hunter2@127.0.0.1:4222", "nats://127.0.0.1:4222"),
        ("postgresql+asyncpg://postgres@/postgres?host=/tmp/nw%20data&port=5", "postgresql:///tmp/nw data/postgres"),
        ("not a url", "an unnamed server"),
    ],
)
def test_a_location_names_the_server_and_never_the_login(url: str, where: str):
    assert location(url) == where


def test_the_configured_passwords_are_known_as_written_and_decoded():
    environ = {
        "NODEWRIGHT_DATABASE_URL": "postgresql://u:Hunt%40er2x@db/d",
        "NODEWRIGHT_NATS_URL": "nats://svc:short@nats:4222",
        "NODEWRIGHT_NATS_PASSWORD": "n4ts-Password",
    }
    assert configured_secrets(environ) == ["n4ts-Password", "Hunt%40er2x", "Hunt@er2x"]  # longest first
    assert url_password("postgresql://u:p@ss@h/db") == "p@ss"
    assert url_password("postgresql://u@h/db") is None
