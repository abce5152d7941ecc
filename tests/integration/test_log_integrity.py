"""Tampering, as a superuser would do it, is found by the hash chain and named by position and
stream; a rolled-back position is not tampering; an anchor kept elsewhere finds a log cut back
together with its counter rows."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from cli.audit import audit_database, audit_file, export
from shared.events import contracts as c
from shared.policy.anchors import read_heads
from shared.policy.counters import COUNTED_EVENTS
from shared.store import integrity
from shared.store.eventstore import EventStore
from tests.factories import T0, applied, created, initialized, insert_applied, launched, new, terminated
from tests.integration.test_audit import workload


async def as_maintenance(store: EventStore, *statements: str, args: tuple = ()) -> None:
    async with store.driver_connection() as raw, raw.transaction():
        await raw.execute("SET LOCAL nodewright.maintenance = on")
        for statement in statements:
            await raw.execute(statement, *args)


async def position_of(store: EventStore, stream: str, version: int) -> int:
    async with store.driver_connection() as raw:
        return await raw.fetchval("SELECT position FROM events WHERE stream_id = $1 AND version = $2", stream, version)


async def found(url: str, **kw) -> set[tuple[int | None, str, str]]:
    result = await audit_database(url, **kw)
    return {(p.position, p.stream, p.kind) for p in result.chain}


async def test_an_untouched_log_verifies_and_a_rollback_gap_is_not_tampering(store: EventStore, migrated_url: str):
    await workload(store)
    async with store.driver_connection() as raw:  # a writer draws a position, then rolls back
        transaction = raw.transaction()
        await transaction.start()
        gap = await insert_applied(raw, "ghost")
        await transaction.rollback()
    more = created("web-late", "web")
    await store.reserve_launch([more], occurred_at=T0 + timedelta(hours=3), producer="scheduler")
    assert await position_of(store, "nodeclaim-web-late", 1) > gap + 1 - 1
    result = await audit_database(migrated_url)
    assert result.ok and result.chain == [] and set(result.heads) == {"web", "batch"}


async def counted_after(store: EventStore, pool: str, position: int) -> tuple[int, str] | None:
    """The position and stream of the pool's next counted event: its hash is linked to the one at
    `position` (digest form 3)."""
    async with store.driver_connection() as raw:
        row = await raw.fetchrow(
            "SELECT position, stream_id FROM events WHERE nodepool = $1 AND position > $2 AND type = ANY($3::text[])"
            " ORDER BY position LIMIT 1",
            pool,
            position,
            sorted(COUNTED_EVENTS),
        )
    return (row[0], row[1]) if row else None


async def _delete_middle(store: EventStore) -> set:
    """The stream's versions skip, and the pool's next counted event no longer follows its
    predecessor."""
    position = await position_of(store, "nodeclaim-web-2", 2)  # launched, between created and initialized
    after = await position_of(store, "nodeclaim-web-2", 3)
    successor = await counted_after(store, "web", position)
    assert successor is not None
    await as_maintenance(store, f"DELETE FROM events WHERE position = {position}")
    return {(after, "nodeclaim-web-2", "deleted"), (*successor, "rewritten")}


async def _delete_newest_of_a_pool(store: EventStore) -> set:
    async with store.driver_connection() as raw:
        newest = await raw.fetchval("SELECT max(position) FROM events WHERE nodepool = 'batch'")
    await as_maintenance(store, f"DELETE FROM events WHERE position = {newest}")
    return {(None, "nodepool-batch", "pool-head")}


async def _rewrite_a_payload(store: EventStore) -> set:
    position = await position_of(store, "nodeclaim-web-0", 2)
    await as_maintenance(
        store,
        f"""UPDATE events SET data = jsonb_set(data, '{{instance_type}}', '"tiny"') WHERE position = {position}""",
    )
    return {(position, "nodeclaim-web-0", "rewritten")}


async def _swap_two_positions(store: EventStore) -> set:
    """The contents of two rows of one stream exchanged: each event keeps its hash, but the later
    version now sits at the earlier position, and both, with the pool's counted events after
    each, no longer follow their predecessors in the pool."""
    first, second = await position_of(store, "nodeclaim-web-2", 2), await position_of(store, "nodeclaim-web-2", 3)
    expected = {(first, "nodeclaim-web-2", "reordered"), (first, "nodeclaim-web-2", "rewritten")}
    expected.add((second, "nodeclaim-web-2", "rewritten"))
    for position in (first, second):
        successor = await counted_after(store, "web", position)
        if successor is None:  # the newest of the pool is now another event: the counter row's head tells
            expected.add((None, "nodepool-web", "pool-head"))
        else:
            expected.add((*successor, "rewritten"))
    columns = "event_id, stream_id, version, type, schema_version, data, metadata, occurred_at, hash"
    await as_maintenance(
        store,
        f"CREATE TEMP TABLE swap ON COMMIT DROP AS SELECT position, {columns} FROM events"
        f" WHERE position IN ({first}, {second})",
        f"UPDATE events SET event_id = gen_random_uuid(), version = -version WHERE position IN ({first}, {second})",
        f"UPDATE events AS e SET ({columns}) = (SELECT {columns} FROM swap AS s WHERE s.position = {second})"
        f" WHERE e.position = {first}",
        f"UPDATE events AS e SET ({columns}) = (SELECT {columns} FROM swap AS s WHERE s.position = {first})"
        f" WHERE e.position = {second}",
    )
    return expected


async def _forge_with_a_random_hash(store: EventStore) -> set:
    event = new(launched("web-3-forged", "web"), T0)
    version = await store.stream_version("nodeclaim-web-0") + 1
    async with store.driver_connection() as raw:
        position = await raw.fetchval(
            "INSERT INTO events (event_id, stream_id, version, type, data, occurred_at, hash)"
            " VALUES ($1, 'nodeclaim-web-0', $4, 'NodeClaimTerminated', $2::jsonb, $3, sha256('valid-looking'))"
            " RETURNING position",
            event.event_id,
            json.dumps({"nodeclaim": "web-0", "nodepool": "web", "reason": "forged"}),
            T0,
            version,
        )
    return {(position, "nodeclaim-web-0", "rewritten"), (None, "nodepool-web", "pool-head")}


async def _forge_with_a_computed_hash(store: EventStore) -> set:
    """A forger who knows the rule extends a stream correctly: the pool's head still tells."""
    version = await store.stream_version("nodeclaim-web-0") + 1
    async with store.driver_connection() as raw:
        await raw.execute(
            """
            INSERT INTO events (event_id, stream_id, version, type, data, occurred_at, hash)
            SELECT n.id, 'nodeclaim-web-0', $1, 'NodeClaimTerminated', n.data, n.at,
                   sha256(p.hash || nodewright_event_digest(n.id, 'nodeclaim-web-0', $1, 'NodeClaimTerminated',
                                                            1::smallint, n.data, '{}'::jsonb, n.at))
            FROM (SELECT gen_random_uuid() AS id, '{"nodeclaim": "web-0", "nodepool": "web"}'::jsonb AS data,
                         now() AS at) AS n,
                 (SELECT hash FROM events WHERE stream_id = 'nodeclaim-web-0' AND version = $1 - 1) AS p
            """,
            version,
        )
    return {(None, "nodepool-web", "pool-head")}


