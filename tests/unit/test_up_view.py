"""`nodewright up`/`run`'s view rides out a database restart: whatever asyncpg raises when the
server goes away, the last view is kept with the reason, never a traceback that ends the run."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from cli.up import _view


class _Clock:
    def now(self) -> datetime:
        return datetime(2026, 3, 1, 6, tzinfo=UTC)


class _Failing:
    """A store whose connection fails as a restart in mid-statement leaves it."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    @contextlib.asynccontextmanager
    async def driver_connection(self) -> AsyncIterator[Any]:
        raise self.error
        yield  # pragma: no cover


@pytest.mark.parametrize(
    "error",
    [
        asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
        asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.AdminShutdownError("terminating connection due to administrator command"),
        ConnectionRefusedError(111, "Connection refused"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_restart_keeps_the_last_view_and_says_why(error: BaseException) -> None:
    last = {"pools": [{"name": "web"}], "pending": ["default/a"]}
    seen = asyncio.run(_view(_Failing(error), None, [], _Clock(), last))  # type: ignore[arg-type]
    assert seen["pools"] == last["pools"] and seen["pending"] == last["pending"]
    assert seen["database"] == f"not answering ({type(error).__name__}); waiting"
    assert seen["now"] == "2026-03-01T06:00:00+00:00" and seen["processes"] == []
