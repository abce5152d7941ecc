"""The one conditional write of an append (`sql.WRITE`): the planned rows and counter rows go in
only if every pool is still at the version the snapshot had, and no id the snapshot could not
vouch for is stored; otherwise nothing is written and the caller plans again on a fresh read.

The write also extends the hash chain (digest form 3, `shared.policy.digests`), computed here
from what it sends: an event a pool counts linked to the pool's head (its `chain_head`) as the
snapshot knows it, any other to its stream's head. Both hold exactly when the write does: a
pool's `chain_head` moves only with its version, which the statement checks, and a stream's
head event never changes, so a write after a head this process had wrong collides with the
stored version instead. Given the signing key, each event's hash is signed beside it
(`shared.policy.digests.Signer`)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import asyncpg
import orjson

from shared.policy.digests import Signer, event_key, linked, stored_payload_text
from shared.policy.resources import format_resources
from shared.store import sql
from shared.store.errors import StoreError
from shared.store.plan import WritePlan
from shared.store.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Written:
    """What a committed write leaves for this process to remember."""

    positions: dict[uuid.UUID, int]
    tips: Mapping[str, bytes | None]
    """The hash of each stream's head as the write leaves it (the snapshot's, and the batch's)."""
    chain_heads: Mapping[str, bytes | None]
    """Each pool's `chain_head` as the write leaves it."""


async def write_batch(
    raw: asyncpg.Connection,
    snapshot: Snapshot,
    planned: WritePlan,
    *,
    chained: bool = True,
    signer: Signer | None = None,
) -> Written | None:
    """The positions drawn, by event id, and the chain as it now ends; None when the snapshot no
    longer holds (nothing written). `chained=False` is the write before the hash chain, which
    `benchmarks/chain.py` runs alternately with this one to measure what the chain costs."""
    rows = planned.rows
    if not rows:  # every unit refused, stored, or a version check alone: nothing to write
        return Written({}, snapshot.tips, snapshot.chain_heads)
    tips = dict(snapshot.tips)
    chain_heads = dict(snapshot.chain_heads)
    last_event: dict[str, uuid.UUID] = {}
    events = []
    for r in rows:
        event = r.event
        stream, metadata = event.stream_id, event.metadata.to_dict()
        line = {
            "event_id": event.event_id,
            "stream_id": stream,
            "version": r.version,
            "type": event.type,
            "schema_version": event.schema_version,
            "data": r.data,
            "metadata": metadata,
            "occurred_at": event.occurred_at,
        }
        if r.pool is not None:
            last_event[r.pool] = event.event_id
        if not chained:
            tips[stream] = None
            events.append(line)
            continue
        content = event_key(event.event_id, r.version, event.schema_version, event.occurred_at)
        content += stored_payload_text(stream, event.type, r.data, metadata)
        if r.pool is not None:
            own = chain_heads[r.pool] = linked(chain_heads.get(r.pool), content)
        elif r.version > 1 and stream not in tips:
            raise StoreError(f"no hash known for version {r.version - 1} of {stream}: cannot chain the append")
        else:
            own = linked(tips[stream] if r.version > 1 else None, content)
        tips[stream] = own
        line["hash"] = own.hex()
        if signer is not None:
            line["signature"] = signer.sign(own).hex()
        events.append(line)
    names = sorted(last_event)
    found = await raw.fetch(
        sql.WRITE if chained else sql.UNCHAINED_WRITE,
        orjson.dumps(events, option=orjson.OPT_NAIVE_UTC).decode(),
        orjson.dumps(_counters(snapshot, planned, names, last_event, chain_heads)).decode(),
        names,
        [snapshot.pools[n].version for n in names],
        list(snapshot.unvouched),
    )
    if not found:
        return None
    return Written({r[1]: r[0] for r in found}, tips, chain_heads)


def _counters(
    snapshot: Snapshot,
    planned: WritePlan,
    names: list[str],
    last_event: Mapping[str, uuid.UUID],
    chain_heads: Mapping[str, bytes | None],
) -> list[dict[str, object]]:
    """The counter rows of the pools the batch counted in, as its plan leaves them."""
    out = []
    for name in names:
        pool, loaded = planned.pools[name], snapshot.pools[name]
        changed = pool.spec is not loaded.spec
        head = chain_heads[name]
        out.append(
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
                "chain_head": head.hex() if head is not None else None,
            }
        )
    return out
