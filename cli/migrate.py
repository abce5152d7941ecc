"""`nodewright migrate`, and the store the other commands open: only on a database at this
version's schema, so that no command reads or writes tables it does not know (`NotMigrated`
says to run `nodewright migrate`)."""

from __future__ import annotations

from shared.store.eventstore import EventStore
from shared.store.migrate import current_revision, head_revision, upgrade


class NotMigrated(RuntimeError):
    pass


async def migrate(url: str) -> str:
    before, after = await upgrade(url)
    if before == after:
        return f"database already at revision {after}: nothing to do"
    return f"database migrated from {before or 'empty'} to revision {after}"


async def open_store(url: str, signing_key: bytes | None = None) -> EventStore:
    """A store on a migrated database; `signing_key`: what it appends is signed."""
    revision, head = await current_revision(url), head_revision()
    if revision != head:
        raise NotMigrated(f"the database is at revision {revision or 'none'}, not {head}: run `nodewright migrate`")
    return EventStore.connect(url, pool_size=2, signing_key=signing_key)
