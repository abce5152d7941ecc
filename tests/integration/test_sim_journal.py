"""The sim's journal on a real JetStream: steps come back in order, and a second writer on one
world (a killed sim whose last write landed late, two sims started on one world) is fenced out
rather than interleaved."""

from __future__ import annotations

from datetime import timedelta

import nats
import pytest

from services.sim.journal import Journal, JournalBroken, Step
from shared.bus.connection import BusSettings
from tests.factories import T0


async def test_steps_come_back_in_order_and_a_second_writer_is_fenced_out(bus: BusSettings):
    nc = await nats.connect(bus.url)
    try:
        js = nc.jetstream()
        first = Journal(js, bus.names, "fenced")
        await first.ensure()
        assert await first.read() == []
        await first.write([Step(T0)])
        await first.write([Step(T0 + timedelta(seconds=1), "cluster.taint", {"node": "n"})])

        second = Journal(js, bus.names, "fenced")  # a restarted sim, reading what was kept
        assert [s.at for s in await second.read()] == [T0, T0 + timedelta(seconds=1)]

        await first.write([Step(T0 + timedelta(seconds=2))])  # the old process's late write lands
        with pytest.raises(JournalBroken, match="refused a step"):
            await second.write([Step(T0 + timedelta(seconds=3))])
        third = Journal(js, bus.names, "fenced")  # so the second restarts and replays it too
        assert len(await third.read()) == 3
        await third.write([Step(T0 + timedelta(seconds=3))])
        assert len(await Journal(js, bus.names, "fenced").read()) == 4
    finally:
        await nc.close()
