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
  newest too), inserted or reordered;
- given the signing key, an event whose signature does not verify, or that has none after the
  first signed one: forged, or rewritten and its hash recomputed;
- given an anchor, the heads of every stream and pool as of its position no longer those it
  kept, or a log that ends before it: an event removed, rewritten or inserted by then (the
  newest of a stream too), or a cut-back with the counter rows rewound.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shared.policy.anchors import Heads, compare
from shared.policy.chain import ChainPart, ChainSpec, Predecessor, Problem, Signatures, compare_heads, join
from shared.policy.counters import COUNTED_EVENTS
from shared.policy.digests import Signer

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
    """The log's last position."""
    chained_after: int = 0
    at: Heads = field(default_factory=lambda: Heads(0, {}, {}))
    """The heads as of the audit's own position: what it prints and an anchor keeps."""
    signatures: Signatures | None = None
    """What the signatures showed; None without the key (not checked)."""

    @property
    def digest(self) -> str:
        return self.at.digest


async def begin(
    reader: LogReader,
    snapshot: str | None,
    anchored: Heads | None = None,
    signer: Signer | None = None,
    at: int | None = None,
) -> ChainSpec:
    """What the parts of an audit check against: where the chain starts, where signing began,
    and the positions as of which the heads are wanted: `at` (default: the log's last position
    in the snapshot) and the anchor's."""
    async with reader.reading(snapshot) as raw:
        after = await raw.fetchval("SELECT chained_after FROM store_identity")
        if at is None:
            at = await raw.fetchval("SELECT coalesce(max(position), 0) FROM events")
    signed_from = await reader.first_signed(snapshot) if signer is not None else None
    marks = (at,) if anchored is None else tuple(sorted({at, anchored.position}))
    return ChainSpec(COUNTED_EVENTS, after, marks, at, signer, signed_from)


async def conclude(
    reader: LogReader,
    snapshot: str | None,
    spec: ChainSpec,
    parts: Iterable[ChainPart],
    anchored: Heads | None = None,
) -> Integrity:
    """The parts' findings put together (`shared.policy.chain.join`): links settled against
    their predecessors, the pools' heads compared with their counter rows and, given one, the
    anchor with the heads as of its position."""
    parts = list(parts)
    links = [link for part in parts for link in part.links]
    async with reader.reading(snapshot) as raw:
        position = await raw.fetchval("SELECT coalesce(max(position), 0) FROM events")
        previous: dict[tuple[str, int], Predecessor] = {}
        if links:
            rows = await raw.fetch(_PREDECESSORS, [k.stream for k in links], [k.version for k in links])
            previous = {(stream, version): Predecessor(*rest) for stream, version, *rest in rows}
        recorded = {p: h for p, h in await raw.fetch("SELECT nodepool, chain_head FROM nodepool_counters")}
    joined = join(parts, previous, spec)
    kept = {mark: Heads.summed(mark, pools, sums) for mark, (pools, sums) in joined.marks.items()}
    problems = joined.problems[:LIMIT] + compare_heads(joined.heads, recorded)
    if anchored is not None:
        problems += compare(anchored, kept[anchored.position], position)
    signatures = joined.signatures if spec.signer is not None else None
    return Integrity(problems, joined.heads, position, spec.chained_after, kept[spec.at], signatures)


async def check(
    reader: LogReader,
    snapshot: str | None = None,
    anchored: Heads | None = None,
    signer: Signer | None = None,
    at: int | None = None,
) -> Integrity:
    """The chain alone, in one pass over the whole log (no replay): what a test asks after any
    workload, and what `events export` writes in its trailer. Give a `snapshot` when writers may
    be busy."""
    spec = await begin(reader, snapshot, anchored, signer, at)
    chain = spec.start()
    async for page in reader.log_entries(snapshot=snapshot, chain=True, signed=signer is not None):
        chain.feed(page)
    return await conclude(reader, snapshot, spec, [chain.part()], anchored)
