"""Alembic migrations of the event store (`nodewright migrate`)."""
