"""Database URLs as operators paste them: the SQLAlchemy form for migrations, and asyncpg's
arguments for the services' own connections, read as SQLAlchemy's asyncpg dialect reads them
(SQLAlchemy itself, which the services no longer load, is the oracle)."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from shared.config import async_database_url, driver_params

URLS = [
    "postgresql://app:s3cret@db.example.com:5432/nodewright",
    "postgres://app@db/nodewright",
    "postgresql+asyncpg://app:p%40ss%2Fword@10.0.0.5/nodewright",
    "postgresql://app@db/nodewright?sslmode=require",
    "postgresql://app@db/nodewright?sslmode=require&ssl=verify-full",
    "postgresql+asyncpg://postgres@/postgres?host=/tmp/nw%20data/socket&port=54321",
    "postgresql://app@db/nodewright?command_timeout=30&prepared_statement_cache_size=0",
    "postgresql://app@[::1]:5433/nodewright?application_name=nodewright",
]


def sqlalchemy_form(url: str) -> object:
    """What the old implementation gave, compared as parsed URLs (its text re-encoded queries)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgres", "postgresql"):
        parsed = parsed.set(drivername="postgresql+asyncpg")
    query = dict(parsed.query)
    if "sslmode" in query:
        query.setdefault("ssl", query.pop("sslmode"))
    return parsed.set(query=query)


@pytest.mark.parametrize("url", URLS)
def test_the_async_form_is_what_sqlalchemy_would_make_of_it(url):
    assert make_url(async_database_url(url)) == sqlalchemy_form(url)


@pytest.mark.parametrize("url", URLS)
def test_the_services_connect_with_what_sqlalchemy_would_pass_asyncpg(url):
    """SQLAlchemy's dialect turns the URL into asyncpg keyword arguments; ours hand asyncpg a DSN
    it parses itself: the same host, port, user, password, database and options."""
    expected = make_url(async_database_url(url))
    params = driver_params(url)
    dsn = make_url(params.pop("dsn"))
    assert dsn.drivername == "postgresql"
    assert (dsn.host, dsn.port, dsn.username, dsn.password, dsn.database) == (
        expected.host,
        expected.port,
        expected.username,
        expected.password,
        expected.database,
    )
    wanted = {k: v for k, v in expected.query.items() if k != "prepared_statement_cache_size"}
    given = {("ssl" if k == "sslmode" else k): v for k, v in dsn.query.items()}
    assert {**given, **{k: str(int(v) if float(v).is_integer() else v) for k, v in params.items()}} == wanted


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://app@db/x", "unsupported database URL scheme 'mysql'"),
        ("db.example.com:5432", "a database URL looks like postgresql://"),
    ],
)
def test_other_databases_and_bare_hosts_are_refused(url, message):
    with pytest.raises(ValueError, match=message):
        async_database_url(url)
