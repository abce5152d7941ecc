"""Strict limits under a burst: concurrent launch reservations over 10 NodePools with random
`limits.nodes` and cpu, checked by counting the log itself afterwards (`log_peaks`: claims
created minus terminated per pool, and the cpu of their largest options, at every position).

Each race in a database of its own:
- in one process: 10,000 attempts through the micro-batching appender, as many scheduler
  replicas' worth of writers in one process would (the store's per-pool turns then serialize
  them before PostgreSQL sees them);
- across processes (`race_processes`): several OS processes, each with its own `EventStore` and
  connections, so that only the database's check (the conditional write's pool versions, the
  locked read) stands between them and an overrun. Once with the same burst split between them,
  each through its own appender (the one-process race's ratio); once with a fifth of the
  attempts one per transaction, a quarter of the grants terminated again meanwhile (the
  integration test's race, larger).

Baseline: the same burst with upstream's approach, a check on state read beforehand and a
create that does not re-check (read the pool's claims and cpu, then insert), which overruns.

Run: `make bench` (or `python -m benchmarks.strict_limits --attempts 10000 --processes 4`;
`--smoke` for a run of a second or two). The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import queue
import random
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg

from benchmarks._batcher import AppendBatcher
from benchmarks._db import bench_database
from benchmarks.store import pool_object
from shared.config import driver_params
from shared.events import contracts as c
from shared.events.envelope import NewEvent
from shared.policy.audit import Replay
from shared.policy.counters import LimitExceeded
from shared.runtime import loop
from shared.store.eventstore import ANY, NO_STREAM, EventStore

AT = datetime(2026, 11, 23, 12, tzinfo=UTC)
Limits = dict[str, dict[str, int]]

LARGEST_CPU = "(SELECT max((o->'capacity'->>'cpu')::numeric) FROM jsonb_array_elements(data->'instance_types') o)"
"""What a NodeClaim reserves of its pool's cpu until it launches: its largest option's."""
LOG_PEAKS = f"""
WITH claims AS (
    SELECT stream_id, data->>'nodepool' AS nodepool, {LARGEST_CPU} AS cpu FROM events WHERE type = 'NodeClaimCreated'
), steps AS (
    SELECT e.position, k.nodepool, k.cpu, CASE WHEN e.type = 'NodeClaimCreated' THEN 1 ELSE -1 END AS sign
    FROM events e JOIN claims k USING (stream_id)
    WHERE e.type IN ('NodeClaimCreated', 'NodeClaimTerminated')
), running AS (
    SELECT nodepool, sign, sum(sign) OVER w AS nodes, sum(sign * cpu) OVER w AS cpu
    FROM steps WINDOW w AS (PARTITION BY nodepool ORDER BY position)
)
SELECT nodepool, max(nodes) AS nodes, max(cpu) AS cpu, count(*) FILTER (WHERE sign = 1) AS created,
       count(*) FILTER (WHERE sign = -1) AS terminated
FROM running GROUP BY nodepool
"""
"""Per pool, from the log alone in position order: the most nodes and cpu its live claims ever
held (a claim counts from its NodeClaimCreated to its NodeClaimTerminated), and the claims
created and terminated."""


def pools(seed: int, count: int = 10, nodes: tuple[int, int] = (50, 600), cpu: tuple[int, int] = (200, 2400)) -> Limits:
    rng = random.Random(seed)
    return {f"pool-{i}": {"nodes": rng.randint(*nodes), "cpu": rng.randint(*cpu)} for i in range(count)}


def claim(pool: str, rng: random.Random) -> c.NodeClaimCreated:
    """A NodeClaim of one to three options of 2, 4 or 8 cpu."""
    sizes = rng.sample([("2", "8Gi"), ("4", "16Gi"), ("8", "32Gi")], k=rng.randint(1, 3))
    return c.NodeClaimCreated(
        nodeclaim=f"{pool}-{uuid.uuid4().hex[:10]}",
        nodepool=pool,
        instance_types=[
            c.InstanceTypeOption(name=f"t{cpu}", capacity={"cpu": cpu, "memory": mem}) for cpu, mem in sizes
        ],
    )


def claim_event(pool: str, rng: random.Random) -> NewEvent:
    return NewEvent.of(claim(pool, rng), occurred_at=AT, producer=f"scheduler-{rng.randint(0, 2)}")


async def apply_limits(store: EventStore, limits: Limits) -> None:
    """The pools, each applied with its `limits.nodes` and `limits.cpu`."""
    for name, lim in limits.items():
        obj = pool_object(name)
        obj["spec"]["limits"] = {"nodes": str(lim["nodes"]), "cpu": str(lim["cpu"])}
        applied = c.NodePoolApplied(nodepool=name, nodepool_object=obj)
        await store.append(applied.stream_id, NO_STREAM, [NewEvent.of(applied, occurred_at=AT, producer="bench")])


async def log_peaks(url: str) -> dict[str, dict[str, Any]]:
    """`LOG_PEAKS`, by pool."""
    conn = await asyncpg.connect(**driver_params(url))
    try:
        return {r["nodepool"]: dict(r) for r in await conn.fetch(LOG_PEAKS)}
    finally:
        await conn.close()


def overrun(peaks: dict[str, dict[str, Any]], limits: Limits) -> int:
    """Nodes and cpu past the limits at the log's worst moment, summed over the pools."""
    return sum(
        max(p["nodes"] - limits[name]["nodes"], 0) + int(max(p["cpu"] - limits[name]["cpu"], 0))
        for name, p in peaks.items()
    )


