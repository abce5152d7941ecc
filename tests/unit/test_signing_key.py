"""NODEWRIGHT_SIGNING_KEY is a secret: read as one (a SecretStr, never printed, an error never
repeats it), masked in every log line, and refused, naming the setting and the rule, when it is
too short to be one."""

from __future__ import annotations

import pytest

from shared.config import SigningKey, settings, signing_key
from shared.runtime import logs
from tests.unit.test_logs import configured, lines, own_logging  # noqa: F401 (a fixture)

KEY = "3f9a6c1e8b7d4052a1c9e6f3b8d2a7c4-the-services-key"


def test_the_key_is_read_as_a_secret_and_never_shown(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NODEWRIGHT_SIGNING_KEY", KEY)
    assert signing_key() == KEY.encode()
    read = settings()
    assert read.signing_key_bytes() == KEY.encode()
    assert KEY not in repr(read) and KEY not in str(read.model_dump())


@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_key_is_no_key(monkeypatch: pytest.MonkeyPatch, blank: str):
    monkeypatch.setenv("NODEWRIGHT_SIGNING_KEY", blank)
    assert signing_key() is None and SigningKey().signing_key is None


def test_a_short_key_is_refused_naming_the_setting_never_its_value(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NODEWRIGHT_SIGNING_KEY", "sekrit-but-short")
    with pytest.raises(ValueError) as refused:
        signing_key()
    assert str(refused.value) == (
        "NODEWRIGHT_SIGNING_KEY: a signing key must be at least 32 bytes, not 16 (e.g. `openssl rand -hex 32`)"
    )
    with pytest.raises(Exception) as also:
        settings()
    assert "sekrit-but-short" not in str(also.value)


def test_no_log_line_shows_the_key():
    out = configured(NODEWRIGHT_SIGNING_KEY=KEY)
    log = logs.controller("scheduler")
    log.info("signing with %s", KEY)
    log.warning("a field holds it", key=KEY, nested={"k": [KEY]})
    rendered = out.getvalue()
    assert len(lines(out)) == 2 and KEY not in rendered and "***" in rendered
