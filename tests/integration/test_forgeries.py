"""Forged envelopes on an open bus (insecure mode, as a laboratory would run): a position far past
the store's head, a position that collides with a real event, and another store's id. Each is
dead-lettered by every consumer that hears it, and the run's disruptions are the ones it would
have had without them: three empty nodes, each consolidated as Empty, none skipped."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import nats
import orjson
import pytest

from shared.bus.connection import BusSettings
from shared.bus.dead import read_dead_letters
from shared.bus.names import MSG_ID, POSITION, STORE, BusNames
from shared.events.envelope import RecordedEvent
from tests.integration.test_disruption import disruption_story, events_of, pool, scenario, web
from tests.integration.world import START, World

pytestmark = pytest.mark.timeout(300)


async def forge(url: str, names: BusNames, event: RecordedEvent, store_id: str) -> None:
    """Publish `event` as the relay would, as an anonymous client of the open server."""
    nc = await nats.connect(url)
    try:
        await nc.jetstream().publish(
            names.event_subject(event.stream_id, event.type),
            orjson.dumps(event.to_json_dict()),
            headers={MSG_ID: names.msg_id(event.event_id, store_id), POSITION: str(event.position), STORE: store_id},
            stream=names.stream,
        )
    finally:
        await nc.close()


async def test_forged_envelopes_are_dead_lettered_and_the_disruptions_are_unchanged(store, embedded_nats_factory):
    server = embedded_nats_factory()
    bus = BusSettings(server.url, BusNames(f"f{uuid.uuid4().hex[:6]}"), insecure=True)
    document = scenario([pool()], [web(3)], [{"at": "5m", "scale": {"workload": "web", "replicas": 0}}])
    async with World(document, bus, store) as world:
        world.start_schedulers()
        world.start_termination()
        world.start_disruption()
        await world.until(lambda sim: len(sim.world.cluster.nodes) == 3)
        store_id, head = await store.identity(), await store.head_position()
        claims = [e async for page in store.read_all() for e in page if e.type == "NodeClaimCreated"]
        real = claims[0]
        deletion = RecordedEvent(
            position=head + 1000,  # far past the head: a consumer that skipped to it would miss every real event
            event_id=uuid.uuid4(),
            stream_id=real.stream_id,
            version=real.version + 50,
            type="NodeClaimDeletionRequested",
            schema_version=1,
            data={"nodeclaim": real.data["nodeclaim"], "reason": "Manual"},
            metadata=real.metadata,
            occurred_at=real.occurred_at,
            recorded_at=real.recorded_at,
        )
        await forge(bus.url, bus.names, deletion, store_id)
        collides = dataclasses.replace(deletion, position=real.position, event_id=uuid.uuid4())
        await forge(bus.url, bus.names, collides, store_id)
        foreign = dataclasses.replace(deletion, position=head - 1, event_id=uuid.uuid4())
        await forge(bus.url, bus.names, foreign, "another-store")
        await world.until(lambda sim: sim.world.now > START + timedelta(minutes=6))
        await world.until(lambda sim: not sim.world.cluster.nodes, seconds=200)
        counted = {
            name: service.shell.registry.get_sample_value(
                "nodewright_bus_dead_letters_total", {"service": name, "consumer": f"{name}-projection"}
            )
            for name, service in (
                ("scheduler", world.schedulers[0]),
                ("disruption", world.disruptions[0]),
                ("termination", world.terminations[0]),
            )
        }
    nc = await nats.connect(bus.url)
    try:
        letters = await read_dead_letters(nc.jetstream(), bus.names)
    finally:
        await nc.close()
    # every projection refuses the three (and counts them); termination's work consumer of
    # deletion requests refuses them too
    assert counted == {"scheduler": 3, "disruption": 3, "termination": 3}
    by_service = {name: [d.reason for d in letters if d.service == name] for name in counted}
    assert len(by_service["scheduler"]) == 3 and len(by_service["disruption"]) == 3, by_service
    assert len(by_service["termination"]) == 6, by_service
    for reasons in by_service.values():
        assert any("beyond the store's head" in r for r in reasons)
        assert any(f"position {real.position} holds another event in the store" in r for r in reasons)
        assert any("an unknown store" in r for r in reasons)
    decisions, _, _ = await disruption_story(store)
    # a decision its re-check found stale (a candidate's stream moved meanwhile) is cancelled and
    # taken again: the three nodes are each deleted once, by the decisions not cancelled
    cancelled = {d["decision_id"] for _, d in await events_of(store, ["DisruptionCancelled"])}
    carried = [d for d in decisions if d["decision_id"] not in cancelled]
    assert [d["reason"] for d in decisions].count("Empty") == len(decisions)
    assert sorted(c for d in carried for c in d["candidates"]) == sorted(
        {c for d in decisions for c in d["candidates"]}
    )
    assert sum(len(d["candidates"]) for d in carried) == 3
    requested = [e async for page in store.read_all() for e in page if e.type == "NodeClaimDeletionRequested"]
    assert all(e.data.get("reason") == "Empty" for e in requested), [e.data for e in requested]
