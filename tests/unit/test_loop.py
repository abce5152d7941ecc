"""`shared.runtime.loop.run`: results and errors come back, and a result is never formatted."""

from __future__ import annotations

import asyncio

import pytest

from shared.runtime import loop


class Formatted:
    """A result that counts how often something formats it (an audit's replay is one of these:
    formatting a million-event replay takes seconds)."""

    def __init__(self) -> None:
        self.reprs = 0

    def __repr__(self) -> str:
        self.reprs += 1
        return "Formatted()"


def test_run_returns_the_result_without_formatting_it() -> None:
    value = Formatted()

    async def main() -> Formatted:
        await asyncio.sleep(0)
        return value

    assert loop.run(main()) is value
    assert value.reprs == 0


def test_run_returns_none_and_raises_what_main_raises() -> None:
    async def nothing() -> None:
        await asyncio.sleep(0)

    async def fails() -> None:
        raise LookupError("from main")

    assert loop.run(nothing()) is None
    with pytest.raises(LookupError, match="from main"):
        loop.run(fails())
