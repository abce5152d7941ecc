"""Apply the Alembic migrations from code (`nodewright migrate`, tests, local servers).

Alembic is imported where it is used: every `nodewright` command imports this module, and
most never migrate (Alembic alone is about half of the CLI's start-up)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

import migrations
from shared.config import async_database_url

if TYPE_CHECKING:
    from alembic.config import Config

SCRIPT_LOCATION = Path(migrations.__file__).parent


def alembic_config(url: str) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    config.attributes["url"] = async_database_url(url)
    return config


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("postgresql://unused")).get_current_head()


async def current_revision(url: str) -> str | None:
    from alembic.runtime.migration import MigrationContext

    engine = create_async_engine(async_database_url(url))
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())
    finally:
        await engine.dispose()


def upgrade_sync(url: str) -> None:
    from alembic import command

    command.upgrade(alembic_config(url), "head")


async def upgrade(url: str) -> tuple[str | None, str | None]:
    """Migrate to head; (revision before, revision after). A second run changes nothing."""
    before = await current_revision(url)
    if before != head_revision():
        # env.py runs its own event loop, so Alembic goes to a worker thread.
        await asyncio.to_thread(upgrade_sync, url)
    return before, await current_revision(url)


WRITER, READER = "nodewright_writer", "nodewright_reader"
"""The roles migration 0005 makes: services log in as members of the first, audits of the second."""


async def member_login(url: str, login: str, role: str) -> str:
    """`url` for a login that is a member of `role`, made if missing (no password: for a server
    that trusts local connections, as the embedded one does)."""
    if role not in (WRITER, READER):
        raise ValueError(f"role must be {WRITER} or {READER}, not {role!r}")
    if not login.isidentifier():
        raise ValueError(f"a login name is a plain identifier, not {login!r}")

    engine = create_async_engine(async_database_url(url))
    try:
        async with engine.begin() as conn:
            await conn.exec_driver_sql(
                f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{login}')"
                f" THEN CREATE ROLE {login} LOGIN IN ROLE {role}; END IF;"
                " EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
            )
    finally:
        await engine.dispose()
    return make_url(url).set(username=login, password=None).render_as_string(hide_password=False)
