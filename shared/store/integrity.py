"""The hash chain checked where the log is: PostgreSQL recomputes every chained event's digest
and link, and each pool's head, in the audit's snapshot; only the problems come back.

What each check finds (the rules are `shared.policy.chain`'s, for an exported log):
- a stream's versions not following each other: an event deleted (a position gap alone is a
  rolled-back transaction, never reported);
- a hash that is not sha256(previous hash || digest): a rewritten event, or one moved within its
  stream;
- a chained event with no hash: written around the store;
- a pool whose counted events chain to another head than its counter row's: one removed (the
  newest too), inserted or reordered.
A cut-back to an earlier state that also rewinds the counter rows needs an anchor kept elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shared.policy.chain import (
    REWRITTEN,
    UNCHAINED,
    Problem,
    compare_anchor,
    compare_heads,
    heads_digest,
    missing,
    reordered,
)
from shared.policy.counters import COUNTED_EVENTS

if TYPE_CHECKING:
    from shared.store.reads import LogReader

LIMIT = 1000
"""Problems reported at most: a log that broken says enough with the first thousand."""

_STREAMS = f"""
SELECT position, stream_id, version, prev_version, hash IS NULL AS unchained, prev_position > position AS moved
FROM (
    SELECT position, stream_id, version, hash, lag(hash) OVER w AS prev_hash, lag(version) OVER w AS prev_version,
           lag(position) OVER w AS prev_position,
           CASE WHEN position > $1 THEN nodewright_event_digest(event_id, stream_id, version, type, schema_version,
                                                                 data, metadata, occurred_at) END AS digest
    FROM events
    WINDOW w AS (PARTITION BY stream_id ORDER BY version)
) AS e
WHERE version <> coalesce(prev_version, 0) + 1 OR prev_position > position
   OR (position > $1 AND hash IS DISTINCT FROM
       CASE WHEN prev_hash IS NULL THEN digest ELSE sha256(prev_hash || digest) END)
ORDER BY position
LIMIT {LIMIT}
"""
_POOLS = """
SELECT nodepool, count(hash)::int, nodewright_chain(hash ORDER BY position)
FROM events WHERE nodepool IS NOT NULL AND type = ANY($2::text[]) AND position > $1
GROUP BY nodepool
"""
_PREFIXES = """
SELECT t.nodepool, count(t.hash)::int, nodewright_chain(t.hash ORDER BY t.position)
FROM (
    SELECT nodepool, hash, position, row_number() OVER (PARTITION BY nodepool ORDER BY position) AS n
    FROM events WHERE nodepool = ANY($3::text[]) AND type = ANY($2::text[]) AND position > $1 AND hash IS NOT NULL
) AS t
JOIN unnest($3::text[], $4::int[]) AS a(nodepool, most) ON a.nodepool = t.nodepool
WHERE t.n <= a.most
GROUP BY t.nodepool
"""


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


async def check(
    reader: LogReader, snapshot: str | None = None, anchored: Mapping[str, tuple[int, bytes | None]] | None = None
) -> Integrity:
    counted = sorted(COUNTED_EVENTS)
    async with reader.reading(snapshot) as raw:
        after = await raw.fetchval("SELECT chained_after FROM store_identity")
        out = Integrity(position=await raw.fetchval("SELECT coalesce(max(position), 0) FROM events"))
        out.chained_after = after
        for position, stream, version, previous, unchained, moved in await raw.fetch(_STREAMS, after):
            if moved:
                out.problems.append(Problem(position, stream, "reordered", reordered(stream, version)))
            elif version != (previous or 0) + 1:
                out.problems.append(Problem(position, stream, "deleted", missing(stream, previous or 0, version)))
            elif unchained:
                out.problems.append(Problem(position, stream, "unchained", UNCHAINED))
            else:
                out.problems.append(Problem(position, stream, "rewritten", REWRITTEN))
        out.heads = {pool: (n, head) for pool, n, head in await raw.fetch(_POOLS, after, counted)}
        recorded = {p: h for p, h in await raw.fetch("SELECT nodepool, chain_head FROM nodepool_counters")}
        out.problems += compare_heads(out.heads, recorded)
        if anchored:
            pools = sorted(anchored)
            rows = await raw.fetch(_PREFIXES, after, counted, pools, [anchored[p][0] for p in pools])
            out.problems += compare_anchor(anchored, {pool: (n, head) for pool, n, head in rows})
    return out
