"""Event store benchmark: appends with counter updates, and an audit replay of a long log.

1. Micro-batched appends: 128 concurrent writers drive NodeClaims through their lifecycle
   (Created -> Launched -> Initialized -> Terminated: every event checked against limits and
   folded into its pool's counter row) through `AppendBatcher`. Events/s and per-append
   latency (p50, p99), and the share of transactions checked from memory (no read). Target:
   >= 20,000 events/s at p99 <= 10 ms. Ceiling: the same rows INSERTed in batches of the run's
   mean size by the store's own statement, prepared before the clock starts (no checks, no
   counters, no client work): what PostgreSQL alone takes on this machine.
2. One event per transaction: the same lifecycle with `EventStore.append`, 16 writers.
   Target: >= 2,000 events/s.
   Baseline for both: the same rows INSERTed one per transaction, with no check and no counters
   (what a naive event table gives).
3. A peer, in the same run on the same server with the same payloads: the eventsourcing
   library's `PostgresApplicationRecorder` (gap-free global order, like our positions), one
   event per transaction from 16 writers, and batches of 64 from 8 writers (threads: the
   library is synchronous). Goals: at least 4x its rate one per transaction, 1.3x batched
   (needs the `bench` extra, which `make` installs: `pip install -e '.[bench]'`).
4. Audit replay: a log of 1,000,000 lifecycle events over 10 pools, with the counter rows the
   store would have written. The fold alone (in memory), and the full `nodewright audit` path
   (read from PostgreSQL + fold + compare counters) split over the available cores, against
   the same audit in one process, and against the floor: reading and JSON-decoding the same
   rows without folding (goal: the replay within 1.5x of it).

Run: `make bench` (or `python -m benchmarks.store --events 60000 --replay 1000000`).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from benchmarks._batcher import AppendBatcher
from benchmarks._cpu import measured
from benchmarks._db import bench_database
from cli.audit import AuditResult, audit_database
from cli.folding import available_cores
from shared.config import driver_params
from shared.events import contracts as c
from shared.events.envelope import Metadata, NewEvent
from shared.policy.audit import LogEntry, Replay
from shared.policy.counters import TIMED_EVENTS, counted_pool
from shared.policy.digests import (
    POOL_LINKED,
    chain_step,
    event_key,
    linked,
    stored_canonical,
    stored_payload_text,
)
from shared.runtime import loop
from shared.store.eventstore import EVENT_ROWS_INSERT, AppendPaths, EventStore

POOLS = [f"pool-{i}" for i in range(10)]
WRITERS = 128  # concurrent appenders in the micro-batched run (Little's law: 20,000/s at 6.4 ms mean)
FLUSHERS = 3
AT = datetime(2026, 11, 23, 12, tzinfo=UTC)
META = Metadata("bench")


def pool_object(name: str) -> dict:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "limits": {"cpu": "100000000", "memory": "1000000Gi", "nodes": "100000000"},
            "disruption": {"budgets": [{"nodes": "10%"}]},
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [],
                }
            },
        },
    }


def lifecycle(claim: str, pool: str) -> list[tuple[str, dict]]:
    """(type, data) of one claim's four counted events."""
    cap = {"cpu": "4", "memory": "16Gi", "pods": "110"}
    base = {"nodeclaim": claim, "nodepool": pool}
    return [
        (
            "NodeClaimCreated",
            {**base, "instance_types": [{"name": "m5.xlarge", "capacity": cap}], "pods": [], "requirements": []},
        ),
        (
            "NodeClaimLaunched",
            {**base, "instance_type": "m5.xlarge", "capacity": cap, "provider_id": f"sim:///{claim}"},
        ),
        ("NodeClaimInitialized", dict(base)),
        ("NodeClaimTerminated", {**base, "reason": "bench"}),
    ]


def event(stream: str, kind: str, data: dict) -> NewEvent:
    return NewEvent(stream, kind, data, AT, META)


async def apply_pools(store: EventStore) -> None:
    for pool in POOLS:
        applied = c.NodePoolApplied(nodepool=pool, nodepool_object=pool_object(pool))
        await store.append(applied.stream_id, None, [NewEvent.of(applied, occurred_at=AT, producer="bench")])


