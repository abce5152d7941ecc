"""The sim's journal on a real JetStream: steps come back in order, and a second writer on one
world (a killed sim whose last write landed late, two sims started on one world) is fenced out
rather than interleaved."""

from __future__ import annotations

import json
from datetime import timedelta

import nats
import pytest

from services.sim.journal import EXPECTED_LAST, Journal, JournalBroken, Step
from shared.bus.connection import BusSettings
from shared.bus.names import MSG_ID
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


async def test_a_step_whose_answer_was_lost_is_kept_once(bus: BusSettings):
    """A NATS restart can lose the acknowledgement of a step that landed; trying it again finds it
    there (by its message id) rather than refusing it or keeping it twice."""
    nc = await nats.connect(bus.url)
    try:
        js = nc.jetstream()
        journal = Journal(js, bus.names, "lost-ack")
        await journal.ensure()
        await journal.write([Step(T0)])
        step = [Step(T0 + timedelta(seconds=1), "cluster.taint", {"node": "n"})]
        landed = await js.publish(  # what the first try did, its answer never heard
            journal.subject,
            json.dumps([s.to_dict() for s in step]).encode(),
            headers={
                MSG_ID: f"{bus.names.deployment}:lost-ack:{journal.process}:{journal.written + 1}",
                EXPECTED_LAST: str(journal.last),
            },
        )
        await journal.write(step)
        assert journal.last == landed.seq
        assert [s.at for s in await Journal(js, bus.names, "lost-ack").read()] == [T0, T0 + timedelta(seconds=1)]
    finally:
        await nc.close()
