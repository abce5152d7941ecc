"""Apply the Alembic migrations from code (`nodewright migrate`, tests, local servers)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import create_async_engine

import migrations
from shared.config import async_database_url

SCRIPT_LOCATION = Path(migrations.__file__).parent


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    config.attributes["url"] = async_database_url(url)
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("postgresql://unused")).get_current_head()


async def current_revision(url: str) -> str | None:
    engine = create_async_engine(async_database_url(url))
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())
    finally:
        await engine.dispose()


def upgrade_sync(url: str) -> None:
    command.upgrade(alembic_config(url), "head")


async def upgrade(url: str) -> tuple[str | None, str | None]:
    """Migrate to head; (revision before, revision after). A second run changes nothing."""
    before = await current_revision(url)
    if before != head_revision():
        # env.py runs its own event loop, so Alembic goes to a worker thread.
        await asyncio.to_thread(upgrade_sync, url)
    return before, await current_revision(url)
