"""The event store: an append-only log with per-NodePool counters kept in the same transaction.

An append is a *unit*: one or more streams, each with the version it expects, written all or
nothing. Several units share one transaction when a batcher groups them; each still succeeds or
fails on its own, because every rule is checked in memory, against the counter rows as they
stand when the events are written, before anything is written.

In order:
0. a fenced append (a leader's reservation, `shared.store.leader`) takes its fence's companion
   lock shared, then checks that its leader lock is still held, or raises `NotLeader`;
1. the counter rows of every pool the units touch are read and, in the same statement, the
   batch's event ids, stream heads and claims;
2. units whose event ids are stored already are no-ops that return the first positions
   (idempotent redelivery);
3. the counters are checked and evolved unit by unit (`shared.policy.counters`); a unit that
   breaks a rule is dropped with its error;
4. one statement locks the counter rows it writes to (`FOR UPDATE`, in name order), checks that
   each is still at the version step 1 read, and only then inserts the events and writes the
   counters. It first makes sure the transaction has its id, so that a position is never drawn
   by a transaction younger than a snapshot that could see a later one: that lets readers tell a
   position still being written from one lost to a rollback (`shared.store.gaps`). No log-wide
   lock: positions of concurrent transactions commit out of order, and only the outbox relay
   needs to wait for the gaps to settle. Within one pool, positions still follow the order of
   its row lock: the order the audit replays.

Usually that is one statement, step 4 alone: the batch is checked against the pools and claims
as this process's own last appends left them (`shared.store.memory`), and step 4's version check
proves that memory still true, or writes nothing. When memory falls short (another process moved
a pool, a claim this process has not seen, a refusal to confirm), it is two statements and no
explicit transaction (optimistic): step 1 reads without locks, and step 4, run alone, is its own
transaction, holding the pool locks only while PostgreSQL runs it. If a pool moved in between,
step 4 writes nothing and the batch is checked again. A process takes its own turns per pool
(`_Turns`), so only other processes can race it. After a few lost races, and always for a fenced
append, a replacement (whose candidates the pool names) or a pool's first event, the whole batch
runs in one transaction that locks the pools in step 1 (read again if that statement waited for a
lock while a pool moved).

The hot statements go to asyncpg directly (prepared, binary, arrays), on a pool of its own with
JSON passed as text and read back by orjson; SQLAlchemy's engine serves the rest. Those
connections use generic plans: every statement is an index probe by design, and planning the
insert afresh each time cost PostgreSQL more than running it.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from copy import copy
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import orjson
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from shared.config import async_database_url, driver_params
from shared.events.contracts import DisruptionDecided, NodeClaimCreated
from shared.events.envelope import Metadata, NewEvent, RecordedEvent, first_event_id
from shared.events.registry import REGISTRY, UnknownEventType
from shared.policy.audit import Partition
from shared.policy.counters import (
    COUNTED_EVENTS,
    ClaimState,
    PoolCounters,
    ReservationError,
    check,
    counted_pool,
    evolve,
    fold_claim,
    format_resources,
    quantity,
    raise_for,
)
from shared.store.fence import Fence, fence_holds
from shared.store.memory import ClaimCache, PoolCache, SpecCache

ANY = None
"""expected_version for an append that does not care where the stream is."""
NO_STREAM = 0
"""expected_version for an append that creates the stream."""


class StoreError(Exception):
    pass


class ConcurrencyConflict(StoreError):
    """The stream is not at the version the writer expected."""

    def __init__(self, stream_id: str, expected: int | None, actual: int) -> None:
        super().__init__(f"stream {stream_id}: expected version {expected}, but it is at {actual}")
        self.stream_id, self.expected, self.actual = stream_id, expected, actual


class InvalidEvent(StoreError):
    """An event that does not match its contract or its stream; nothing of its unit is written."""


class DuplicateMismatch(StoreError):
    """Some, not all, of a unit's event ids are stored already: not a redelivery of the same unit."""


class NotLeader(StoreError):
    """A fenced append from a session that no longer holds its leader lock; nothing is written."""

    def __init__(self, fence: Fence) -> None:
        super().__init__(
            f"advisory lock {fence.key} is no longer held by backend pid {fence.pid}"
            f" (started {fence.started.isoformat()}): this replica is not the leader"
        )
        self.fence = fence


@dataclass(frozen=True, slots=True)
class Append:
    stream_id: str
    expected_version: int | None
    events: Sequence[NewEvent]


Unit = Sequence[Append]


def unit(stream_id: str, expected_version: int | None, events: Sequence[NewEvent]) -> list[Append]:
    return [Append(stream_id, expected_version, events)]


_EVENT_COLUMNS = (
    "position, event_id, stream_id, version, type, schema_version, data, metadata, occurred_at, recorded_at"
)

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
# `_READ`, whatever the generic plan believes). Run alone (autocommit) it is the whole
# transaction: an optimistic append then takes two round trips (one when checked from memory),
# and holds its pool locks only while PostgreSQL runs it.
_WRITE = f"""
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
ins AS (
    {EVENT_ROWS_INSERT}
    CROSS JOIN xact
    ORDER BY j.ord
    RETURNING position, event_id
),
counters AS (
    UPDATE nodepool_counters AS c
    SET spec = CASE WHEN p.spec_changed THEN p.spec ELSE c.spec END, nodes = p.nodes, in_flight = p.in_flight,
        initialized = p.initialized, resources = p.resources, disrupting = p.disrupting,
        disrupting_by_reason = p.by_reason, replacing = p.replacing, version = p.version,
        last_position = (SELECT position FROM ins WHERE ins.event_id = p.last_event), updated_at = clock_timestamp()
    FROM jsonb_to_recordset($2::jsonb)
         AS p(nodepool text, spec_changed boolean, spec jsonb, nodes int, in_flight int, initialized int,
              resources jsonb, disrupting jsonb, by_reason jsonb, replacing jsonb, version bigint, last_event uuid)
    WHERE c.nodepool = p.nodepool AND (SELECT ok FROM unchanged)
)
SELECT position, event_id FROM ins
"""


