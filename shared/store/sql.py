"""Every statement of the event store, each with what it does and why it is shaped so.

The write (`WRITE`) is the protocol's one conditional step: it proves that the snapshot an append
was planned on still holds, or writes nothing (`shared.store`, the package docstring, says why
that is enough). The reads fetch what a snapshot needs in one round trip.
"""

from __future__ import annotations

EVENTS_CHANNEL = "nodewright_events"
"""Notified at the commit of every statement that inserts events (migration 0003); the relay
listens on it."""

EVENT_COLUMNS = "position, event_id, stream_id, version, type, schema_version, data, metadata, occurred_at, recorded_at"

FORM1_CANONICAL = (
    "CASE WHEN digest_form = 1 AND hash IS NOT NULL THEN nodewright_event_canonical(event_id, stream_id, version,"
    " type, schema_version, data, metadata, occurred_at) END"
)
"""PostgreSQL's canonical text of a form-1 event (migration 0006), the only one its digest needs
the database for; NULL for the others."""

CHAIN_COLUMNS = (
    "version, hash, digest_form,"
    " CASE WHEN digest_form = 3 THEN"
    " uuid_send(event_id) || int4send(version) || int2send(schema_version) || timestamptz_send(occurred_at) END,"
    " metadata, CASE WHEN digest_form = 2 THEN event_id::text END, schema_version,"
    " CASE WHEN digest_form = 2 AND isfinite(occurred_at) THEN (extract(epoch FROM occurred_at) * 1000000)::bigint END,"
    f" convert_to({FORM1_CANONICAL}, 'UTF8')"
)
"""What the chain's check reads of an event beside the replay's columns (`shared.policy.chain.ROW`).
A form-3 event's fixed-size fields come as one bytea, in binary (`shared.policy.digests.event_key`):
no text for PostgreSQL to print nor for the reader to parse; its payload is the one the replay
parses anyway. A form-2 digest needs the id as text and the time in microseconds; only a form-1
event (migration 0006) needs PostgreSQL to print its canonical text."""

EVENT_ROWS_INSERT = """
INSERT INTO events (event_id, stream_id, version, type, schema_version, data, metadata, occurred_at)
    SELECT u.event_id, u.stream_id, u.version, u.type, u.schema_version, u.data, u.metadata, u.occurred_at
    FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS j(event, ord)
    CROSS JOIN LATERAL jsonb_to_record(j.event)
         AS u(event_id uuid, stream_id text, version int, type text, schema_version smallint, data jsonb,
              metadata jsonb, occurred_at timestamptz)"""
"""The events of a batch, sent as one JSON array (`$1`), inserted in its order (`ORDER BY j.ord`)."""


# The write, one statement: lock the counter rows of the pools it writes to (in name order) and
# check that each is still at the version the batch was checked against; only then take the
# transaction id, insert the events and write the counters. When a pool moved, it writes nothing
# and returns no row, as it does when one of the event ids `$5` is stored already (a batch checked
# from memory has not looked: a redelivery then costs no position; one index probe per id, as in
# `READ`, whatever the generic plan believes). Run alone (autocommit) it is the whole
# transaction: an optimistic append then takes two round trips (one when checked from memory),
# and holds its pool locks only while PostgreSQL runs it.
def write_statement(chained: bool = True) -> str:
    """The write; `chained=False` is the write before the hash chain (migration 0006), the
    baseline `benchmarks/chain.py` measures the chain against."""
    insert = _CHAINED_INSERT if chained else _PLAIN_INSERT
    head = _HEAD if chained else ""
    return _WRITE.replace("{INSERT}", insert).replace("{HEAD}", head)


# Each event's hash (and, with the signing key, its signature) and each pool's new head come computed
# (`shared.store.write`: digest form 3), as hex: PostgreSQL stores them and computes nothing.
_CHAINED_INSERT = """ins AS (
    INSERT INTO events (event_id, stream_id, version, type, schema_version, data, metadata, occurred_at, hash,
                        digest_form, signature)
    SELECT u.event_id, u.stream_id, u.version, u.type, u.schema_version, u.data, u.metadata, u.occurred_at,
           decode(u.hash, 'hex'), 3, decode(u.signature, 'hex')
    FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS j(event, ord)
    CROSS JOIN LATERAL jsonb_to_record(j.event)
         AS u(event_id uuid, stream_id text, version int, type text, schema_version smallint, data jsonb,
              metadata jsonb, occurred_at timestamptz, hash text, signature text)
    CROSS JOIN xact
    ORDER BY j.ord
    RETURNING position, event_id
)"""
_PLAIN_INSERT = f"""ins AS (
    {EVENT_ROWS_INSERT}
    CROSS JOIN xact
    ORDER BY j.ord
    RETURNING position, event_id
)"""
_HEAD = """,
        chain_head = decode(p.chain_head, 'hex')"""
