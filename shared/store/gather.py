"""A snapshot read from PostgreSQL (`shared.store.snapshot` says what one is).

Unlocked: one round trip, in one PostgreSQL snapshot. Locked: inside the caller's transaction,
the pools' counter rows first (created for a pool's first event), usually in the same statement
as the rest.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import asyncpg

from shared.events.contracts import NodeClaimEvent
from shared.policy.counters import ClaimState, PoolCounters, fold_claim
from shared.policy.resources import quantity
from shared.store import sql
from shared.store.memory import Memory
from shared.store.snapshot import Needs, Snapshot, Source


async def read(raw: asyncpg.Connection, need: Needs, memory: Memory, *, locked: bool) -> Snapshot | None:
    """The snapshot read from PostgreSQL. Unlocked, in one round trip and one snapshot; None when
    only the locked read will do (a pool without its counter row yet, or replacements). Locked,
    inside the caller's transaction: the pools' rows first (created for a pool's first event),
    usually in the same statement as the rest; if a pool moved while the statement waited for its
    lock (its snapshot predates the wait), the rest is read again under the lock."""
    if not locked:
        if need.replaces:
            return None
        known, arguments = _arguments(need, memory, {})
        rows = await raw.fetch(sql.PEEK_AND_READ, *arguments, list(need.pools))
        counters = [r[3] for r in rows if r[2] == sql.POOL]
        if len(counters) < len(need.pools):
            return None
        return _snapshot(Source.READ, _pools(counters, memory), _chain_heads(counters), known, rows)
    if not need.pools:
        known, arguments = _arguments(need, memory, {})
        return _snapshot(Source.LOCKED, {}, {}, known, await raw.fetch(sql.READ, *arguments))
    if not need.replaces:
        known, arguments = _arguments(need, memory, {})
        rows = await raw.fetch(sql.LOCK_AND_READ, *arguments, list(need.pools))
        seen = {r[0]: r[3] for r in rows if r[2] == sql.POOL}
        if len(seen) == len(need.pools) and all(row["version"] == row["seen"] for row in seen.values()):
            return _snapshot(Source.LOCKED, _pools(seen.values(), memory), _chain_heads(seen.values()), known, rows)
    counter_rows = await raw.fetch(sql.LOCK_POOLS, list(need.pools))
    if len(counter_rows) < len(need.pools):
        await raw.execute(sql.CREATE_POOL_ROWS, list(need.pools))
        counter_rows = await raw.fetch(sql.LOCK_POOLS, list(need.pools))
    pools = _pools(counter_rows, memory)
    known, arguments = _arguments(need, memory, pools)
    rows = await raw.fetch(sql.READ, *arguments)
    return _snapshot(Source.LOCKED, pools, _chain_heads(counter_rows), known, rows)


Known = dict[str, tuple[int, ClaimState | None, int, bytes | None]]


def _arguments(need: Needs, memory: Memory, pools: Mapping[str, PoolCounters]) -> tuple[Known, list[Any]]:
    """The claims to fold (each from the version this process knows it at, with the candidates
    of the decisions the batch replaces for), and `sql.READ`'s arguments: the batch's event ids,
    those claims' streams, the other streams."""
    names = set(need.claims)
    for decision in need.replaces:
        for pool in pools.values():
            names.update(n for n, (_, d) in pool.disrupting.items() if d == decision)
    known = {name: memory.claims.get(name) for name in names}
    folded = {NodeClaimEvent.stream_of(n): after for n, (after, _, _, _) in known.items()}
    return known, [list(need.event_ids), list(folded), list(folded.values()), sorted(need.streams - folded.keys())]


def _snapshot(
    source: Source,
    pools: dict[str, PoolCounters],
    chain_heads: dict[str, bytes | None],
    known: Known,
    rows: Iterable[Any],
) -> Snapshot:
    """Stream heads (with their hashes), claims and stored ids from `sql.READ`'s rows (pool rows
    are skipped)."""
    stored: dict[uuid.UUID, int] = {}
    heads: dict[str, int] = {}
    tips: dict[str, bytes | None] = {}
    for name, (after, _, _, tip) in known.items():
        if after:
            stream = NodeClaimEvent.stream_of(name)
            heads[stream], tips[stream] = after, tip
    by_stream: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for stream, number, kind, data, hash_ in rows:
        if number is None or kind == sql.POOL:
            continue
        if kind == sql.STORED:
            stored[uuid.UUID(stream)] = number
            continue
        if number >= heads.get(stream, 0):
            heads[stream], tips[stream] = number, hash_
        if kind is not None:
            by_stream.setdefault(stream, []).append((kind, data))
    claims: dict[str, ClaimState] = {}
    for name, (_, state, _, _) in known.items():
        events = by_stream.get(NodeClaimEvent.stream_of(name))
        if events:  # the fold moves the state on in place: never the cache's own
            state = fold_claim(events, name, state.copy() if state is not None else None)
        if state is not None:
            claims[name] = state
    since = {name: pool.version for name, pool in pools.items()}
    return Snapshot(source, pools, claims, heads, stored, since, tips=tips, chain_heads=chain_heads)


def _chain_heads(rows: Iterable[Any]) -> dict[str, bytes | None]:
    """Each counter row's `chain_head` (`sql.COUNTER_COLUMNS` reads it as hex)."""
    return {r["nodepool"]: bytes.fromhex(r["chain_head"]) if r["chain_head"] else None for r in rows}


def _pools(rows: Iterable[Any], memory: Memory) -> dict[str, PoolCounters]:
    return {r["nodepool"]: pool_from_row(r, memory.specs.parse(r["spec"])) for r in rows}


def pool_from_row(r: Any, spec: dict[str, Any] | None) -> PoolCounters:
    return PoolCounters(
        nodepool=r["nodepool"],
        spec=spec,
        nodes=r["nodes"],
        in_flight=r["in_flight"],
        initialized=r["initialized"],
        resources={k: quantity(v) for k, v in r["resources"].items()},
        disrupting=r["disrupting"],
        replacing=r["replacing"],
        version=r["version"],
        last_position=r["last_position"],
    )