_COUNTER_COLUMNS = (
    "nodepool, spec::text AS spec, nodes, in_flight, initialized, resources, disrupting, replacing, version,"
    " last_position"
)
_LOCK_POOLS = (
    f"SELECT {_COUNTER_COLUMNS} FROM nodepool_counters WHERE nodepool = ANY($1::text[]) ORDER BY nodepool FOR UPDATE"
)

_STORED = "@stored"  # the type column of `_READ` rows that report an already stored event id
# One index probe per id and per stream, whatever the plan cache believes about the table's size
# (a join or `= ANY ... GROUP BY` planned while the log was small turns into a scan of the whole log
# later): stored ids, the claims' streams past the version this process knows them at, only the
# head of the other streams.
_READ = f"""
SELECT i.id::text, e.position, '{_STORED}', NULL::jsonb
FROM unnest($1::uuid[]) AS i(id)
CROSS JOIN LATERAL (SELECT position FROM events WHERE event_id = i.id LIMIT 1) AS e
UNION ALL
SELECT s.id, e.version, e.type, e.data
FROM unnest($2::text[], $3::int[]) AS s(id, after)
CROSS JOIN LATERAL (
    SELECT version, type, data FROM events WHERE stream_id = s.id AND version > s.after ORDER BY version
) AS e
UNION ALL
SELECT s.id, h.version, NULL, NULL
FROM unnest($4::text[]) AS s(id)
CROSS JOIN LATERAL (SELECT version FROM events WHERE stream_id = s.id ORDER BY version DESC LIMIT 1) AS h
"""


_POOL = "@pool"  # the type column of `_LOCK_AND_READ` rows that carry a locked counter row
_LOCK_AND_READ = f"""
WITH locked AS MATERIALIZED (
    SELECT {_COUNTER_COLUMNS} FROM nodepool_counters WHERE nodepool = ANY($5::text[]) ORDER BY nodepool FOR UPDATE
)
SELECT l.nodepool, l.version, '{_POOL}',
       to_jsonb(l) || jsonb_build_object('seen', (SELECT version FROM nodepool_counters WHERE nodepool = l.nodepool))
FROM locked AS l
UNION ALL
{_READ}"""

# The optimistic read: the same, without locks, in one snapshot; `_WRITE` checks the versions.
_PEEK_AND_READ = f"""
SELECT l.nodepool, l.version, '{_POOL}', to_jsonb(l)
FROM (SELECT {_COUNTER_COLUMNS} FROM nodepool_counters WHERE nodepool = ANY($5::text[])) AS l
UNION ALL
{_READ}"""


@dataclass(slots=True)
class AppendPaths:
    """How this store's transactions went: checked against what the process remembered, in one
    round trip (`recalled`); after an unlocked read (`read`); or with their pools locked for the
    whole transaction (`locked`)."""

    recalled: int = 0
    read: int = 0
    locked: int = 0


