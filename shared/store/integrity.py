"""The hash chain checked where the audit reads the log: each part of the replay checks the
rows it folds (`shared.policy.chain.LogChain`, digests rebuilt from what it parses anyway), and
this module does what needs the database: the chain's start, the predecessors of the events a
part could not link itself, the heads the counter rows keep. All in the audit's snapshot.

What each check finds (the rules are `shared.policy.chain`'s, the same for an exported log):
- a stream's versions not following each other: an event deleted (a position gap alone is a
  rolled-back transaction, never reported);
- a hash that is not sha256(previous hash || digest): a rewritten event, or one moved within its
  stream;
- a version that comes before the version preceding it: two events' positions swapped;
- a chained event with no hash: written around the store;
- a pool whose counted events chain to another head than its counter row's: one removed (the
  newest too), inserted or reordered.
A cut-back to an earlier state that also rewinds the counter rows needs an anchor kept elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shared.policy.chain import (
    ChainPart,
    ChainSpec,
    Link,
    Predecessor,
    Problem,
    compare_anchor,
    compare_heads,
    heads_digest,
    settle,
)
from shared.policy.counters import COUNTED_EVENTS

if TYPE_CHECKING:
    from shared.store.reads import LogReader

LIMIT = 1000
"""Problems reported at most: a log that broken says enough with the first thousand."""

_PREDECESSORS = """
SELECT l.stream, l.version, e.version, e.position, e.hash
FROM unnest($1::text[], $2::int[]) AS l(stream, version)
CROSS JOIN LATERAL (
    SELECT version, position, hash FROM events WHERE stream_id = l.stream AND version < l.version
    ORDER BY version DESC LIMIT 1
) AS e
"""
"""Each link's predecessor: one index probe per link (a stream with no earlier version returns
no row)."""


@dataclass
class Integrity:
    problems: list[Problem] = field(default_factory=list)
    heads: dict[str, tuple[int, bytes | None]] = field(default_factory=dict)
    """Per pool, its chained counted events and their head, recomputed from the log."""
    position: int = 0
    chained_after: int = 0

    @property
    def digest(self) -> str:
        return heads_digest(self.heads)


async def begin(
    reader: LogReader, snapshot: str | None, anchored: Mapping[str, tuple[int, bytes | None]] | None = None
) -> ChainSpec:
    """What the parts of an audit check against: where the chain starts, the anchored counts."""
    async with reader.reading(snapshot) as raw:
        after = await raw.fetchval("SELECT chained_after FROM store_identity")
    return ChainSpec(COUNTED_EVENTS, after, {pool: n for pool, (n, _) in (anchored or {}).items()})


async def conclude(
    reader: LogReader,
    snapshot: str | None,
    spec: ChainSpec,
    parts: Iterable[ChainPart],
    anchored: Mapping[str, tuple[int, bytes | None]] | None = None,
) -> Integrity:
    """The parts' findings put together: links settled against their predecessors, the pools'
    heads compared with their counter rows and, given one, the anchor. Pools never cross parts."""
    found: list[Problem] = []
    links: list[Link] = []
    heads: dict[str, tuple[int, bytes | None]] = {}
    prefixes: dict[str, tuple[int, bytes | None]] = {}
    for part in parts:
        found += part.problems
        links += part.links
        heads.update(part.heads)
        prefixes.update(part.prefixes)
    async with reader.reading(snapshot) as raw:
        position = await raw.fetchval("SELECT coalesce(max(position), 0) FROM events")
        previous: dict[tuple[str, int], Predecessor] = {}
        if links:
            rows = await raw.fetch(_PREDECESSORS, [k.stream for k in links], [k.version for k in links])
            previous = {(stream, version): Predecessor(*rest) for stream, version, *rest in rows}
        recorded = {p: h for p, h in await raw.fetch("SELECT nodepool, chain_head FROM nodepool_counters")}
    for link in links:
        if (problem := settle(link, previous.get((link.stream, link.version)))) is not None:
            found.append(problem)
    found.sort(key=lambda p: p.position or 0)
    problems = found[:LIMIT] + compare_heads(heads, recorded)
    if anchored:
        problems += compare_anchor(anchored, prefixes)
    return Integrity(problems, heads, position, spec.chained_after)


async def check(
    reader: LogReader, snapshot: str | None = None, anchored: Mapping[str, tuple[int, bytes | None]] | None = None
) -> Integrity:
    """The chain alone, in one pass over the whole log (no replay): what a test asks after any
    workload. Give a `snapshot` when writers may be busy."""
    spec = await begin(reader, snapshot, anchored)
    chain = spec.start()
    async for page in reader.log_entries(snapshot=snapshot, chain=True):
        chain.feed(page)
    return await conclude(reader, snapshot, spec, [chain.part()], anchored)
