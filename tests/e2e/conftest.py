"""End-to-end tests run nodewright as processes; those that need servers share the integration
tests' (explicit URLs, else testcontainers, else embedded)."""

from tests.integration.conftest import (
    database_server_url,
    fresh_database_url,
    migrated_url,
    nats_server_url,
    session_bus,
    temporary_database,
)

__all__ = [
    "database_server_url",
    "fresh_database_url",
    "migrated_url",
    "nats_server_url",
    "session_bus",
    "temporary_database",
]