class EventStore:
    def __init__(self, engine: AsyncEngine, *, pool_size: int = 10) -> None:
        self.engine = engine
        self.pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self._claims = ClaimCache()
        self._pools = PoolCache()
        self._specs = SpecCache()
        self.paths = AppendPaths()
        self._turns = _Turns()
        self._pool_opened = asyncio.Lock()

    @classmethod
    def connect(cls, url: str, *, pool_size: int = 10) -> EventStore:
        engine = create_async_engine(async_database_url(url), pool_size=pool_size, max_overflow=pool_size)
        return cls(engine, pool_size=2 * pool_size)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
        await self.engine.dispose()

    def driver_connection(self) -> AbstractAsyncContextManager[asyncpg.Connection]:
        """A connection of asyncpg's own pool, beside the engine's: the hot statements skip
        SQLAlchemy's pool and its greenlet hop (a third of a one-event append's client time).
        Once the pool is open, its own acquire context: nothing is wrapped around it per append."""
        if self._pool is not None:
            return self._pool.acquire()
        return self._first_connection()

    @asynccontextmanager
    async def _first_connection(self) -> AsyncIterator[asyncpg.Connection]:
        async with (await self._open_pool()).acquire() as raw:
            yield raw

    async def session_connection(self) -> asyncpg.Connection:
        """A connection outside every pool, for its caller to close: session state such as an
        advisory lock must neither leak to the pool's next user nor end when a pool recycles it."""
        return await asyncpg.connect(**self._connect_params())

    def _connect_params(self) -> dict[str, Any]:
        return driver_params(self.engine.url.render_as_string(hide_password=False))

    async def _open_pool(self) -> asyncpg.Pool:
        async with self._pool_opened:
            if self._pool is None:
                self._pool = await asyncpg.create_pool(
                    min_size=0,
                    max_size=self.pool_size,
                    init=_json_codecs,
                    reset=_end_transaction,
                    server_settings={"plan_cache_mode": "force_generic_plan"},
                    **self._connect_params(),
                )
        return self._pool

    # --- appending ---------------------------------------------------------------------------------

    async def append(self, stream_id: str, expected_version: int | None, events: Sequence[NewEvent]) -> list[int]:
        """Append to one stream; the positions of the events, in order."""
        return await self.append_unit(unit(stream_id, expected_version, events))

    async def append_unit(self, appends: Unit, *, fence: Fence | None = None) -> list[int]:
        """Append to several streams at once, all or nothing; with a `fence`, only while it holds."""
        (result,) = await self.append_units([appends], fence=fence)
        if isinstance(result, BaseException):
            raise result
        return result

    async def append_units(
        self, units: Sequence[Unit], *, fence: Fence | None = None
    ) -> list[list[int] | StoreError | ReservationError]:
        """One transaction for many units; each gets its positions or its own error. A `fence`
        covers the whole transaction (its units come from one leader): `NotLeader` is raised."""
        try:
            return await self._append_units(units, fence)
        except NotLeader:
            raise
        except asyncpg.UniqueViolationError:
            # A concurrent writer took a stream version or an event id between our read and write.
            return [await self._append_alone(u, fence) for u in units]
        except (asyncpg.PostgresError, StoreError, ReservationError, KeyError, TypeError, ValueError):
            if len(units) == 1:
                raise
            # something in one unit broke the shared transaction: find out which, one at a time
            return [await self._append_alone(u, fence) for u in units]

    async def _append_alone(
        self, appends: Unit, fence: Fence | None = None, attempts: int = 3
    ) -> list[int] | StoreError | ReservationError:
        """One unit in its own transaction, retried while it races with other writers."""
        for attempt in range(attempts):
            try:
                return (await self._append_units([appends], fence))[0]
            except asyncpg.UniqueViolationError as exc:
                if exc.constraint_name == "uq_events_event_id":
                    continue  # the same event was committed meanwhile: the retry returns its positions
                if all(a.expected_version is None for a in appends) and attempt + 1 < attempts:
                    continue
                stream = _stream_in(exc.detail) or next(iter(appends)).stream_id
                expected = next((a.expected_version for a in appends if a.stream_id == stream), None)
                return ConcurrencyConflict(stream, expected, await self.stream_version(stream))
            except (StoreError, ReservationError) as exc:
                return exc
            except (KeyError, TypeError, ValueError) as exc:
                return InvalidEvent(f"cannot append: {exc!r}")
        return StoreError(f"gave up after {attempts} attempts racing other writers")

    async def _append_units(
        self, units: Sequence[Unit], fence: Fence | None = None
    ) -> list[list[int] | StoreError | ReservationError]:
        names = sorted({name for u in units for a in u for e in a.events if (name := counted_pool(e.type, e.data))})
        async with self._turns.take(names), self.driver_connection() as raw:
            attempts = _OPTIMISTIC_ATTEMPTS if fence is None else 0
            if attempts:
                batch = _Batch(raw, units, names, self._claims, self._pools, self._specs)
                recalled = await batch.run_recalled()
                if recalled is not None:
                    batch.remember()
                    self.paths.recalled += 1
                    return recalled
            for _ in range(attempts):
                batch = _Batch(raw, units, names, self._claims, self._pools, self._specs)
                optimistic = await batch.run(optimistic=True)
                if optimistic is not None:
                    batch.remember()
                    self.paths.read += 1
                    return optimistic
                if not batch.raced:
                    break
            batch = _Batch(raw, units, names, self._claims, self._pools, self._specs, fence)
            async with raw.transaction():
                results = await batch.run()
            assert results is not None  # the locked run cannot find its pools moved
            batch.remember()
            self.paths.locked += 1
            return results

    # --- reservations --------------------------------------------------------------------------------

    async def reserve_launch(
        self,
        claims: Sequence[NodeClaimCreated],
        *,
        occurred_at: datetime,
        producer: str,
        correlation_id: str | None = None,
        fence: Fence | None = None,
    ) -> list[int]:
        """Create NodeClaims only if every limit of their pools still holds with them, in flight
        ones included; otherwise append nothing and raise `LimitExceeded` with the numbers.

        With a `fence` (a leader's, `shared.store.leader`), also only while that lock is still
        held, checked in the same transaction; otherwise append nothing and raise `NotLeader`.
        The fenced reservation has a transaction of its own and costs one statement more."""
        return await self.append_unit(
            [
                Append(
                    c.stream_id,
                    NO_STREAM,
                    [
                        NewEvent.of(
                            c,
                            occurred_at=occurred_at,
                            producer=producer,
                            correlation_id=correlation_id,
                            event_id=first_event_id(c.stream_id),
                        )
                    ],
                )
                for c in claims
            ],
            fence=fence,
        )

    async def reserve_disruption(
        self,
        decision: DisruptionDecided,
        replacements: Sequence[NodeClaimCreated] = (),
        *,
        occurred_at: datetime,
        producer: str,
        correlation_id: str | None = None,
    ) -> list[int]:
        """Mark candidates for disruption only if the pool's budgets (active at `occurred_at`) and
        its node hard limit allow it, creating the replacements in the same transaction;
        otherwise append nothing and raise `BudgetExceeded` / `NodeLimitExceeded`."""
        decided = NewEvent.of(
            decision,
            occurred_at=occurred_at,
            producer=producer,
            correlation_id=correlation_id,
            event_id=first_event_id(decision.stream_id),
        )
        appends = [Append(decision.stream_id, NO_STREAM, [decided])]
        for claim in replacements:
            event = NewEvent.of(
                claim,
                occurred_at=occurred_at,
                producer=producer,
                causation_id=str(decided.event_id),
                correlation_id=correlation_id,
                event_id=first_event_id(claim.stream_id),
            )
            appends.append(Append(claim.stream_id, NO_STREAM, [event]))
        return await self.append_unit(appends)

    # --- reading -----------------------------------------------------------------------------------------

    async def stream_version(self, stream_id: str) -> int:
        async with self.driver_connection() as raw:
            return await raw.fetchval("SELECT coalesce(max(version), 0) FROM events WHERE stream_id = $1", stream_id)

    async def read_stream(self, stream_id: str, from_version: int = 1) -> list[RecordedEvent]:
        async with self.driver_connection() as raw:
            rows = await raw.fetch(
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE stream_id = $1 AND version >= $2 ORDER BY version",
                stream_id,
                from_version,
            )
        return [_recorded(r) for r in rows]

    async def read_all(self, from_position: int = 0, *, batch_size: int = 5000) -> AsyncIterator[list[RecordedEvent]]:
        """Every event after `from_position`, in position order, `batch_size` at a time."""
        async for rows in self._pages(_EVENT_COLUMNS, from_position, batch_size):
            yield [_recorded(r) for r in rows]

    async def log_entries(
        self,
        from_position: int = 0,
        *,
        batch_size: int = 20000,
        partition: Partition | None = None,
        until: datetime | None = None,
        timed: Iterable[str] | None = None,
        snapshot: str | None = None,
    ) -> AsyncIterator[Sequence[Sequence[Any]]]:
        """The log as a replay reads it: rows of (position, stream_id, type, data, occurred_at), the
        JSON parsed by orjson as the rows are decoded. With `partition`, only its events; with
        `until`, only events that occurred by then; with `timed`, occurred_at only for those types
        (None elsewhere: decoding a timestamp costs a replay as much as parsing the payload)."""
        where, arguments = "TRUE", []
        if partition is not None:
            where = "(nodepool = ANY($3::text[]) OR ($4 AND CASE WHEN nodepool IS NULL THEN type = ANY($5::text[])"
            where += " ELSE nodepool <> ALL($6::text[]) END))"
            arguments = [list(partition.pools), partition.rest, sorted(COUNTED_EVENTS), list(partition.assigned)]
        if until is not None:
            arguments.append(until)
            where += f" AND occurred_at <= ${len(arguments) + 2}"
        at = "occurred_at"
        if timed is not None:
            arguments.append(sorted(timed))
            at = f"CASE WHEN type = ANY(${len(arguments) + 2}::text[]) THEN occurred_at END"
        async for rows in self._pages(
            f"position, stream_id, type, data, {at}", from_position, batch_size, where, arguments, snapshot
        ):
            yield rows

    async def read_types(
        self, types: Sequence[str], *, batch_size: int = 10000
    ) -> AsyncIterator[list[tuple[str, dict[str, Any]]]]:
        """(type, data) of every event of these types, in position order: how a service rebuilds
        what it once recorded (the watcher, what it reported of the cluster)."""
        async for rows in self._pages("position, type, data", 0, batch_size, "type = ANY($3::text[])", [list(types)]):
            yield [(t, d) for _, t, d in rows]

    async def pool_sizes(self, *, snapshot: str | None = None) -> dict[str, int]:
        """Events per pool the log names, counted by PostgreSQL (a scan: the counter rows'
        versions say the same for every pool the store itself wrote to)."""
        async with self.reading(snapshot) as raw:
            rows = await raw.fetch("SELECT nodepool, count(*) FROM events WHERE nodepool IS NOT NULL GROUP BY 1")
        return {name: count for name, count in rows}

    async def uncounted(self, until: datetime | None = None, *, snapshot: str | None = None) -> tuple[int, int]:
        """How many events no partition folds (they name no pool and count nowhere), and the last
        of their positions: a split replay counts them here, in PostgreSQL."""
        async with self.reading(snapshot) as raw:
            row = await raw.fetchrow(
                "SELECT count(*), coalesce(max(position), 0) FROM events WHERE nodepool IS NULL"
                " AND type <> ALL($1::text[]) AND ($2::timestamptz IS NULL OR occurred_at <= $2)",
                sorted(COUNTED_EVENTS),
                until,
            )
        return row[0], row[1]

    async def _pages(
        self,
        columns: str,
        from_position: int,
        batch_size: int,
        where: str = "TRUE",
        arguments: Sequence[Any] = (),
        snapshot: str | None = None,
    ) -> AsyncIterator[list[Any]]:
        query = f"SELECT {columns} FROM events WHERE position > $1 AND {where} ORDER BY position LIMIT $2"
        async with self.reading(snapshot) as raw:
            statement = await raw.prepare(query)
            position = from_position
            while True:
                rows = await statement.fetch(position, batch_size, *arguments)
                if not rows:
                    return
                position = rows[-1][0]
                yield rows

    @asynccontextmanager
    async def exported_snapshot(self) -> AsyncIterator[str]:
        """The id of one consistent view of the store, held until the block ends, that other
        connections and processes read through (`reading`): an audit's counters, log and
        tallies all from the same instant, however busy the writers."""
        async with self.driver_connection() as raw, raw.transaction(isolation="repeatable_read", readonly=True):
            yield await raw.fetchval("SELECT pg_export_snapshot()")

    @asynccontextmanager
    async def reading(self, snapshot: str | None = None) -> AsyncIterator[asyncpg.Connection]:
        """A connection that sees the exported `snapshot` (or the latest data, without one)."""
        async with self.driver_connection() as raw:
            if snapshot is None:
                yield raw
                return
            if not _SNAPSHOT_ID.fullmatch(snapshot):
                raise ValueError(f"not a PostgreSQL snapshot id: {snapshot!r}")
            async with raw.transaction(isolation="repeatable_read", readonly=True):
                await raw.execute(f"SET TRANSACTION SNAPSHOT '{snapshot}'")
                yield raw

    async def head_position(self) -> int:
        async with self.driver_connection() as raw:
            return await raw.fetchval("SELECT coalesce(max(position), 0) FROM events")

    async def counters(self, nodepool: str | None = None, *, snapshot: str | None = None) -> dict[str, PoolCounters]:
        async with self.reading(snapshot) as raw:
            if nodepool is None:
                rows = await raw.fetch("SELECT * FROM nodepool_counters ORDER BY nodepool")
            else:
                rows = await raw.fetch("SELECT * FROM nodepool_counters WHERE nodepool = $1", nodepool)
        return {r["nodepool"]: _pool_from_row(r, r["spec"]) for r in rows}


