"""A service its supervisor started again after crashing several times in a row says so on
/readyz and in /metrics, connected to a real NATS: not ready (CrashLoopBackOff, with the last
reason), `nodewright_process_restarts_total` and `nodewright_process_crash_loop`."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from shared.bus.connection import BusSettings
from shared.bus.service import ServiceShell
from shared.crashes import CRASH_LOOP, History

pytestmark = pytest.mark.timeout(120)


async def _get(shell: ServiceShell, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{shell.port}{path}") as response:
        return response.status, await response.text()


@pytest.mark.parametrize("in_a_row", [CRASH_LOOP - 1, CRASH_LOOP])
async def test_a_service_in_a_crash_loop_is_not_ready_and_counts_its_restarts(
    bus: BusSettings, monkeypatch: pytest.MonkeyPatch, in_a_row: int
):
    told = History(restarts=4, in_a_row=in_a_row, last="OverflowError: date value out of range")
    for name, value in told.environment().items():
        monkeypatch.setenv(name, value)
    shell = ServiceShell("sim", bus)
    stopping = asyncio.Event()
    running = asyncio.create_task(shell.run(stopping))
    try:
        async with asyncio.timeout(60):
            while not shell.started.is_set():
                await asyncio.sleep(0.02)
        status, text = await _get(shell, "/readyz")
        metrics = (await _get(shell, "/metrics"))[1]
        if in_a_row < CRASH_LOOP:
            assert status == 200 and json.loads(text)["ready"] is True
            assert "nodewright_process_crash_loop 0.0" in metrics
        else:
            (reason,) = json.loads(text)["reasons"]
            assert status == 503
            assert reason.startswith(f"CrashLoopBackOff: crashed {CRASH_LOOP} times in a row")
            assert "(last: OverflowError: date value out of range), restarted 4 times" in reason
            assert "nodewright_process_crash_loop 1.0" in metrics
        assert "nodewright_process_restarts_total 4.0" in metrics
    finally:
        stopping.set()
        await asyncio.wait_for(running, 30)