async def drive(append, total_events: int, writers: int) -> tuple[float, list[float]]:
    """`writers` tasks each take claims and append their lifecycle one event at a time."""
    claims = total_events // 4
    latencies: list[float] = []
    next_claim = iter(range(claims))

    async def writer() -> None:
        for i in next_claim:
            name = f"c-{uuid.uuid4().hex[:12]}-{i}"
            stream = f"nodeclaim-{name}"
            for version, (kind, data) in enumerate(lifecycle(name, POOLS[i % len(POOLS)])):
                t = time.perf_counter()
                await append(stream, version, [event(stream, kind, data)])
                latencies.append(time.perf_counter() - t)

    start = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(writers)))
    return time.perf_counter() - start, latencies


async def baseline(url: str, total_events: int, writers: int) -> float:
    """The same rows, one INSERT per transaction, no checks or counters."""
    import asyncpg

    pool = await asyncpg.create_pool(
        **driver_params(url),
        min_size=writers,
        max_size=writers,
    )
    claims = total_events // 4
    next_claim = iter(range(claims))

    async def writer() -> None:
        async with pool.acquire() as conn:
            for i in next_claim:
                name = f"b-{uuid.uuid4().hex[:12]}-{i}"
                for version, (kind, data) in enumerate(lifecycle(name, POOLS[i % len(POOLS)]), 1):
                    await conn.execute(
                        "INSERT INTO events (event_id, stream_id, version, type, data, occurred_at)"
                        " VALUES ($1, $2, $3, $4, $5::jsonb, $6)",
                        uuid.uuid4(),
                        f"nodeclaim-{name}",
                        version,
                        kind,
                        json.dumps(data),
                        AT,
                    )

    start = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(writers)))
    elapsed = time.perf_counter() - start
    await pool.close()
    return claims * 4 / elapsed


async def batched_floor(url: str, total_events: int, batch: int, connections: int) -> float:
    """The same rows INSERTed `batch` to a statement over `connections` connections, with the
    statement the store uses, built before the clock starts: no checks, no counters, no client
    work. What PostgreSQL alone takes on this machine, the ceiling of any micro-batched append."""
    import asyncpg
    import orjson

    rows = []
    for i in range(total_events // 4):
        name = f"f-{uuid.uuid4().hex[:12]}-{i}"
        for version, (kind, data) in enumerate(lifecycle(name, POOLS[i % len(POOLS)]), 1):
            rows.append(
                {
                    "event_id": str(uuid.uuid4()),
                    "stream_id": f"nodeclaim-{name}",
                    "version": version,
                    "type": kind,
                    "schema_version": 1,
                    "data": data,
                    "metadata": META.to_dict(),
                    "occurred_at": AT.isoformat(),
                }
            )
    pages = iter([orjson.dumps(rows[i : i + batch]).decode() for i in range(0, len(rows), batch)])
    insert = f"{EVENT_ROWS_INSERT} ORDER BY j.ord"
    conns = [await asyncpg.connect(**driver_params(url)) for _ in range(connections)]

    async def writer(conn: asyncpg.Connection) -> None:
        for page in pages:
            await conn.execute(insert, page)

    start = time.perf_counter()
    await asyncio.gather(*(writer(c) for c in conns))
    elapsed = time.perf_counter() - start
    for conn in conns:
        await conn.close()
    return len(rows) / elapsed


def recalled_share(before: AppendPaths, after: AppendPaths) -> float:
    """The share of transactions checked against what the store remembered (no read)."""
    recalled = after.recalled - before.recalled
    total = recalled + after.read - before.read + after.locked - before.locked
    return recalled / total if total else 0.0


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000)[int(q * 1000) - 1] * 1000


