"""What a batch of units is checked against, and what it needs to be.

A snapshot comes from one of three sources: this process's memory of its own last appends
(`recall`, here, no round trip), or PostgreSQL (`shared.store.gather.read`: unlocked, or with the
pools' rows locked). Whatever the source, the write (`shared.store.write`) proves the snapshot
still holds or writes nothing (`docs/store.md` says why that is enough). A `Snapshot` is not
changed by anyone: the plan copies what it evolves. No I/O here.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from shared.events.contracts import NodeClaimEvent
from shared.policy.counters import ClaimState, PoolCounters
from shared.policy.touches import touches
from shared.store.memory import Memory
from shared.store.units import NO_STREAM, Unit


class Source(StrEnum):
    MEMORY = "memory"
    READ = "read"
    LOCKED = "locked"


@dataclass(frozen=True, slots=True)
class Needs:
    """What a batch must know to be checked, from its units alone."""

    pools: tuple[str, ...]
    """The pools its events count in, sorted: the order their rows are locked in."""
    claims: frozenset[str]
    """The claims its counted events name."""
    streams: frozenset[str]
    event_ids: tuple[uuid.UUID, ...]
    replaces: frozenset[str]
    """Decisions it creates replacements for: the pool names their candidates, so it is read first."""
    empty: bool
    """An append of no events (a version check alone): only a read knows the stream's head."""


def needs(units: Sequence[Unit]) -> Needs:
    """One pass over the units (this runs for every append)."""
    pools: set[str] = set()
    claims: set[str] = set()
    replaces: set[str] = set()
    streams: set[str] = set()
    ids: list[uuid.UUID] = []
    empty = False
    for u in units:
        for a in u:
            streams.add(a.stream_id)
            if not a.events:
                empty = True
            for e in a.events:
                ids.append(e.event_id)
                touched = touches(e.type, e.data)
                if touched.pool is not None:
                    pools.add(touched.pool)
                    claims.update(touched.claims)
                    if touched.replaces is not None:
                        replaces.add(touched.replaces)
    return Needs(tuple(sorted(pools)), frozenset(claims), frozenset(streams), tuple(ids), frozenset(replaces), empty)


@dataclass(frozen=True, slots=True)
class Snapshot:
    source: Source
    pools: Mapping[str, PoolCounters]
    """Every pool the batch counts in; the write expects each still at its `version`."""
    claims: Mapping[str, ClaimState]
    heads: Mapping[str, int]
    """Stream heads; a stream the batch starts is at 0."""
    stored: Mapping[uuid.UUID, int] = field(default_factory=dict)
    """The batch's event ids stored already, with their positions (a read found them)."""
    since: Mapping[str, int] = field(default_factory=dict)
    """Per pool, the version from which every change to it was this process's own (for memory)."""
    unvouched: tuple[uuid.UUID, ...] = ()
    """Ids the write must find absent: memory cannot know they are new."""
    tips: Mapping[str, bytes | None] = field(default_factory=dict)
    """The hash of each stream's head event (None: stored without one); a stream at 0 has none.
    The write links a stream's next event to it."""
    chain_heads: Mapping[str, bytes | None] = field(default_factory=dict)
    """Each pool's `chain_head` at its `version`: the write extends it."""


def recall(units: Sequence[Unit], need: Needs, memory: Memory) -> Snapshot | None:
    """The snapshot from memory, or None when memory cannot vouch for it: a pool not remembered,
    a claim another process may have moved, a stream whose head is unknown, replacements (their
    candidates come from a read of the pool), an append of no events.

    A claim's stream head is remembered; a stream the batch starts must be at 0, and a wrong
    guess collides with a stored version (versions are dense). Events appended at any version,
    or to a stream the batch starts, may be stored already: the write looks their ids up."""
    if need.replaces or need.empty or not all(memory.pools.has(n) for n in need.pools):
        return None
    since = {name: memory.pools.since(name) for name in need.pools}
    claims: dict[str, ClaimState] = {}
    heads: dict[str, int] = {}
    tips: dict[str, bytes | None] = {}
    for name in need.claims:
        version, state, at, tip = memory.claims.get(name)
        if state is None:
            continue  # not known here: fine only for a claim this batch creates (its stream starts at 0)
        if state.nodepool not in since or at < since[state.nodepool]:
            return None
        claims[name] = state
        stream = NodeClaimEvent.stream_of(name)
        heads[stream] = version
        tips[stream] = tip
    unvouched: list[uuid.UUID] = []
    for u in units:
        for a in u:
            if a.stream_id not in heads:
                if a.expected_version != NO_STREAM:
                    return None
                heads[a.stream_id] = 0
                unvouched += [e.event_id for e in a.events]
            elif a.expected_version is None:
                unvouched += [e.event_id for e in a.events]
    pools = {name: memory.pools.get(name) for name in need.pools}
    chain_heads = {name: memory.pools.chain_head(name) for name in need.pools}
    return Snapshot(
        Source.MEMORY, pools, claims, heads, since=since, unvouched=tuple(unvouched), tips=tips, chain_heads=chain_heads
    )
