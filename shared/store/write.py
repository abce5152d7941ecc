"""The one conditional write of an append (`sql.WRITE`): the planned rows and counter rows go in
only if every pool is still at the version the snapshot had, and no id the snapshot could not
vouch for is stored; otherwise nothing is written and the caller plans again on a fresh read."""

from __future__ import annotations

import uuid

import asyncpg
import orjson

from shared.policy.resources import format_resources
from shared.store import sql
from shared.store.plan import WritePlan
from shared.store.snapshot import Snapshot


async def write_batch(raw: asyncpg.Connection, snapshot: Snapshot, planned: WritePlan) -> dict[uuid.UUID, int] | None:
    """The positions drawn, by event id; None when the snapshot no longer holds (nothing written)."""
    rows = planned.rows
    if not rows:  # every unit refused, stored, or a version check alone: nothing to write
        return {}
    last_event = {r.pool: r.event.event_id for r in rows if r.pool is not None}
    names = sorted(last_event)
    counters = []
    for name in names:
        pool, loaded = planned.pools[name], snapshot.pools[name]
        changed = pool.spec is not loaded.spec
        counters.append(
            {
                "nodepool": name,
                "spec_changed": changed,
                "spec": pool.spec if changed else None,
                "nodes": pool.nodes,
                "in_flight": pool.in_flight,
                "initialized": pool.initialized,
                "resources": format_resources({k: v for k, v in pool.resources.items() if v}),
                "disrupting": pool.disrupting,
                "by_reason": pool.disrupting_by_reason(),
                "replacing": pool.replacing,
                "version": pool.version,
                "last_event": last_event[name],
            }
        )
    events = [
        {
            "event_id": r.event.event_id,
            "stream_id": r.event.stream_id,
            "version": r.version,
            "type": r.event.type,
            "schema_version": r.event.schema_version,
            "data": r.data,
            "metadata": r.event.metadata.to_dict(),
            "occurred_at": r.event.occurred_at,
            "pool": r.pool,
        }
        for r in rows
    ]
    found = await raw.fetch(
        sql.WRITE,
        orjson.dumps(events, option=orjson.OPT_NAIVE_UTC).decode(),
        orjson.dumps(counters).decode(),
        names,
        [snapshot.pools[n].version for n in names],
        list(snapshot.unvouched),
    )
    if not found:
        return None
    return {r[1]: r[0] for r in found}