async def appends(url: str, total: int, least: int = 4000) -> dict:
    """`least`: the warm-up's events, and the fewest the one-per-transaction run appends."""
    store = EventStore.connect(url, pool_size=8)
    await apply_pools(store)
    out = {}
    batcher = AppendBatcher(store, max_batch=400, flushers=FLUSHERS)
    await drive(batcher.append, least, WRITERS)  # warm up: connections, prepared statements
    warm, paths = batcher.transactions, replace(store.paths)
    with measured() as cpu:
        seconds, lat = await drive(batcher.append, total, WRITERS)
    out["batched"] = {
        "events_per_s": total / seconds,
        "p50_ms": pct(lat, 0.5),
        "p99_ms": pct(lat, 0.99),
        "transactions": batcher.transactions - warm,
        "from_memory": recalled_share(paths, store.paths),
        "cpu": cpu.per_event_us(total),
    }
    await batcher.close()
    single_total = max(total // 4, least)
    paths = replace(store.paths)
    with measured() as cpu:
        seconds, lat = await drive(store.append, single_total, 16)
    out["single"] = {
        "events_per_s": single_total / seconds,
        "p50_ms": pct(lat, 0.5),
        "p99_ms": pct(lat, 0.99),
        "from_memory": recalled_share(paths, store.paths),
        "cpu": cpu.per_event_us(single_total),
    }
    await store.close()
    out["baseline_events_per_s"] = await baseline(url, single_total, 16)
    mean_batch = max(round(total / max(out["batched"]["transactions"], 1)), 1)
    out["floor_batch"] = mean_batch
    out["floor_events_per_s"] = await batched_floor(url, total, mean_batch, FLUSHERS)
    return out


def peer(url: str, total_events: int) -> dict[str, float] | None:
    """The eventsourcing library's PostgreSQL application recorder, on its own table of the same
    database: one event per transaction from 16 writers, then batches of 64 from 8 writers; the
    same payloads (a claim's lifecycle, JSON). None when the `bench` extra is not installed."""
    try:
        from eventsourcing.persistence import StoredEvent
        from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return None
    from concurrent.futures import ThreadPoolExecutor

    # libpq reads the DSN the store's connections use (an embedded server's socket directory and
    # port sit in its query), so the peer reaches the same database the same way
    params = conninfo_to_dict(driver_params(url)["dsn"])
    datastore = PostgresDatastore(
        str(params["dbname"]),
        str(params.get("host") or "127.0.0.1"),
        str(params.get("port") or 5432),
        str(params.get("user") or "postgres"),
        str(params.get("password") or ""),
        pool_size=16,
    )
    recorder = PostgresApplicationRecorder(datastore, events_table_name="peer_events")
    recorder.create_table()

    def claim_events(i: int) -> list[StoredEvent]:
        originator = uuid.uuid4()
        return [
            StoredEvent(originator, version, kind, json.dumps(data).encode())
            for version, (kind, data) in enumerate(lifecycle(f"p-{i}", POOLS[i % len(POOLS)]), 1)
        ]

    def run(writers: int, per_call: int) -> float:
        """A claim's four events one transaction each, in order (as our writers append them), or
        `per_call` events (whole lifecycles) per transaction."""
        lifecycles = [claim_events(i) for i in range(total_events // 4)]
        if per_call == 1:
            work, calls = lifecycles, lambda events: [recorder.insert_events([e]) for e in events]
        else:
            flat = [e for events in lifecycles for e in events]
            work, calls = [flat[i : i + per_call] for i in range(0, len(flat), per_call)], recorder.insert_events
        started = time.perf_counter()
        with ThreadPoolExecutor(writers) as pool:
            list(pool.map(calls, work))
        return 4 * len(lifecycles) / (time.perf_counter() - started)

    run(16, 1)  # warm up: connections
    out = {"single_events_per_s": run(16, 1), "batched_events_per_s": run(8, 64)}
    datastore.close()
    return out


async def read_floor(url: str) -> float:
    """Seconds to read and JSON-decode the whole log as the replay does (the same pages and
    codec), without folding: what the replay cannot go below in one process."""
    store = EventStore.connect(url, pool_size=1)
    start = time.perf_counter()
    rows = 0
    async for page in store.log_entries(timed=TIMED_EVENTS):
        rows += len(page)
    seconds = time.perf_counter() - start
    await store.close()
    return seconds


def synthetic_log(n: int) -> list[LogEntry]:
    entries = [
        LogEntry(i + 1, f"nodepool-{p}", "NodePoolApplied", {"nodepool": p, "nodepool_object": pool_object(p)}, AT)
        for i, p in enumerate(POOLS)
    ]
    position = len(entries)
    claim = 0
    while position < n:
        name = f"r{claim}"
        for kind, data in lifecycle(name, POOLS[claim % len(POOLS)]):
            position += 1
            entries.append(LogEntry(position, f"nodeclaim-{name}", kind, data, AT + timedelta(milliseconds=position)))
        claim += 1
    return entries[:n]


async def load_log(url: str, entries: list[LogEntry], folded: Replay, form: int = POOL_LINKED) -> None:
    """Write the log with COPY, with the hashes the write would have given it, and the counter
    rows its fold gives (setup only: the benchmark times the replay, not this)."""
    import asyncpg

    conn = await asyncpg.connect(**driver_params(url))
    rows, heads = chained_rows(entries, form)
    await conn.copy_records_to_table(
        "events",
        records=rows,
        columns=["position", "event_id", "stream_id", "version", "type", "data", "occurred_at", "hash", "digest_form"],
    )
    for name, pool in folded.pools.items():
        row = pool.comparable()
        await conn.execute(
            "INSERT INTO nodepool_counters (nodepool, spec, nodes, in_flight, initialized, resources, disrupting,"
            " disrupting_by_reason, replacing, version, last_position, chain_head) VALUES ($1, $2, $3, $4, $5, $6,"
            " $7, $8, $9, $10, $11, $12)",
            name,
            json.dumps(row["spec"]),
            row["nodes"],
            row["in_flight"],
            row["initialized"],
            json.dumps(row["resources"]),
            json.dumps(row["disrupting"]),
            json.dumps(pool.disrupting_by_reason()),
            json.dumps(row["replacing"]),
            row["version"],
            row["last_position"],
            heads.get(name),
        )
    await conn.execute("VACUUM (ANALYZE) events")  # as autovacuum would: hint bits set, statistics known
    await conn.close()


def chained_rows(entries: list[LogEntry], form: int = POOL_LINKED) -> tuple[list[tuple], dict[str, bytes]]:
    """The COPY rows of a log as the store writes it, and each pool's head. Form 3 (the writer's):
    an event a pool counts linked to the pool's previous counted event, any other to its
    stream's previous one, a pool's head its newest counted event's hash. Form 2 (the writer
    before it, for `benchmarks.chain`'s old-against-new): a digest per event linked to its
    stream's previous hash, a pool's head chaining its counted events' hashes."""
    tips: dict[str, bytes] = {}
    versions: dict[str, int] = {}
    heads: dict[str, bytes] = {}
    rows = []
    for e in entries:
        version = versions[e.stream_id] = versions.get(e.stream_id, 0) + 1
        event_id = uuid.uuid4()
        pool = counted_pool(e.type, e.data)
        if form == POOL_LINKED:
            content = event_key(event_id, version, 1, e.occurred_at)
            content += stored_payload_text(e.stream_id, e.type, e.data, {})
            own = linked(heads.get(pool) if pool is not None else tips.get(e.stream_id), content)
            if pool is not None:
                heads[pool] = own
        else:
            text = stored_canonical(event_id, e.stream_id, version, e.type, 1, e.occurred_at, e.data, {})
            own = chain_step(tips.get(e.stream_id), hashlib.sha256(text).digest())
            if pool is not None:
                heads[pool] = chain_step(heads.get(pool), own)
        tips[e.stream_id] = own
        rows.append((e.position, event_id, e.stream_id, version, e.type, json.dumps(e.data), e.occurred_at, own, form))
    return rows, heads


async def replay_db(url: str, workers: int | None = None, chain: bool = True) -> tuple[float, AuditResult]:
    """What `nodewright audit` does: fold the log from PostgreSQL, compare with the live table,
    and (with `chain`) verify the hash chain meanwhile."""
    start = time.perf_counter()
    result = await audit_database(url, workers=workers, verify_chain=chain)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=60000, help="events for the micro-batched run")
    parser.add_argument("--replay", type=int, default=1_000_000, help="events in the replayed log")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds: the test suite's run")
    args = parser.parse_args()
    least = 4000
    if args.smoke:
        args.events, args.replay, least = 800, 2000, 200

    with bench_database() as url:
        results = loop.run(appends(url, args.events, least))
        peers = peer(url, max(args.events // 4, 2 * least))
    b, s, base = results["batched"], results["single"], results["baseline_events_per_s"]
    print(
        f"micro-batched appends with counters: {b['events_per_s']:,.0f} events/s, p50 {b['p50_ms']:.2f} ms, "
        f"p99 {b['p99_ms']:.2f} ms ({args.events} events, {b['transactions']} transactions, "
        f"{b['from_memory']:.0%} checked from memory; "
        f"target >= 20,000/s at p99 <= 10 ms); CPU: {b['cpu']}"
    )
    print(
        f"one event per transaction with counters: {s['events_per_s']:,.0f} events/s, p50 {s['p50_ms']:.2f} ms, "
        f"p99 {s['p99_ms']:.2f} ms, {s['from_memory']:.0%} checked from memory (target >= 2,000/s); "
        f"CPU: {s['cpu']}"
    )
    print(
        f"baseline, bare INSERT per transaction (no checks, no counters): {base:,.0f} events/s; "
        f"ratios: batched {b['events_per_s'] / base:.1f}x, single {s['events_per_s'] / base:.2f}x"
    )
    floor = results["floor_events_per_s"]
    print(
        f"floor, the same rows INSERTed {results['floor_batch']} per statement with nothing else to do: "
        f"{floor:,.0f} events/s; micro-batched appends reach {b['events_per_s'] / floor:.0%} of it"
    )
    if peers is None:
        print("peer: not run (pip install -e '.[bench]' for the eventsourcing library)")
        if args.smoke:
            raise SystemExit("a smoke run covers every part: the peer needs the bench extra")
    else:
        one, many = peers["single_events_per_s"], peers["batched_events_per_s"]
        print(
            f"peer, eventsourcing's PostgresApplicationRecorder (same server, same payloads): one per transaction "
            f"{one:,.0f} events/s (nodewright {s['events_per_s'] / one:.1f}x, goal >= 4x); batches of 64 "
            f"{many:,.0f} events/s (nodewright micro-batched {b['events_per_s'] / many:.2f}x, goal >= 1.3x)"
        )

    entries = synthetic_log(args.replay)
    start = time.perf_counter()
    folded = Replay()
    folded.feed(entries)
    fold_s = time.perf_counter() - start
    print(
        f"audit fold of {len(entries):,} events in memory: {fold_s:.2f} s ({len(entries) / fold_s:,.0f} events/s), "
        f"violations {len(folded.violations)}"
    )
    with bench_database() as url:
        loop.run(load_log(url, entries, folded))
        del entries
        read_s = loop.run(read_floor(url))
        one_s, one = loop.run(replay_db(url, workers=1))
        seconds, replayed = loop.run(replay_db(url))
    assert one.ok and replayed.ok and replayed.to_json() == one.to_json()
    print(
        f"audit replay of {replayed.replay.events:,} events from PostgreSQL (read + fold + compare counters): "
        f"{seconds:.2f} s on {available_cores()} cores; one process: {one_s:.2f} s, "
        f"ratio {one_s / seconds:.2f}x; in-memory fold share {fold_s / one_s:.0%} of the one-process run"
    )
    print(
        f"floor, reading and JSON-decoding the same rows without folding (one process): {read_s:.2f} s; "
        f"the replay takes {seconds / read_s:.2f}x of it (goal <= 1.5x), one process {one_s / read_s:.2f}x"
    )
    print(
        json.dumps(
            {
                "batched": b,
                "single": s,
                "baseline_events_per_s": base,
                "floor_events_per_s": floor,
                "peer": peers,
                "replay_seconds": seconds,
                "replay_one_process_seconds": one_s,
                "read_floor_seconds": read_s,
                "fold_seconds": fold_s,
            }
        )
    )


if __name__ == "__main__":
    main()