_WRITE = """
WITH locked AS MATERIALIZED (
    SELECT nodepool, version FROM nodepool_counters WHERE nodepool = ANY($3::text[]) ORDER BY nodepool FOR UPDATE
),
unchanged AS MATERIALIZED (
    SELECT count(*) = cardinality($3::text[]) AND NOT EXISTS (
               SELECT 1 FROM unnest($5::uuid[]) AS i(id)
               CROSS JOIN LATERAL (SELECT 1 FROM events WHERE event_id = i.id LIMIT 1) AS stored
           ) AS ok
    FROM locked JOIN unnest($3::text[], $4::bigint[]) AS e(nodepool, version) USING (nodepool, version)
),
xact AS MATERIALIZED (SELECT pg_current_xact_id() FROM unchanged WHERE ok),
{INSERT},
counters AS (
    UPDATE nodepool_counters AS c
    SET spec = CASE WHEN p.spec_changed THEN p.spec ELSE c.spec END, nodes = p.nodes, in_flight = p.in_flight,
        initialized = p.initialized, resources = p.resources, disrupting = p.disrupting,
        disrupting_by_reason = p.by_reason, replacing = p.replacing, version = p.version,
        last_position = (SELECT position FROM ins WHERE ins.event_id = p.last_event),
        updated_at = clock_timestamp(){HEAD}
    FROM jsonb_to_recordset($2::jsonb)
         AS p(nodepool text, spec_changed boolean, spec jsonb, nodes int, in_flight int, initialized int,
              resources jsonb, disrupting jsonb, by_reason jsonb, replacing jsonb, version bigint, last_event uuid,
              chain_head text)
    WHERE c.nodepool = p.nodepool AND (SELECT ok FROM unchanged)
)
SELECT position, event_id FROM ins
"""
WRITE = write_statement()
"""The write every append runs (`shared.store.write`)."""
UNCHAINED_WRITE = write_statement(chained=False)


COUNTER_COLUMNS = (
    "nodepool, spec::text AS spec, nodes, in_flight, initialized, resources, disrupting, replacing, version,"
    " last_position, encode(chain_head, 'hex') AS chain_head"
)
LOCK_POOLS = (
    f"SELECT {COUNTER_COLUMNS} FROM nodepool_counters WHERE nodepool = ANY($1::text[]) ORDER BY nodepool FOR UPDATE"
)

STORED = "@stored"  # the type column of `READ` rows that report an already stored event id
# One index probe per id and per stream, whatever the plan cache believes about the table's size
# (a join or `= ANY ... GROUP BY` planned while the log was small turns into a scan of the whole log
# later): stored ids, the claims' streams past the version this process knows them at, only the
# head of the other streams. Each event's hash comes along: the write links a stream's next event
# to its head's (`shared.store.write`).
READ = f"""
SELECT i.id::text, e.position, '{STORED}', NULL::jsonb, NULL::bytea
FROM unnest($1::uuid[]) AS i(id)
CROSS JOIN LATERAL (SELECT position FROM events WHERE event_id = i.id LIMIT 1) AS e
UNION ALL
SELECT s.id, e.version, e.type, e.data, e.hash
FROM unnest($2::text[], $3::int[]) AS s(id, after)
CROSS JOIN LATERAL (
    SELECT version, type, data, hash FROM events WHERE stream_id = s.id AND version > s.after ORDER BY version
) AS e
UNION ALL
SELECT s.id, h.version, NULL, NULL, h.hash
FROM unnest($4::text[]) AS s(id)
CROSS JOIN LATERAL (SELECT version, hash FROM events WHERE stream_id = s.id ORDER BY version DESC LIMIT 1) AS h
"""


POOL = "@pool"  # the type column of `LOCK_AND_READ` rows that carry a locked counter row
LOCK_AND_READ = f"""
WITH locked AS MATERIALIZED (
    SELECT {COUNTER_COLUMNS} FROM nodepool_counters WHERE nodepool = ANY($5::text[]) ORDER BY nodepool FOR UPDATE
)
SELECT l.nodepool, l.version, '{POOL}',
       to_jsonb(l) || jsonb_build_object('seen', (SELECT version FROM nodepool_counters WHERE nodepool = l.nodepool)),
       NULL::bytea
FROM locked AS l
UNION ALL
{READ}"""

# The optimistic read: the same, without locks, in one snapshot; `WRITE` checks the versions.
PEEK_AND_READ = f"""
SELECT l.nodepool, l.version, '{POOL}', to_jsonb(l), NULL::bytea
FROM (SELECT {COUNTER_COLUMNS} FROM nodepool_counters WHERE nodepool = ANY($5::text[])) AS l
UNION ALL
{READ}"""

CREATE_POOL_ROWS = "INSERT INTO nodepool_counters (nodepool) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING"
"""A pool's first event creates its counter row (under the locked read)."""