TAMPERING: list[tuple[str, Callable[[EventStore], Awaitable[set]]]] = [
    ("delete in the middle", _delete_middle),
    ("delete the newest of a pool", _delete_newest_of_a_pool),
    ("rewrite a payload", _rewrite_a_payload),
    ("swap two positions", _swap_two_positions),
    ("forge with a random hash", _forge_with_a_random_hash),
    ("forge with a computed hash", _forge_with_a_computed_hash),
]


@pytest.mark.parametrize("tamper", [t[1] for t in TAMPERING], ids=[t[0] for t in TAMPERING])
async def test_tampering_is_reported_by_position_and_stream(store: EventStore, migrated_url: str, tmp_path, tamper):
    await workload(store)
    assert await found(migrated_url) == set()
    expected = await tamper(store)
    assert await found(migrated_url) == expected
    path = tmp_path / "log.jsonl"
    await export(migrated_url, path)
    offline = {(p.position, p.stream, p.kind) for p in audit_file(path).chain}
    stream_level = {p for p in expected if p[2] != "pool-head"}
    assert stream_level <= offline  # the file alone finds what its streams show


async def test_an_anchor_finds_a_log_cut_back_with_its_counter_rows(store: EventStore, migrated_url: str, tmp_path):
    await workload(store)
    async with store.driver_connection() as raw:
        cut = await raw.fetchval("SELECT max(position) FROM events")
        await raw.execute("CREATE TABLE counters_backup AS SELECT * FROM nodepool_counters")
    later = [created(f"web-later-{i}", "web") for i in range(2)]
    await store.reserve_launch(later, occurred_at=T0 + timedelta(hours=5), producer="scheduler")
    kept = tmp_path / "anchor.json"
    before = await audit_database(migrated_url, settled=True)
    kept.write_text(json.dumps(before.anchor()))
    # cut back to the earlier state, counters included: the chain alone cannot tell
    await as_maintenance(
        store,
        f"DELETE FROM events WHERE position > {cut}",
        "DELETE FROM nodepool_counters",
        "INSERT INTO nodepool_counters SELECT * FROM counters_backup",
    )
    assert await found(migrated_url) == set()
    anchored = read_heads(json.loads(kept.read_text()))
    cut_back = {(None, "log", "anchor"), (None, "nodepool-web", "anchor"), (None, "nodeclaim-*", "anchor")}
    assert await found(migrated_url, anchored=anchored) == cut_back
    path = tmp_path / "log.jsonl"
    await export(migrated_url, path)
    assert {(p.position, p.stream, p.kind) for p in audit_file(path, anchored=anchored).chain} == cut_back
    again = await audit_database(migrated_url)
    assert again.digest != before.digest


