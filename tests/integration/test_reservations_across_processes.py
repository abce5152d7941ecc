"""Strict limits across OS processes, on a real PostgreSQL: several processes, each with its own
`EventStore` and connections (nothing of the store's in-process turns or memory is shared),
reserve and terminate NodeClaims of the same pools at once; the log itself, counted in position
order, never holds more nodes or cpu than a pool's limits.

In one process the store's per-pool turns serialize appends before PostgreSQL sees them, so only
this race shows that the database's own check (a write conditional on the pools' versions, the
locked read) keeps the limits."""

from __future__ import annotations

import asyncio
import json

import asyncpg

from benchmarks.strict_limits import Limits, apply_limits, log_peaks, race_processes
from cli.audit import audit_database
from shared.config import driver_params
from shared.store.eventstore import EventStore
from tests.factories import created, new, terminated

LIMITS: Limits = {
    "by-nodes": {"nodes": 12, "cpu": 1000},  # the node limit binds
    "by-cpu": {"nodes": 1000, "cpu": 60},  # the cpu limit binds (claims reserve 2 to 8 cpu)
    "both": {"nodes": 15, "cpu": 70},
}


async def test_processes_with_stores_of_their_own_never_take_a_pool_past_its_limits(migrated_url: str):
    store = EventStore.connect(migrated_url, pool_size=2)
    try:
        await apply_limits(store, LIMITS)
        raced = await asyncio.to_thread(
            race_processes, migrated_url, list(LIMITS), processes=4, attempts=150, seed=38, churn=0.25
        )
        peaks = await log_peaks(migrated_url)
        live = await store.counters()
    finally:
        await store.close()
    for name, limits in LIMITS.items():
        assert peaks[name]["nodes"] <= limits["nodes"] and peaks[name]["cpu"] <= limits["cpu"], (name, peaks[name])
    assert peaks["by-nodes"]["nodes"] == LIMITS["by-nodes"]["nodes"]  # filled to the limit exactly, not short of it
    # every process was granted claims and refused others: they raced at the limits
    assert all(p["granted"] and p["refused"] for p in raced["per_process"]), raced["per_process"]
    assert raced["granted"] == sum(p["created"] for p in peaks.values())
    assert raced["terminated"] == sum(p["terminated"] for p in peaks.values()) > 0
    for name, p in peaks.items():  # the log's count and the live counters agree at the end
        assert live[name].nodes == p["created"] - p["terminated"], name
    result = await audit_database(migrated_url)
    assert result.replay.violations == [] and result.counters_match, result.mismatches


async def test_the_log_count_sees_an_overrun_written_past_the_store(migrated_url: str):
    """What the race is judged by: claims inserted without the store's check (as a writer with
    no protection would) show their peak, even after one of them ends."""
    store = EventStore.connect(migrated_url, pool_size=1)
    try:
        await apply_limits(store, {"p": {"nodes": 2, "cpu": 10}})
    finally:
        await store.close()
    rows = [new(created("x", "p", ("8", "32Gi"))), new(created("y", "p")), new(created("z", "p"))]
    rows.append(new(terminated("x", "p")))
    conn = await asyncpg.connect(**driver_params(migrated_url))
    try:
        for version, event in ((1, rows[0]), (1, rows[1]), (1, rows[2]), (2, rows[3])):
            await conn.execute(
                "INSERT INTO events (event_id, stream_id, version, type, data, occurred_at)"
                " VALUES ($1, $2, $3, $4, $5::jsonb, $6)",
                event.event_id,
                event.stream_id,
                version,
                event.type,
                json.dumps(event.data),
                event.occurred_at,
            )
    finally:
        await conn.close()
    (peak,) = (await log_peaks(migrated_url)).values()
    assert (peak["nodes"], peak["cpu"], peak["created"], peak["terminated"]) == (3, 12, 3, 1)