# --- in one process ------------------------------------------------------------------------------


async def strict(url: str, limits: Limits, attempts: int, seed: int) -> dict:
    store = EventStore.connect(url, pool_size=8)
    await apply_limits(store, limits)
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
    return {
        "granted": granted,
        "seconds": seconds,
        "overrun": overrun(await log_peaks(url), limits),
        "audit_violations": len(replay.violations),
        "replay_nodes": sum(p.nodes for p in replay.pools.values()),
        "full_pools": sum(live[n].nodes == lim["nodes"] for n, lim in limits.items()),
    }


# --- across processes ----------------------------------------------------------------------------


def race_processes(
    url: str,
    names: Sequence[str],
    *,
    processes: int,
    attempts: int,
    seed: int,
    churn: float = 0.0,
    concurrency: int = 8,
    batched: bool = False,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """`processes` OS processes (spawned: nothing shared with this one), each with its own store
    and connections, reserve `attempts` NodeClaims each over the pools `names` at once: one
    reservation per transaction, `concurrency` at a time, terminating a granted claim after a
    grant with probability `churn`; or, `batched`, all at once through the micro-batching
    appender, as the one-process race does. They start together (a barrier, once each is
    connected). Returns the sums of what the processes report, and the wall seconds from the
    start to the last one done."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    results = context.Queue()
    workers = [
        context.Process(
            target=_race_in_process,
            args=(url, list(names), attempts, seed * 1000 + i, churn, concurrency, batched, barrier, results),
            name=f"reserver-{i}",
        )
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    reports: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(reports) < processes:
            try:
                reports.append(results.get(timeout=1.0))
            except queue.Empty:
                if time.monotonic() > deadline or not any(w.is_alive() for w in workers):
                    codes = [w.exitcode for w in workers]
                    missing = processes - len(reports)
                    raise RuntimeError(f"{missing} reserving process(es) never reported: {codes}") from None
    finally:
        for worker in workers:
            worker.join(timeout)
            if worker.is_alive():
                worker.kill()
    failed = [r["error"] for r in reports if "error" in r]
    if failed:
        raise RuntimeError(f"{len(failed)} reserving process(es) failed: {failed[0]}")
    out: dict[str, Any] = {
        key: sum(r[key] for r in reports) for key in ("attempts", "granted", "refused", "terminated")
    }
    out["per_process"] = [{k: r[k] for k in ("pid", "granted", "refused", "terminated", "paths")} for r in reports]
    out["seconds"] = max(r["ended"] for r in reports) - min(r["started"] for r in reports)
    return out


def _race_in_process(
    url: str,
    names: list[str],
    attempts: int,
    seed: int,
    churn: float,
    concurrency: int,
    batched: bool,
    barrier: Any,
    results: Any,
) -> None:
    """One racing process: its report, or the error that stopped it, on `results`."""
    try:
        race = _batched if batched else _reserve_and_terminate
        report = loop.run(race(url, names, attempts, seed, churn, concurrency, barrier))
        report["pid"] = os.getpid()
    except BaseException as exc:  # the parent says which process failed and why
        barrier.abort()
        report = {"error": repr(exc)}
    results.put(report)


async def _reserve_and_terminate(
    url: str, names: list[str], attempts: int, seed: int, churn: float, concurrency: int, barrier: Any
) -> dict[str, Any]:
    rng = random.Random(seed)
    store = EventStore.connect(url, pool_size=concurrency)
    try:
        todo = iter([claim(rng.choice(names), rng) for _ in range(attempts)])
        granted: list[c.NodeClaimCreated] = []
        counts = {"granted": 0, "refused": 0, "terminated": 0}
        await store.counters()  # connected before the start: the race is the appends
        await asyncio.to_thread(barrier.wait, 60)
        started = time.time()

        async def reserver() -> None:
            for created in todo:
                try:
                    await store.reserve_launch([created], occurred_at=AT, producer="scheduler")
                except LimitExceeded:
                    counts["refused"] += 1
                    continue
                counts["granted"] += 1
                granted.append(created)
                if rng.random() < churn:
                    gone = granted.pop(rng.randrange(len(granted)))
                    ended = c.NodeClaimTerminated(nodeclaim=gone.nodeclaim, nodepool=gone.nodepool, reason="bench")
                    await store.append(ended.stream_id, ANY, [NewEvent.of(ended, occurred_at=AT, producer="bench")])
                    counts["terminated"] += 1

        await asyncio.gather(*(reserver() for _ in range(concurrency)))
        paths = store.paths
        return {
            "attempts": attempts,
            **counts,
            "started": started,
            "ended": time.time(),
            "paths": {"recalled": paths.recalled, "read": paths.read, "locked": paths.locked},
        }
    finally:
        await store.close()


async def _batched(
    url: str, names: list[str], attempts: int, seed: int, churn: float, concurrency: int, barrier: Any
) -> dict[str, Any]:
    """Every attempt at once through the micro-batching appender (no churn)."""
    rng = random.Random(seed)
    store = EventStore.connect(url, pool_size=concurrency)
    try:
        events = [claim_event(rng.choice(names), rng) for _ in range(attempts)]
        counts = {"granted": 0, "refused": 0, "terminated": 0}
        await store.counters()
        await asyncio.to_thread(barrier.wait, 60)
        started = time.time()
        batcher = AppendBatcher(store, max_batch=500, flushers=3)

        async def attempt(event: NewEvent) -> None:
            try:
                await batcher.append(event.stream_id, NO_STREAM, [event])
            except LimitExceeded:
                counts["refused"] += 1
            else:
                counts["granted"] += 1

        await asyncio.gather(*(attempt(e) for e in events))
        ended = time.time()
        await batcher.close()
        paths = store.paths
        return {
            "attempts": attempts,
            **counts,
            "started": started,
            "ended": ended,
            "paths": {"recalled": paths.recalled, "read": paths.read, "locked": paths.locked},
        }
    finally:
        await store.close()


async def processes_strict(
    url: str, limits: Limits, attempts: int, processes: int, seed: int, *, batched: bool, churn: float = 0.0
) -> dict[str, Any]:
    """The cross-process race over pools applied with `limits` (`race_processes`), and the log
    counted after it."""
    store = EventStore.connect(url, pool_size=1)
    try:
        await apply_limits(store, limits)
    finally:
        await store.close()
    raced = await asyncio.to_thread(
        race_processes,
        url,
        list(limits),
        processes=processes,
        attempts=attempts // processes,
        seed=seed,
        batched=batched,
        churn=churn,
    )
    peaks = await log_peaks(url)
    raced["overrun"] = overrun(peaks, limits)
    raced["logged_claims"] = sum(p["created"] for p in peaks.values())
    return raced


# --- the baseline ---------------------------------------------------------------------------------


async def naive(url: str, limits: Limits, attempts: int, seed: int, workers: int = 32) -> dict:
    """Check a count read first, then insert without re-checking (no lock): upstream's shape. The
    rows are the same NodeClaimCreated payloads, so `log_peaks` counts them as it counts ours."""
    db = await asyncpg.create_pool(**driver_params(url), min_size=workers, max_size=workers)
    rng = random.Random(seed)
    names = list(limits)
    queue = [claim_event(rng.choice(names), rng) for _ in range(attempts)]
    todo = iter(queue)
    granted = 0

    async def worker() -> None:
        nonlocal granted
        async with db.acquire() as conn:
            for event in todo:
                pool = event.data["nodepool"]
                cpu = max(int(t["capacity"]["cpu"]) for t in event.data["instance_types"])
                count, used = await conn.fetchrow(
                    f"SELECT count(*), coalesce(sum({LARGEST_CPU}), 0) FROM events"
                    " WHERE type = 'NodeClaimCreated' AND data->>'nodepool' = $1",
                    pool,
                )
                await asyncio.sleep(0)  # the time between the cached read and the create
                if count < limits[pool]["nodes"] and used + cpu <= limits[pool]["cpu"]:
                    await conn.execute(
                        "INSERT INTO events (event_id, stream_id, version, type, data, occurred_at)"
                        " VALUES ($1, $2, 1, 'NodeClaimCreated', $3::jsonb, $4)",
                        event.event_id,
                        event.stream_id,
                        json.dumps(event.data),
                        AT,
                    )
                    granted += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    seconds = time.perf_counter() - start
    await db.close()
    return {"granted": granted, "seconds": seconds, "overrun": overrun(await log_peaks(url), limits)}


CHURN = 0.25


def _paths(raced: dict[str, Any]) -> str:
    paths = [p["paths"] for p in raced["per_process"]]
    kinds = ("recalled", "read", "locked")
    return "transactions planned from memory / after a read / locked: " + " / ".join(
        str(sum(p[k] for p in paths)) for k in kinds
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--attempts", type=int, default=10000)
    parser.add_argument("--processes", type=int, default=4, help="OS processes in the cross-process race")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds: the test suite's run")
    args = parser.parse_args()
    if args.smoke:
        args.attempts, args.processes = 400, 2
        limits = pools(args.seed, nodes=(5, 30), cpu=(20, 120))
    else:
        limits = pools(args.seed)
    capacity = sum(v["nodes"] for v in limits.values())
    low, high = min(v["cpu"] for v in limits.values()), max(v["cpu"] for v in limits.values())
    print(f"10 pools, limits.nodes summing to {capacity}, cpu limits in [{low}, {high}]; {args.attempts} attempts")
    with bench_database() as url:
        base = loop.run(naive(url, limits, args.attempts, args.seed))
    print(
        f"baseline (check cached usage, then create): granted {base['granted']}, "
        f"overrun {base['overrun']} (nodes + cpu, counted in the log), {base['seconds']:.2f} s"
    )
    with bench_database() as url:
        out = loop.run(strict(url, limits, args.attempts, args.seed))
    print(
        f"nodewright in one process (reservation in the appending transaction): granted {out['granted']}, "
        f"overrun {out['overrun']} (counted in the log), {out['seconds']:.2f} s "
        f"({args.attempts / out['seconds']:,.0f} attempts/s); pools filled to their node limit: "
        f"{out['full_pools']}/10; audit replay: {out['audit_violations']} violations, {out['replay_nodes']} nodes "
        f"(live {out['granted']})"
    )
    with bench_database() as url:
        raced = loop.run(processes_strict(url, limits, args.attempts, args.processes, args.seed, batched=True))
    print(
        f"nodewright across {args.processes} processes, the same burst (a store, connections and appender each): "
        f"granted {raced['granted']}, overrun {raced['overrun']} (counted in the log: {raced['logged_claims']} "
        f"claims), {raced['seconds']:.2f} s ({raced['attempts'] / raced['seconds']:,.0f} attempts/s, "
        f"{raced['attempts'] / raced['seconds'] / (args.attempts / out['seconds']):.2f}x of one process); "
        f"{_paths(raced)}"
    )
    single = args.attempts // 5
    with bench_database() as url:
        churned = loop.run(processes_strict(url, limits, single, args.processes, args.seed, batched=False, churn=CHURN))
    print(
        f"nodewright across {args.processes} processes, {single} attempts one per transaction, 8 at a time in each, "
        f"{CHURN:.0%} of grants terminated again: granted {churned['granted']}, terminated {churned['terminated']}, "
        f"overrun {churned['overrun']} (counted in the log, at every position), {churned['seconds']:.2f} s "
        f"({churned['attempts'] / churned['seconds']:,.0f} attempts/s); {_paths(churned)}"
    )
    print(
        json.dumps(
            {
                "attempts": args.attempts,
                "baseline_overrun": base["overrun"],
                "granted": out["granted"],
                "overrun": out["overrun"],
                "seconds": round(out["seconds"], 3),
                "processes": args.processes,
                "processes_granted": raced["granted"],
                "processes_overrun": raced["overrun"],
                "processes_seconds": round(raced["seconds"], 3),
                "churned_attempts": churned["attempts"],
                "churned_overrun": churned["overrun"],
                "churned_seconds": round(churned["seconds"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