_OPTIMISTIC_ATTEMPTS = 3
"""Optimistic tries of a batch before it takes its pools' locks for the whole transaction: a
retry costs two round trips, while a locked run makes writers of the same pool queue behind
its round trips. With none, nothing is optimistic: not even an append from memory."""
_SNAPSHOT_ID = re.compile(r"[0-9A-F]+-[0-9A-F]+(-[0-9]+)?")


async def _end_transaction(raw: asyncpg.Connection) -> None:
    """What a returned connection needs: these statements keep no session state (no LISTEN,
    cursors or session locks), so asyncpg's four-statement reset would be a wasted round trip."""
    if raw.is_in_transaction():
        await raw.execute("ROLLBACK")


async def _json_codecs(raw: asyncpg.Connection) -> None:
    """JSON goes in as text and comes back parsed, by orjson."""
    for kind in ("json", "jsonb"):
        await raw.set_type_codec(kind, schema="pg_catalog", encoder=str, decoder=orjson.loads, format="text")


def _recorded(r: Any) -> RecordedEvent:
    return RecordedEvent(
        position=r[0],
        event_id=r[1],
        stream_id=r[2],
        version=r[3],
        type=r[4],
        schema_version=r[5],
        data=r[6],
        metadata=Metadata.from_dict(r[7]),
        occurred_at=r[8],
        recorded_at=r[9],
    )


