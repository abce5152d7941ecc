"""The sim's journal on a real JetStream: steps come back in order, and a second writer on one
world (a killed sim whose last write landed late, two sims started on one world) is fenced out
rather than interleaved."""

from __future__ import annotations

import json
from datetime import timedelta

import nats
import pytest
from nats.js.errors import NotFoundError

from services.sim.journal import EXPECTED_LAST, Journal, JournalBroken, Step
from shared.bus.connection import BusSettings
from shared.bus.names import MSG_ID, BusNames
from shared.bus.setup import NotSetUp
from tests.factories import T0
from tests.sim_callers import provisioned


async def test_steps_come_back_in_order_and_a_second_writer_is_fenced_out(bus: BusSettings):
    await provisioned(bus)
    nc = await nats.connect(bus.url)
    try:
        js = nc.jetstream()
        first = Journal(js, bus.names, "fenced")
        await first.require()
        assert await first.read() == []
        await first.write([Step(T0)])
        await first.write([Step(T0 + timedelta(seconds=1), "cloud.delete", {"providerID": "sim:///n"})])

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
    await provisioned(bus)
    nc = await nats.connect(bus.url)
    try:
        js = nc.jetstream()
        journal = Journal(js, bus.names, "lost-ack")
        await journal.require()
        await journal.write([Step(T0)])
        step = [Step(T0 + timedelta(seconds=1), "cloud.delete", {"providerID": "sim:///n"})]
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


async def test_a_journal_not_set_up_says_what_makes_it(bus: BusSettings):
    """The sim makes no stream: one missing is NotSetUp, a start-up step tried again, that names
    the command; reading a world whose stream went away is an error, not an empty world."""
    nc = await nats.connect(bus.url)
    try:
        journal = Journal(nc.jetstream(), BusNames(f"{bus.names.deployment}-bare"), "missing")  # never set up
        with pytest.raises(NotSetUp, match="nodewright bus setup"):
            await journal.require()
        with pytest.raises(NotFoundError):
            await journal.read()
    finally:
        await nc.close()


async def test_worlds_sharing_the_stream_read_back_only_their_own_steps(bus: BusSettings):
    """Many messages, interleaved with another world's: each read walks its own subject only, in
    order, and knows its last sequence (where its next append must follow)."""
    await provisioned(bus)
    nc = await nats.connect(bus.url)
    try:
        js = nc.jetstream()
        ours, theirs = Journal(js, bus.names, "ours"), Journal(js, bus.names, "theirs")
        for second in range(40):
            await ours.write([Step(T0 + timedelta(seconds=second), "cloud.delete", {"n": second})])
            await theirs.write([Step(T0 + timedelta(seconds=second)), Step(T0 + timedelta(seconds=second))])
        again = Journal(js, bus.names, "ours")
        steps = await again.read()
        assert [s.body for s in steps] == [{"n": n} for n in range(40)]
        assert again.last == ours.last and len(await Journal(js, bus.names, "theirs").read()) == 80
        await again.write([Step(T0 + timedelta(minutes=1))])  # it follows its own last message
    finally:
        await nc.close()
