"""`unless_stopping`: work that would wait for ever gives way to a stop, and nothing else changes."""

from __future__ import annotations

import asyncio

import pytest

from shared.outages import unless_stopping


async def test_the_result_when_the_work_ends_first():
    assert await unless_stopping(asyncio.sleep(0, result=7), asyncio.Event()) == 7
    assert await unless_stopping(asyncio.sleep(0, result=8), None) == 8


async def test_none_and_the_work_cancelled_when_stopping_comes_first():
    stopping, cancelled = asyncio.Event(), asyncio.Event()

    async def for_ever() -> int:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 1

    asyncio.get_running_loop().call_later(0.01, stopping.set)
    assert await unless_stopping(for_ever(), stopping) is None
    assert cancelled.is_set()


async def test_the_works_error_is_raised():
    async def refused() -> int:
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(ConnectionRefusedError):
        await unless_stopping(refused(), asyncio.Event())