def _pool_from_row(r: Any, spec: dict[str, Any] | None) -> PoolCounters:
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


def _pool_copy(pool: PoolCounters) -> PoolCounters:
    twin = copy(pool)
    twin.resources = dict(pool.resources)
    twin.disrupting = dict(pool.disrupting)
    twin.replacing = {k: list(v) for k, v in pool.replacing.items()}
    return twin


def _stream_in(detail: str | None) -> str | None:
    """The stream named in a unique violation's detail: `Key (stream_id, version)=(s, 3) ...`."""
    if not detail or "=(" not in detail:
        return None
    inner = detail.split("=(", 1)[1]
    return inner.rsplit(", ", 1)[0] if ", " in inner else None


def _validate(append: Append, event: NewEvent) -> None:
    """The event must match its contract, and belong to the stream it is appended to."""
    if event.stream_id != append.stream_id:
        raise InvalidEvent(f"an event of stream {event.stream_id} cannot be appended to stream {append.stream_id}")
    if event.validated:
        return
    try:
        model = REGISTRY.decode(event.type, event.schema_version, event.data)
    except UnknownEventType as exc:
        raise InvalidEvent(str(exc)) from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(payload)'}: {e['msg']}" for e in exc.errors())
        raise InvalidEvent(f"{event.type} does not match its contract: {problems}") from None
    except (LookupError, ValueError) as exc:
        raise InvalidEvent(f"{event.type} v{event.schema_version}: {exc}") from None
    if model.stream_id != event.stream_id:
        raise InvalidEvent(f"a {event.type} for {model.stream_id} cannot be appended to stream {event.stream_id}")


def _claim_stream(name: str) -> str:
    return f"nodeclaim-{name}"