def test_an_edited_anchor_is_refused():
    with pytest.raises(ValueError, match="does not match its content"):
        read_heads({"position": 9, "digest": "00", "pools": {"web": {"events": 3, "head": "ab"}}})
    with pytest.raises(ValueError, match=r"pools\.web must be"):
        read_heads({"position": 9, "digest": "00", "pools": {"web": {"events": -1, "head": "ab"}}})


async def test_numbers_postgresql_prints_otherwise_still_verify(store: EventStore, migrated_url: str, tmp_path):
    """A payload reads back from jsonb as it went in, except -0.0 (read back 0.0) and a float of
    1e16 or more (read back in full, an integer): the writer's digest is of what reads back."""
    await store.append("nodepool-web", None, [new(applied("web"), T0)])
    prices = [-0.0, 1e16, 1.5e17, 1e23, 1.5e-7, 0.1, 5e-324]
    options = [c.InstanceTypeOption(name=f"t{i}", capacity={"cpu": "2"}, price=p) for i, p in enumerate(prices)]
    claim = c.NodeClaimCreated(nodeclaim="odd", nodepool="web", instance_types=options)
    await store.append(claim.stream_id, 0, [new(claim, T0)])
    await store.append("nodeclaim-odd", 1, [new(launched("odd", "web"), T0)])
    result = await audit_database(migrated_url)
    assert result.chain == [] and result.ok
    path = tmp_path / "log.jsonl"
    await export(migrated_url, path)
    assert audit_file(path).chain == []


