"""Strict limits under a burst: 10,000 concurrent reservation attempts over 10 NodePools with
random `limits.nodes` (and cpu), through the micro-batching appender, as many scheduler
replicas would. Every grant is checked again afterwards by the live counters and by an audit
replay of the log; the overrun must be 0.

Baseline: the same burst with upstream's approach, a check on state read beforehand and a
create that does not re-check (here: read the pool's claim count and cpu, then insert), which
overruns.

Run: `make bench` (or `python -m benchmarks.strict_limits --attempts 10000`). The last line is
JSON: {"attempts", "granted", "overrun", "seconds"}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
import uuid
from datetime import UTC, datetime

from benchmarks._batcher import AppendBatcher
from benchmarks._db import bench_database
from benchmarks.store import pool_object
from shared.config import driver_params
from shared.events import contracts as c
from shared.events.envelope import NewEvent
from shared.policy.audit import Replay
from shared.policy.counters import LimitExceeded
from shared.runtime import loop
from shared.store.eventstore import NO_STREAM, EventStore

AT = datetime(2026, 11, 23, 12, tzinfo=UTC)


def pools(seed: int) -> dict[str, dict[str, int]]:
    rng = random.Random(seed)
    return {f"pool-{i}": {"nodes": rng.randint(50, 600), "cpu": rng.randint(200, 2400)} for i in range(10)}


def claim_event(pool: str, rng: random.Random) -> NewEvent:
    sizes = rng.sample([("2", "8Gi"), ("4", "16Gi"), ("8", "32Gi")], k=rng.randint(1, 3))
    claim = c.NodeClaimCreated(
        nodeclaim=f"{pool}-{uuid.uuid4().hex[:10]}",
        nodepool=pool,
        instance_types=[
            c.InstanceTypeOption(name=f"t{cpu}", capacity={"cpu": cpu, "memory": mem}) for cpu, mem in sizes
        ],
    )
    return NewEvent.of(claim, occurred_at=AT, producer=f"scheduler-{rng.randint(0, 2)}")


async def strict(url: str, limits: dict[str, dict[str, int]], attempts: int, seed: int) -> dict:
    store = EventStore.connect(url, pool_size=8)
    for name, lim in limits.items():
        obj = pool_object(name)
        obj["spec"]["limits"] = {"nodes": str(lim["nodes"]), "cpu": str(lim["cpu"])}
        applied = c.NodePoolApplied(nodepool=name, nodepool_object=obj)
        await store.append(applied.stream_id, NO_STREAM, [NewEvent.of(applied, occurred_at=AT, producer="bench")])
    rng = random.Random(seed)
    names = list(limits)
    events = [claim_event(rng.choice(names), rng) for _ in range(attempts)]
    batcher = AppendBatcher(store, max_batch=500, flushers=3)

    async def attempt(event: NewEvent) -> bool:
        try:
            await batcher.append(event.stream_id, NO_STREAM, [event])
        except LimitExceeded:
            return False
        return True

    start = time.perf_counter()
    granted = sum(await asyncio.gather(*(attempt(e) for e in events)))
    seconds = time.perf_counter() - start
    await batcher.close()
    live = await store.counters()
    replay = Replay()
    async for page in store.log_entries():
        replay.feed(page)
    await store.close()
    overrun = 0
    for name, lim in limits.items():
        pool = live[name]
        overrun += max(pool.nodes - lim["nodes"], 0)
        overrun += int(max(pool.resources.get("cpu", 0) - lim["cpu"], 0))
    return {
        "granted": granted,
        "seconds": seconds,
        "overrun": overrun,
        "audit_violations": len(replay.violations),
        "replay_nodes": sum(p.nodes for p in replay.pools.values()),
        "full_pools": sum(live[n].nodes == lim["nodes"] for n, lim in limits.items()),
    }


async def naive(url: str, limits: dict[str, dict[str, int]], attempts: int, seed: int, workers: int = 32) -> dict:
    """Check a count read first, then insert without re-checking (no lock): upstream's shape."""
    import asyncpg

    db = await asyncpg.create_pool(
        **driver_params(url),
        min_size=workers,
        max_size=workers,
    )
    rng = random.Random(seed)
    names = list(limits)
    queue = [
        (e.data["nodepool"], max(int(t["capacity"]["cpu"]) for t in e.data["instance_types"]))
        for e in (claim_event(rng.choice(names), rng) for _ in range(attempts))
    ]
    todo = iter(queue)
    granted = 0

    async def worker() -> None:
        nonlocal granted
        async with db.acquire() as conn:
            for pool, cpu in todo:
                count, used = await conn.fetchrow(
                    "SELECT count(*), coalesce(sum((data->>'cpu')::int), 0) FROM events"
                    " WHERE type = 'NodeClaimCreated' AND data->>'nodepool' = $1",
                    pool,
                )
                await asyncio.sleep(0)  # the time between the cached read and the create
                if count < limits[pool]["nodes"] and used + cpu <= limits[pool]["cpu"]:
                    name = f"{pool}-{uuid.uuid4().hex[:10]}"
                    await conn.execute(
                        "INSERT INTO events (event_id, stream_id, version, type, data, occurred_at)"
                        " VALUES ($1, $2, 1, 'NodeClaimCreated', $3::jsonb, $4)",
                        uuid.uuid4(),
                        f"nodeclaim-{name}",
                        json.dumps({"nodeclaim": name, "nodepool": pool, "cpu": cpu}),
                        AT,
                    )
                    granted += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    seconds = time.perf_counter() - start
    rows = await db.fetch(
        "SELECT data->>'nodepool' AS pool, count(*) AS n, sum((data->>'cpu')::int) AS cpu FROM events"
        " WHERE type = 'NodeClaimCreated' GROUP BY 1"
    )
    await db.close()
    overrun = sum(
        max(r["n"] - limits[r["pool"]]["nodes"], 0) + max(r["cpu"] - limits[r["pool"]]["cpu"], 0) for r in rows
    )
    return {"granted": granted, "seconds": seconds, "overrun": overrun}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--attempts", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    limits = pools(args.seed)
    capacity = sum(v["nodes"] for v in limits.values())
    print(f"10 pools, limits.nodes in [50, 600] (sum {capacity}), cpu limits in [200, 2400]; {args.attempts} attempts")
    with bench_database() as url:
        base = loop.run(naive(url, limits, args.attempts, args.seed))
    print(
        f"baseline (check cached usage, then create): granted {base['granted']}, "
        f"overrun {base['overrun']} (nodes + cpu), "
        f"{base['seconds']:.2f} s"
    )
    with bench_database() as url:
        out = loop.run(strict(url, limits, args.attempts, args.seed))
    print(
        f"nodewright (reservation in the appending transaction): granted {out['granted']}, overrun {out['overrun']}, "
        f"{out['seconds']:.2f} s ({args.attempts / out['seconds']:,.0f} attempts/s); pools filled to their node limit: "
        f"{out['full_pools']}/10; audit replay: {out['audit_violations']} violations, {out['replay_nodes']} nodes "
        f"(live {out['granted']})"
    )
    print(
        json.dumps(
            {
                "attempts": args.attempts,
                "granted": out["granted"],
                "overrun": out["overrun"],
                "seconds": round(out["seconds"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