class _Batch:
    """The work of one append transaction."""

    def __init__(
        self,
        raw: asyncpg.Connection,
        units: Sequence[Unit],
        names: list[str],
        cache: ClaimCache,
        pool_cache: PoolCache,
        specs: SpecCache,
        fence: Fence | None = None,
    ) -> None:
        """`names`: the pools the units count in, sorted (the order their rows are locked in)."""
        self.raw = raw
        self.units = units
        self.names = names
        self.replacing = any(e.data.get("replacement_for") for u in units for a in u for e in a.events)
        self.fence = fence
        self.cache = cache
        self.pool_cache = pool_cache
        self.specs = specs
        self.heads: dict[str, int] = {}
        self.claims: dict[str, ClaimState] = {}
        self.pools: dict[str, PoolCounters] = {}
        self.since: dict[str, int] = {}  # per pool, the version from which its changes are this process's
        self.known: dict[str, tuple[int, ClaimState | None, int]] = {}
        self.folded: dict[str, int] = {}
        self.results: list[list[int] | StoreError | ReservationError | None] = [None] * len(units)
        self.twins: dict[int, int] = {}
        self.loaded_specs: dict[str, dict[str, Any] | None] = {}  # to write a pool's spec only when it changed
        self.loaded_versions: dict[str, int] = {}  # what `_WRITE` checks the pools are still at
        self.raced = False  # an optimistic run found a pool moved between its read and its write
        self.unvouched: list[uuid.UUID] = []  # event ids a batch from memory cannot know are new

    async def run(self, *, optimistic: bool = False) -> list[list[int] | StoreError | ReservationError] | None:
        """The batch's results. `optimistic`: read without locks and write only if no pool moved
        meanwhile, in two round trips and no explicit transaction; None when a pool moved (nothing
        was written) or when the batch needs the locked read, and the caller then runs it locked."""
        if self.fence is not None:
            await self._check_fence(self.fence)
        names = self.names
        if optimistic:
            found = await self._peek_and_read(names)
            if found is None:
                return None
        else:
            # Lock first, then look for stored ids: a redelivery that waited on the lock for its
            # first copy's commit must find that copy, not a stream that moved.
            found = await self._lock_and_read(names)
        return await self._check_and_write(found)

    async def run_recalled(self) -> list[list[int] | StoreError | ReservationError] | None:
        """The batch's results in one round trip: checked against what this process remembers
        (`shared.store.memory`) instead of a read. None, with nothing written, whenever that
        memory may be wrong or falls short; the caller then reads.

        The write proves the memory right or writes nothing: every pool must still be at the
        version remembered, so no claim of it moved either; a stream head is remembered or, for
        a stream the batch starts, 0, and a wrong one collides with a stored version (versions
        are dense). An event appended at a remembered version is new (an earlier copy would
        have moved the head); for the others (any version, a stream the batch starts) the write
        first looks their ids up, so that a redelivery writes nothing and costs no position. A
        refusal or a conflict is never answered from memory, since only a write would have
        proved it: such a batch is read."""
        if not self._recall():
            return None
        try:
            return await self._check_and_write({}, recalled=True)
        except asyncpg.UniqueViolationError:  # a stream head that moved without its pool, or an id stored meanwhile
            return None

    async def _check_and_write(
        self, found: dict[uuid.UUID, int], *, recalled: bool = False
    ) -> list[list[int] | StoreError | ReservationError] | None:
        """Check and evolve the units not stored yet against `self.pools`, `self.claims` and
        `self.heads`, and write those that pass; None (nothing written) when a pool moved, and,
        `recalled`, as soon as a unit is refused or stored already: memory cannot vouch for that."""
        pending = self._drop_redelivered(found)
        if recalled and len(pending) + len(self.twins) < len(self.units):
            return None
        written: list[tuple[int, list[_Row]]] = []
        for i in pending:
            outcome = self._apply(self.units[i], self.pools, self.claims, self.heads)
            if isinstance(outcome, list):
                written.append((i, outcome))
            elif recalled:
                return None
            else:
                self.results[i] = outcome
        if written and not await self._write(written, self.pools, unvouched=self.unvouched):
            self.raced = True
            return None
        for i, twin in self.twins.items():
            self.results[i] = self.results[twin]
        return self.results  # type: ignore[return-value]

    def _recall(self) -> bool:
        """Take the pools, claims and stream heads the batch needs from memory; False when some are
        not remembered well enough (or the batch needs what only a read gives: a fence,
        replacements, an append of no events, a stream of unknown head without `NO_STREAM`)."""
        if self.fence is not None or self.replacing or not all(self.pool_cache.has(n) for n in self.names):
            return False
        referenced: set[str] = set()
        for u in self.units:
            for a in u:
                if not a.events:
                    return False
                for e in a.events:
                    if counted_pool(e.type, e.data) is not None:
                        if "nodeclaim" in e.data:
                            referenced.add(e.data["nodeclaim"])
                        referenced.update(e.data.get("candidates") or ())
        claims: dict[str, ClaimState] = {}
        heads: dict[str, int] = {}
        for name in referenced:
            version, state, at = self.cache.get(name)
            if state is None:
                continue  # not known here: fine only for a claim this batch creates (its stream starts at 0)
            if state.nodepool not in self.names or at < self.pool_cache.since(state.nodepool):
                return False
            claims[name] = state
            heads[_claim_stream(name)] = version
        unvouched: list[uuid.UUID] = []
        for u in self.units:
            for a in u:
                if a.stream_id not in heads:
                    if a.expected_version != NO_STREAM:
                        return False
                    heads[a.stream_id] = 0
                    unvouched += [e.event_id for e in a.events]
                elif a.expected_version is None:
                    unvouched += [e.event_id for e in a.events]
        self.unvouched = unvouched
        since = {name: self.pool_cache.since(name) for name in self.names}
        self._use({name: self.pool_cache.take(name) for name in self.names}, since)
        self.claims, self.heads = claims, heads
        return True

    async def _check_fence(self, fence: Fence) -> None:
        """Before anything else: a refused fence then costs no pool lock, and a redelivery from a
        former leader is refused too rather than answered."""
        if not await fence_holds(self.raw, fence):
            raise NotLeader(fence)

    def _drop_redelivered(self, found: dict[uuid.UUID, int]) -> list[int]:
        """The units to apply: those none of whose ids is stored or repeated in this batch."""
        units = self.units
        if not found and all(len(u) == 1 and len(u[0].events) == 1 for u in units):
            ids = {u[0].events[0].event_id for u in units}  # the usual batch: one event per unit
            if len(ids) == len(units):
                return list(range(len(units)))
        pending = []
        first_with: dict[uuid.UUID, int] = {}
        for i, u in enumerate(self.units):
            unit_ids = [e.event_id for a in u for e in a.events]
            stored = [found[e] for e in unit_ids if e in found]
            twin = first_with.get(unit_ids[0]) if unit_ids else None
            if twin is not None and [e.event_id for a in self.units[twin] for e in a.events] == unit_ids:
                self.twins[i] = twin  # the same unit twice in one batch: it shares the first copy's result
                continue
            if any(e in first_with for e in unit_ids):
                self.results[i] = DuplicateMismatch("this append repeats some events of another in the same batch")
                continue
            first_with.update(dict.fromkeys(unit_ids, i))
            if not stored:
                pending.append(i)
            elif len(stored) == len(unit_ids):
                self.results[i] = stored
            else:
                self.results[i] = DuplicateMismatch(
                    f"{len(stored)} of the {len(unit_ids)} events of this append are stored already"
                )
        return pending

    async def _lock_and_read(self, names: list[str]) -> dict[uuid.UUID, int]:
        """Lock the counter rows of every pool the batch counts in, then read what the checks need
        (`self.pools`, `self.heads`, `self.claims`): each stream's head, the state of every claim
        the events touch, and which event ids are stored already (returned, with their positions).

        Usually one round trip: the read rides on the locking statement. That statement's
        snapshot predates any wait for the lock, so it also reports each pool's version as the
        snapshot saw it; if a pool moved meanwhile (a writer committed while we waited), the read
        is repeated under the lock. A batch that replaces disrupted claims needs the pools first
        (they name the candidates), and a pool's first event creates its row: both take two
        round trips."""
        if not names:
            return self._parse(await self.raw.fetch(_READ, *self._read_arguments({})))
        rows: list[Any] = []
        if not self.replacing:
            rows = await self.raw.fetch(_LOCK_AND_READ, *self._read_arguments({}), names)
        locked = {r[0]: r[3] for r in rows if r[2] == _POOL}
        if len(locked) == len(names) and all(row["version"] == row["seen"] for row in locked.values()):
            self._pools(locked.values())
            return self._parse([r for r in rows if r[2] != _POOL])
        locked_rows = await self.raw.fetch(_LOCK_POOLS, names)
        if len(locked_rows) < len(names):
            await self.raw.execute(
                "INSERT INTO nodepool_counters (nodepool) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING", names
            )
            locked_rows = await self.raw.fetch(_LOCK_POOLS, names)
        pools = self._pools(locked_rows)
        return self._parse(await self.raw.fetch(_READ, *self._read_arguments(pools)))

    async def _peek_and_read(self, names: list[str]) -> dict[uuid.UUID, int] | None:
        """What `_lock_and_read` reads, in one snapshot and without locks; None when only the
        locked read will do: a pool without its counter row yet, or replacements (the pool names
        their candidates, so it must be read first)."""
        if self.replacing:
            return None
        rows = await self.raw.fetch(_PEEK_AND_READ, *self._read_arguments({}), names)
        counters = [r[3] for r in rows if r[2] == _POOL]
        if len(counters) < len(names):
            return None
        self._pools(counters)
        return self._parse([r for r in rows if r[2] != _POOL])

    def _pools(self, rows: Iterable[Any]) -> dict[str, PoolCounters]:
        """The counter rows read, as `self.pools`; every change to a pool after the version read
        is this batch's own (`since`, for what the process remembers)."""
        pools = {r["nodepool"]: _pool_from_row(r, self.specs.parse(r["spec"])) for r in rows}
        self._use(pools)
        return pools

    def _use(self, pools: dict[str, PoolCounters], since: dict[str, int] | None = None) -> None:
        """Check the batch against `pools`, as they stand at the versions `_WRITE` will expect."""
        self.pools = pools
        self.loaded_specs = {name: pool.spec for name, pool in pools.items()}
        self.loaded_versions = {name: pool.version for name, pool in pools.items()}
        self.since = dict(self.loaded_versions) if since is None else since

    def _read_arguments(self, pools: dict[str, PoolCounters]) -> list[Any]:
        """`_READ`'s arguments: the batch's event ids, the claims to fold (from the version this
        process knows each at), the other streams."""
        streams = {a.stream_id for u in self.units for a in u}
        claim_names: set[str] = set()
        for u in self.units:
            for a in u:
                for e in a.events:
                    if counted_pool(e.type, e.data) is None:
                        continue
                    if "nodeclaim" in e.data:
                        claim_names.add(e.data["nodeclaim"])
                    claim_names.update(e.data.get("candidates") or ())
                    decision = e.data.get("replacement_for")
                    if decision and e.data["nodepool"] in pools:
                        disrupting = pools[e.data["nodepool"]].disrupting
                        claim_names.update(n for n, (_, d) in disrupting.items() if d == decision)
        self.known = {name: self.cache.get(name) for name in claim_names}
        self.folded = {_claim_stream(n): after for n, (after, _, _) in self.known.items()}
        return [
            [e.event_id for u in self.units for a in u for e in a.events],
            list(self.folded),
            list(self.folded.values()),
            sorted(streams - self.folded.keys()),
        ]

    def _parse(self, rows: Iterable[Any]) -> dict[uuid.UUID, int]:
        """Stream heads and claims (`self.heads`, `self.claims`) from `_READ`'s rows; the stored
        event ids, with their positions."""
        found: dict[uuid.UUID, int] = {}
        heads: dict[str, int] = {stream: after for stream, after in self.folded.items() if after}
        by_stream: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for stream, number, kind, data in rows:
            if number is None:
                continue
            if kind == _STORED:
                found[uuid.UUID(stream)] = number
                continue
            heads[stream] = max(number, heads.get(stream, 0))
            if kind is not None:
                by_stream.setdefault(stream, []).append((kind, data))
        claims: dict[str, ClaimState] = {}
        for name, (_, state, _) in self.known.items():
            state = fold_claim(by_stream.get(_claim_stream(name), ()), name, state)
            if state is not None:
                claims[name] = state
        self.heads, self.claims = heads, claims
        return found

    def remember(self) -> None:
        """After the commit: keep the pools and claims as this transaction left them."""
        for name, pool in self.pools.items():
            if pool.spec is not None and pool.spec is not self.loaded_specs.get(name):
                pool.spec = self.specs.parse(orjson.dumps(pool.spec).decode())  # the event's own dict is its caller's
            self.pool_cache.put(name, pool, self.since[name])
        for name, state in self.claims.items():
            pool = self.pools.get(state.nodepool)
            self.cache.put(name, self.heads[_claim_stream(name)], state, pool.version if pool is not None else -1)

    def _apply(
        self,
        appends: Unit,
        pools: dict[str, PoolCounters],
        claims: dict[str, ClaimState],
        heads: dict[str, int],
    ) -> list[_Row] | StoreError | ReservationError:
        """Check and evolve one unit in memory; on any failure restore what it touched. A unit of
        one event needs no snapshot: its check runs before anything changes."""
        single = len(appends) == 1 and len(appends[0].events) == 1
        saved_pools: dict[str, PoolCounters] = {}
        saved_claims: dict[str, ClaimState | None] = {}
        saved_heads: dict[str, int] = {}
        if not single:
            for name in {counted_pool(e.type, e.data) for a in appends for e in a.events} - {None}:
                saved_pools[name] = _pool_copy(pools[name])  # type: ignore[index]
            saved_claims = {n: claims[n].copy() if n in claims else None for n in _claims_touched(appends)}
            saved_heads = {a.stream_id: heads.get(a.stream_id, 0) for a in appends}
        out: list[_Row] = []
        try:
            for a in appends:
                for event in a.events:
                    _validate(a, event)
            for a in appends:
                head = heads.get(a.stream_id, 0)
                if a.expected_version is not None and a.expected_version != head:
                    raise ConcurrencyConflict(a.stream_id, a.expected_version, head)
                for event in a.events:
                    head += 1
                    out.append(self._check_and_evolve(event, head, pools, claims))
                heads[a.stream_id] = head
        except (StoreError, ReservationError) as exc:
            pools.update(saved_pools)
            for n, state in saved_claims.items():
                if state is None:
                    claims.pop(n, None)
                else:
                    claims[n] = state
            heads.update(saved_heads)
            return exc
        return out

    def _check_and_evolve(
        self, event: NewEvent, version: int, pools: dict[str, PoolCounters], claims: dict[str, ClaimState]
    ) -> _Row:
        name = counted_pool(event.type, event.data)
        data = event.data
        if name is not None:
            pool = pools[name]
            outcome = check(pool, claims, event.type, data, event.occurred_at)
            raise_for(outcome, name)
            if outcome.record:
                data = {**data, **outcome.record}
            evolve(pool, claims, event.type, data, 0)
        return _Row(event, version, data, name)

    async def _write(
        self,
        written: list[tuple[int, list[_Row]]],
        pools: dict[str, PoolCounters],
        *,
        unvouched: Sequence[uuid.UUID] = (),
    ) -> bool:
        """Insert the events and write the counters; False (nothing written) when a pool they count
        in is no longer at the version the checks read, or, for a batch whose event ids were not
        read, when one of the `unvouched` is stored already."""
        rows_out = [r for _, rs in written for r in rs]
        if not rows_out:  # units of streams with no events (a version check): nothing to write
            for i, _ in written:
                self.results[i] = []
            return True
        last_event: dict[str, uuid.UUID] = {r.pool: r.event.event_id for r in rows_out if r.pool is not None}
        names = sorted(last_event)
        dumps = orjson.dumps
        counters = [
            {
                "nodepool": p.nodepool,
                "spec_changed": p.spec is not self.loaded_specs.get(p.nodepool),
                "spec": p.spec if p.spec is not self.loaded_specs.get(p.nodepool) else None,
                "nodes": p.nodes,
                "in_flight": p.in_flight,
                "initialized": p.initialized,
                "resources": format_resources({k: v for k, v in p.resources.items() if v}),
                "disrupting": p.disrupting,
                "by_reason": p.disrupting_by_reason(),
                "replacing": p.replacing,
                "version": p.version,
                "last_event": last_event[p.nodepool],
            }
            for p in (pools[n] for n in names)
        ]
        rows = await self.raw.fetch(
            _WRITE,
            dumps(
                [
                    {
                        "event_id": r.event.event_id,
                        "stream_id": r.event.stream_id,
                        "version": r.version,
                        "type": r.event.type,
                        "schema_version": r.event.schema_version,
                        "data": r.data,
                        "metadata": r.event.metadata.to_dict(),
                        "occurred_at": r.event.occurred_at,
                    }
                    for r in rows_out
                ],
                option=orjson.OPT_NAIVE_UTC,
            ).decode(),
            dumps(counters).decode(),
            names,
            [self.loaded_versions[n] for n in names],
            list(unvouched),
        )
        if not rows:
            return False
        positions = {r[1]: r[0] for r in rows}
        for i, rs in written:
            self.results[i] = [positions[r.event.event_id] for r in rs]
        return True


