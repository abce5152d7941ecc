"""The service shell over a real NATS JetStream: durable queue consumers shared by replicas,
explicit acks and redelivery after a failure, dead letters for malformed messages, and the
health, readiness and metrics endpoints."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter

import aiohttp
import pytest

from shared.bus.service import DEAD_PREFIX, REASON_HEADER, ServiceShell
from shared.bus.streams import MSG_ID, STREAM
from shared.events.envelope import Metadata, RecordedEvent
from tests.factories import T0, initialized

pytestmark = pytest.mark.timeout(60)


def body(position: int, claim: str = "c1", data: dict | None = None, kind: str = "NodeClaimInitialized") -> bytes:
    event = initialized(claim, "p")
    recorded = RecordedEvent(
        position=position,
        event_id=uuid.uuid4(),
        stream_id=event.stream_id,
        version=position,
        type=kind,
        schema_version=1,
        data=data if data is not None else event.payload(),
        metadata=Metadata("test"),
        occurred_at=T0,
        recorded_at=T0,
    )
    return json.dumps(recorded.to_json_dict()).encode()


async def publish(js, payload: bytes, subject: str = "nodewright.events.nodeclaim.NodeClaimInitialized") -> None:
    await js.publish(subject, payload, stream=STREAM, headers={MSG_ID: str(uuid.uuid4())})


async def until(condition, timeout: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_replicas_share_one_durable_consumer_and_each_event_is_handled_once(jetstream, nats_server_url):
    seen: Counter[tuple[str, int]] = Counter()
    replicas = [ServiceShell("watcher", nats_url=nats_server_url) for _ in range(2)]
    for index, shell in enumerate(replicas):

        @shell.handler("NodeClaimInitialized")
        async def handle(recorded, event, index=index):
            seen[(f"replica-{index}", recorded.position)] += 1

    for shell in replicas:
        await shell.start()
    try:
        for position in range(1, 41):
            await publish(jetstream, body(position))
        await until(lambda: sum(seen.values()) >= 40)
        await asyncio.sleep(0.3)
        assert {replica for replica, _ in seen} == {"replica-0", "replica-1"}  # both took a share
        positions = Counter(position for _, position in seen.elements())
        assert sorted(positions) == list(range(1, 41)) and set(positions.values()) == {1}
        info = await jetstream.consumer_info(STREAM, "watcher")
        assert info.config.deliver_group == "watcher" and info.num_ack_pending == 0
    finally:
        for shell in replicas:
            await shell.stop()


async def test_a_failing_handler_gets_the_event_again_and_a_restart_resumes(jetstream, nats_server_url):
    attempts: Counter[int] = Counter()

    async def flaky(recorded, event):
        attempts[recorded.position] += 1
        if attempts[recorded.position] == 1:
            raise RuntimeError("the database blinked")

    shell = ServiceShell("scheduler", nats_url=nats_server_url)
    shell.handler("NodeClaimInitialized")(flaky)
    await shell.start()
    await publish(jetstream, body(1))
    await until(lambda: attempts[1] == 2)
    await shell.stop()
    await publish(jetstream, body(2))  # published while the service is down
    again = ServiceShell("scheduler", nats_url=nats_server_url)
    again.handler("NodeClaimInitialized")(flaky)
    await again.start()
    try:
        await until(lambda: attempts[2] == 2)
        assert attempts[1] == 2  # not handled a third time: the durable consumer kept its place
    finally:
        await again.stop()


async def test_malformed_messages_go_to_the_dead_letter_subject_and_the_service_goes_on(jetstream, nats_server_url):
    handled: list[int] = []
    shell = ServiceShell("termination", nats_url=nats_server_url)

    @shell.handler("NodeClaimInitialized")
    async def handle(recorded, event):
        handled.append(recorded.position)

    dead = await jetstream.subscribe(f"{DEAD_PREFIX}.termination", stream=STREAM)
    await shell.start()
    try:
        await publish(jetstream, b"{not json")
        await publish(jetstream, body(2, data={"nodepool": "p"}))  # no nodeclaim: the contract refuses it
        await publish(jetstream, body(3, kind="NoSuchEvent"))
        await publish(jetstream, body(4))
        await until(lambda: handled == [4])
        reasons = []
        for _ in range(3):
            msg = await dead.next_msg(timeout=5)
            reasons.append(msg.headers[REASON_HEADER])
            await msg.ack()
        assert reasons[0].startswith("not JSON")
        assert "nodeclaim" in reasons[1] and "contract" in reasons[1]
        assert "NoSuchEvent" in reasons[2]
        metrics = await _get(shell, "/metrics")
        assert 'nodewright_bus_messages_total{outcome="dead",service="termination"} 3.0' in metrics[1]
    finally:
        await shell.stop()


async def test_health_and_readiness_answer_on_the_services_own_port(jetstream, nats_server_url):
    database_up = True

    async def database() -> str | None:
        return None if database_up else "PostgreSQL does not answer"

    shell = ServiceShell("sim", nats_url=nats_server_url, readiness=[database])
    await shell.start()
    try:
        assert shell.port > 0
        assert (await _get(shell, "/healthz"))[0] == 200
        status, text = await _get(shell, "/readyz")
        assert status == 200 and json.loads(text)["ready"] is True
        database_up = False
        status, text = await _get(shell, "/readyz")
        assert status == 503 and json.loads(text)["reasons"] == ["PostgreSQL does not answer"]
    finally:
        await shell.stop()


async def _get(shell: ServiceShell, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{shell.port}{path}") as response:
        return response.status, await response.text()


async def test_an_event_that_keeps_failing_ends_in_the_dead_letters_after_the_last_try(jetstream, nats_server_url):
    attempts: Counter[int] = Counter()
    shell = ServiceShell("disruption", nats_url=nats_server_url, max_deliver=3)

    @shell.handler("NodeClaimInitialized")
    async def always_fails(recorded, event):
        attempts[recorded.position] += 1
        raise RuntimeError("a bug")

    dead = await jetstream.subscribe(f"{DEAD_PREFIX}.disruption", stream=STREAM)
    await shell.start()
    try:
        await publish(jetstream, body(7))
        msg = await dead.next_msg(timeout=15)
        assert "failed 3 times" in msg.headers[REASON_HEADER] and "a bug" in msg.headers[REASON_HEADER]
        assert attempts[7] == 3
    finally:
        await shell.stop()
