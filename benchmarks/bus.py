"""Bus benchmark: how long an event takes from its commit to a consumer's handler.

The nodewright path: writers append facts to the store at a paced rate (a batch every 2 ms); the
relay service, woken by the commit's notification, publishes them to JetStream; a projection
consumer (the scheduler's kind) applies each in its handler. Latency = handler time - the
moment the append returned (the commit). The baseline, in the same process and run: bare
nats-py, a JetStream publish of the same payload bytes and a push subscription that acks each
message; latency = receive time - the moment the publish was called. Offered rates 1,000 and
10,000 events/s. Goals: p99 <= 20 ms at 1,000 events/s, and within 3x of the bare baseline.

Run: `python -m benchmarks.bus [--seconds 5] [--rates 1000,10000]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
import uuid
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import nats
import orjson
from nats.js.errors import NotFoundError

from benchmarks._bus import bench_bus, set_up_bus
from benchmarks._cpu import measured
from benchmarks._db import bench_database
from services.relay.service import RelayService
from shared.bus.connection import BusSettings
from shared.bus.names import BusNames
from shared.bus.projection import ProjectionConsumer
from shared.bus.service import ServiceShell
from shared.config import settings
from shared.events import contracts as c
from shared.events.envelope import NewEvent, RecordedEvent
from shared.runtime import loop
from shared.runtime.servers import EmbeddedNats
from shared.store.eventstore import NO_STREAM, EventStore, unit

TICK = 0.002
"""Writers append what the rate asks for every TICK seconds: one transaction per tick."""
WARMUP = 1.0
AT = datetime(2026, 11, 24, 12, tzinfo=UTC)


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000)[int(q * 1000) - 1] * 1000 if len(values) > 10 else float("nan")


def fact(i: int) -> c.PodPending:
    return c.PodPending(namespace="bench", name=f"web-{i}-{uuid.uuid4().hex[:8]}", requests={"cpu": "1"})


async def paced(rate: int, seconds: float, send) -> tuple[int, float]:
    """Call `send(n)` every TICK with the events the rate owes by then; (events, seconds)."""
    start = time.perf_counter()
    sent = 0
    while (elapsed := time.perf_counter() - start) < seconds:
        owed = int(elapsed * rate) - sent
        if owed > 0:
            await send(owed)
            sent += owed
        await asyncio.sleep(max(0.0, TICK - (time.perf_counter() - start - elapsed)))
    return sent, time.perf_counter() - start


async def nodewright(url: str, bus: BusSettings, rate: int, seconds: float) -> dict[str, float]:
    store = EventStore.connect(url, pool_size=4)
    committed: dict[str, float] = {}
    handled: dict[str, float] = {}

    def apply(event: RecordedEvent) -> None:
        handled[str(event.event_id)] = time.perf_counter()

    shell = ServiceShell("scheduler", bus)
    ProjectionConsumer(shell, store, apply)
    relay = RelayService(store, bus)
    stopping = asyncio.Event()
    tasks = [asyncio.create_task(relay.run(stopping)), asyncio.create_task(shell.run(stopping))]
    counter = iter(range(10**9))

    async def send(n: int) -> None:
        events = [NewEvent.of(fact(next(counter)), occurred_at=AT, producer="bench") for _ in range(n)]
        await store.append_units([unit(e.stream_id, NO_STREAM, [e]) for e in events])
        now = time.perf_counter()
        for e in events:
            committed[str(e.event_id)] = now

    try:
        await asyncio.wait_for(shell.started.wait(), 30)
        while not relay.leading:
            await asyncio.sleep(0.05)
        await paced(rate, WARMUP, send)
        await asyncio.sleep(0.5)
        committed.clear()
        with measured() as cpu:
            sent, elapsed = await paced(rate, seconds, send)
            deadline = time.perf_counter() + 10
            while not all(k in handled for k in committed) and time.perf_counter() < deadline:
                await asyncio.sleep(0.01)
        latencies = [handled[k] - t for k, t in committed.items() if k in handled]
        return {
            "achieved": sent / elapsed,
            "delivered": len(latencies) / max(len(committed), 1),
            "p50_ms": pct(latencies, 0.5),
            "p99_ms": pct(latencies, 0.99),
            "cpu_us_per_event": cpu.client / max(sent, 1) * 1e6,
        }
    finally:
        stopping.set()
        await asyncio.gather(*tasks)
        await store.close()


async def bare(url: str, rate: int, seconds: float) -> dict[str, float]:
    """The same payloads through nats-py alone: publish with its acknowledgement, a push
    subscription that acks each message."""
    names = BusNames("bare")
    nc = await nats.connect(url)
    js = nc.jetstream()
    with contextlib.suppress(NotFoundError):
        await js.delete_stream(names.stream)
    await js.add_stream(name=names.stream, subjects=[names.events])
    published: dict[str, float] = {}
    received: dict[str, float] = {}

    async def on_message(msg) -> None:
        received[msg.headers["id"]] = time.perf_counter()
        await msg.ack()

    subscription = await js.subscribe(names.events, cb=on_message, manual_ack=True, stream=names.stream)
    counter = iter(range(10**9))
    subject = names.event_subject("pod-x", "PodPending")

    async def send(n: int) -> None:
        acks = []
        for _ in range(n):
            event = NewEvent.of(fact(next(counter)), occurred_at=AT, producer="bench")
            body = RecordedEvent(
                1, event.event_id, event.stream_id, 1, event.type, 1, event.data, event.metadata, AT, AT
            )
            key = str(event.event_id)
            published[key] = time.perf_counter()
            payload = orjson.dumps(body.to_json_dict())
            acks.append(await js.publish_async(subject, payload, headers={"id": key}, stream=names.stream))
        await asyncio.gather(*acks)

    try:
        await paced(rate, WARMUP, send)
        await asyncio.sleep(0.5)
        published.clear()
        sent, elapsed = await paced(rate, seconds, send)
        deadline = time.perf_counter() + 10
        while not all(k in received for k in published) and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)
        latencies = [received[k] - t for k, t in published.items() if k in received]
        return {"achieved": sent / elapsed, "p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99)}
    finally:
        await subscription.unsubscribe()
        await js.delete_stream(names.stream)
        await nc.close()


async def run(url: str, nats_url: str, rates: list[int], seconds: float) -> list[dict[str, float]]:
    out = []
    for rate in rates:
        bus = bench_bus(nats_url, BusNames(f"bench{rate}"))
        await set_up_bus(bus)
        mine = await nodewright(url, bus, rate, seconds)
        baseline = await bare(nats_url, rate, seconds)
        nc = await nats.connect(nats_url)
        try:
            await nc.jetstream().delete_stream(bus.names.stream)
        finally:
            await nc.close()
        out.append(
            {
                "rate": rate,
                "achieved": mine["achieved"],
                "delivered": mine["delivered"],
                "p50_ms": mine["p50_ms"],
                "p99_ms": mine["p99_ms"],
                "client_cpu_us_per_event": mine["cpu_us_per_event"],
                "bare_achieved": baseline["achieved"],
                "bare_p50_ms": baseline["p50_ms"],
                "bare_p99_ms": baseline["p99_ms"],
                "ratio_p99": mine["p99_ms"] / baseline["p99_ms"],
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per rate")
    parser.add_argument("--rates", default="1000,10000", help="offered events/s, comma-separated")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds: the test suite's run")
    args = parser.parse_args()
    if args.smoke:
        args.seconds, args.rates = 0.5, "200"
    rates = [int(r) for r in args.rates.split(",")]
    with ExitStack() as stack:
        nats_url = settings().nats_url
        if not nats_url:
            server = stack.enter_context(EmbeddedNats(Path(stack.enter_context(tempfile.TemporaryDirectory()))))
            nats_url = server.url
        url = stack.enter_context(bench_database())
        results = loop.run(run(url, nats_url, rates, args.seconds))
    for r in results:
        print(
            f"{r['rate']:,} events/s offered: nodewright {r['achieved']:,.0f}/s through store, relay, JetStream and"
            f" a projection consumer: p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms"
            f" ({r['delivered']:.0%} delivered; client CPU {r['client_cpu_us_per_event']:.0f} µs/event); bare nats-py"
            f" {r['bare_achieved']:,.0f}/s: p50 {r['bare_p50_ms']:.1f} ms, p99 {r['bare_p99_ms']:.1f} ms;"
            f" p99 ratio {r['ratio_p99']:.1f}x (goals: p99 <= 20 ms at 1,000/s, within 3x)"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