class _Turns:
    """One append at a time per NodePool within this process, taken in name order: a process's
    own writers queue here instead of racing each other's optimistic writes in PostgreSQL, where
    the loser's work is wasted. Other processes are still caught by the version check."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}

    def take(self, names: Sequence[str]) -> AbstractAsyncContextManager[Any]:
        """The turns of `names` (sorted), held while the block runs. One pool, the usual case, is
        its lock itself: no stack to build for every append."""
        if len(names) == 1:
            return self._lock(names[0])
        return self._take_all(names)

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.get(name) or self._locks.setdefault(name, asyncio.Lock())

    @asynccontextmanager
    async def _take_all(self, names: Sequence[str]) -> AsyncIterator[None]:
        async with AsyncExitStack() as taken:
            for name in names:
                await taken.enter_async_context(self._lock(name))
            yield


@dataclass(frozen=True, slots=True)
class _Row:
    """An event ready to insert: its stream version, its payload with the figures the check
    recorded, and the pool whose counters it changed."""

    event: NewEvent
    version: int
    data: dict[str, Any]
    pool: str | None


def _claims_touched(appends: Iterable[Append]) -> set[str]:
    out: set[str] = set()
    for a in appends:
        for e in a.events:
            if "nodeclaim" in e.data:
                out.add(e.data["nodeclaim"])
            out.update(e.data.get("candidates") or ())
    return out