async def _node(store: EventStore, name: str, pool: str) -> None:
    """A node's facts as the watcher records them: the first two name its pool, the last none, so
    the audit's parts split its stream (a pool's part, and the events no part folds)."""
    for event in (
        c.NodeRegistered(node=name, provider_id=f"sim:///{name}", nodeclaim=name, nodepool=pool),
        c.NodeInitialized(node=name, nodeclaim=name, nodepool=pool),
        c.NodeDeleted(node=name, nodeclaim=name),
    ):
        await store.append(event.stream_id, None, [new(event, T0)])


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_stream_split_between_the_audits_parts_is_linked_across_them(
    store: EventStore, migrated_url: str, workers: int
):
    await workload(store)
    for i in range(3):
        await _node(store, f"web-{i}", "web")
        await _node(store, f"batch-{i}", "batch")
    assert await found(migrated_url, workers=workers) == set()
    middle = await position_of(store, "node-batch-1", 2)
    await as_maintenance(store, f"DELETE FROM events WHERE position = {middle}")
    deleted = await position_of(store, "node-batch-1", 3)
    assert await found(migrated_url, workers=workers) == {(deleted, "node-batch-1", "deleted")}
    rewritten = await position_of(store, "node-web-2", 3)
    await as_maintenance(
        store, f"""UPDATE events SET data = jsonb_set(data, '{{nodeclaim}}', '"other"') WHERE position = {rewritten}"""
    )
    assert await found(migrated_url, workers=workers) == {
        (deleted, "node-batch-1", "deleted"),
        (rewritten, "node-web-2", "rewritten"),
    }


async def test_a_form_one_event_from_an_older_writer_chains_on_with_the_stores(store: EventStore, migrated_url: str):
    """An event whose digest PostgreSQL computed (form 1, migration 0006), its pool's head
    extended as such a writer did: the chain and the head run on across both forms, and this
    store, whose memory of the stream is now behind, links its next event to it."""
    await workload(store)
    stream, version = "nodeclaim-web-2", await store.stream_version("nodeclaim-web-2") + 1
    async with store.driver_connection() as raw:
        await raw.execute(
            """
            WITH e AS (
                INSERT INTO events (event_id, stream_id, version, type, data, occurred_at, hash)
                SELECT n.id, $1, $2, 'NodeClaimDeletionRequested', n.data, n.at,
                       sha256(p.hash || nodewright_event_digest(n.id, $1, $2, 'NodeClaimDeletionRequested',
                                                                1::smallint, n.data, '{}'::jsonb, n.at))
                FROM (SELECT gen_random_uuid() AS id, now() AS at,
                             '{"nodeclaim": "web-2", "nodepool": "web", "reason": "Manual"}'::jsonb AS data) AS n,
                     (SELECT hash FROM events WHERE stream_id = $1 AND version = $2 - 1) AS p
                RETURNING hash
            )
            UPDATE nodepool_counters SET chain_head = sha256(chain_head || (SELECT hash FROM e)), version = version + 1
            WHERE nodepool = 'web'
            """,
            stream,
            version,
        )
    assert await found(migrated_url) == set()
    gone = terminated("web-2", "web")
    await store.append(stream, None, [new(gone, T0 + timedelta(hours=4))])
    assert await store.stream_version(stream) == version + 1
    assert await found(migrated_url) == set()


async def test_writers_in_two_processes_keep_one_chain(migrated_url: str):
    """Two stores (two processes' memories) append to the same pools and claims in turn: each
    links from what it read after the other moved the pool, never from a stale memory."""
    one, two = EventStore.connect(migrated_url), EventStore.connect(migrated_url)
    try:
        await one.append("nodepool-web", None, [new(applied("web", {"nodes": "50"}), T0)])
        for i in range(6):
            writer, other = (one, two) if i % 2 else (two, one)
            claim = created(f"c{i}", "web")
            await writer.reserve_launch([claim], occurred_at=T0, producer="a")
            await other.append(claim.stream_id, 1, [new(launched(f"c{i}", "web"), T0)])
            await writer.append(claim.stream_id, 2, [new(initialized(f"c{i}", "web"), T0)])
        assert (await integrity.check(one)).problems == []
        assert await found(migrated_url) == set()
    finally:
        await one.close()
        await two.close()
