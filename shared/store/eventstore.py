"""The event store: an append-only log with per-NodePool counters kept in the same transaction.

An append is a *unit*: one or more streams, each with the version it expects, written all or
nothing. Several units share one transaction when a batcher groups them; each still succeeds or
fails on its own, because every rule is checked in memory, against locked counter rows, before
anything is written.

One transaction, in order:
1. events whose ids are already stored make their unit a no-op that returns the first positions
   (idempotent redelivery);
2. the counter rows of every pool the units touch are locked (`FOR UPDATE`, in name order);
3. stream heads and the claims the events touch are read, and the counters checked and evolved
   unit by unit (`shared.policy.counters`); a unit that breaks a rule is dropped with its error;
4. one statement takes the log's append lock, inserts the events and writes the counters. The
   lock is held to commit, so positions become visible in order and the outbox relay never
   skips a late commit.

The hot statements go to asyncpg directly (prepared, binary, arrays); SQLAlchemy owns the
engine, the pool, and the JSON codecs it installs on each connection (JSONB is passed as text
and read back decoded).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from copy import copy
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import orjson
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from shared.config import async_database_url
from shared.events.contracts import DisruptionDecided, NodeClaimCreated
from shared.events.envelope import Metadata, NewEvent, RecordedEvent, first_event_id
from shared.events.registry import REGISTRY, UnknownEventType
from shared.policy.audit import LogEntry
from shared.policy.counters import (
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

ANY = None
"""expected_version for an append that does not care where the stream is."""
NO_STREAM = 0
"""expected_version for an append that creates the stream."""

APPEND_LOCK = 0x6E6F6465  # pg_advisory_xact_lock key of the log's append order


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

_INSERT = """
WITH append_lock AS MATERIALIZED (SELECT pg_advisory_xact_lock($1)),
ins AS (
    INSERT INTO events (event_id, stream_id, version, type, schema_version, data, metadata, occurred_at)
    SELECT u.event_id, u.stream_id, u.version, u.type, u.schema_version, u.data, u.metadata, u.occurred_at
    FROM unnest($2::uuid[], $3::text[], $4::int[], $5::text[], $6::smallint[], $7::jsonb[], $8::jsonb[],
                $9::timestamptz[]) WITH ORDINALITY
         AS u(event_id, stream_id, version, type, schema_version, data, metadata, occurred_at, ord)
    CROSS JOIN append_lock
    ORDER BY u.ord
    RETURNING position, event_id
),
counters AS (
    UPDATE nodepool_counters AS c
    SET spec = p.spec, nodes = p.nodes, in_flight = p.in_flight, initialized = p.initialized,
        resources = p.resources, disrupting = p.disrupting, disrupting_by_reason = p.by_reason,
        replacing = p.replacing,
        version = p.version, last_position = (SELECT position FROM ins WHERE ins.event_id = p.last_event),
        updated_at = clock_timestamp()
    FROM unnest($10::text[], $11::jsonb[], $12::int[], $13::int[], $14::int[], $15::jsonb[], $16::jsonb[],
                $17::jsonb[], $18::bigint[], $19::uuid[], $20::jsonb[])
         AS p(nodepool, spec, nodes, in_flight, initialized, resources, disrupting, by_reason, version, last_event,
              replacing)
    WHERE c.nodepool = p.nodepool
)
SELECT position, event_id FROM ins
"""


class EventStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @classmethod
    def connect(cls, url: str, *, pool_size: int = 10) -> EventStore:
        return cls(create_async_engine(async_database_url(url), pool_size=pool_size, max_overflow=pool_size))

    async def close(self) -> None:
        await self.engine.dispose()

    # --- appending ---------------------------------------------------------------------------------

    async def append(self, stream_id: str, expected_version: int | None, events: Sequence[NewEvent]) -> list[int]:
        """Append to one stream; the positions of the events, in order."""
        return await self.append_unit(unit(stream_id, expected_version, events))

    async def append_unit(self, appends: Unit) -> list[int]:
        """Append to several streams at once, all or nothing."""
        (result,) = await self.append_units([appends])
        if isinstance(result, BaseException):
            raise result
        return result

    async def append_units(self, units: Sequence[Unit]) -> list[list[int] | StoreError | ReservationError]:
        """One transaction for many units; each gets its positions or its own error."""
        try:
            return await self._append_units(units)
        except asyncpg.UniqueViolationError:
            # A concurrent writer took a stream version or an event id between our read and write.
            return [await self._append_alone(u) for u in units]
        except (asyncpg.PostgresError, StoreError, ReservationError, KeyError, TypeError, ValueError):
            if len(units) == 1:
                raise
            # something in one unit broke the shared transaction: find out which, one at a time
            return [await self._append_alone(u) for u in units]

    async def _append_alone(self, appends: Unit, attempts: int = 3) -> list[int] | StoreError | ReservationError:
        """One unit in its own transaction, retried while it races with other writers."""
        for attempt in range(attempts):
            try:
                return (await self._append_units([appends]))[0]
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

    async def _append_units(self, units: Sequence[Unit]) -> list[list[int] | StoreError | ReservationError]:
        async with self.engine.connect() as conn:
            raw = await _driver(conn)
            async with raw.transaction():
                return await _Batch(raw, units).run()

    # --- reservations --------------------------------------------------------------------------------

    async def reserve_launch(
        self,
        claims: Sequence[NodeClaimCreated],
        *,
        occurred_at: datetime,
        producer: str,
        correlation_id: str | None = None,
    ) -> list[int]:
        """Create NodeClaims only if every limit of their pools still holds with them, in flight
        ones included; otherwise append nothing and raise `LimitExceeded` with the numbers."""
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
            ]
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
        async with self.engine.connect() as conn:
            raw = await _driver(conn)
            return await raw.fetchval("SELECT coalesce(max(version), 0) FROM events WHERE stream_id = $1", stream_id)

    async def read_stream(self, stream_id: str, from_version: int = 1) -> list[RecordedEvent]:
        async with self.engine.connect() as conn:
            raw = await _driver(conn)
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

    async def log_entries(self, from_position: int = 0, *, batch_size: int = 20000) -> AsyncIterator[list[LogEntry]]:
        """The log as a replay reads it: fewer columns, no envelope objects, JSON parsed by orjson
        (three times the standard library's speed on these payloads)."""
        loads = orjson.loads
        columns = "position, stream_id, type, data::text, occurred_at"
        async for rows in self._pages(columns, from_position, batch_size):
            yield [LogEntry(p, s, t, loads(d), at) for p, s, t, d, at in rows]

    async def _pages(self, columns: str, from_position: int, batch_size: int) -> AsyncIterator[list[Any]]:
        query = f"SELECT {columns} FROM events WHERE position > $1 ORDER BY position LIMIT $2"
        async with self.engine.connect() as conn:
            raw = await _driver(conn)
            statement = await raw.prepare(query)
            position = from_position
            while True:
                rows = await statement.fetch(position, batch_size)
                if not rows:
                    return
                position = rows[-1][0]
                yield rows

    async def head_position(self) -> int:
        async with self.engine.connect() as conn:
            raw = await _driver(conn)
            return await raw.fetchval("SELECT coalesce(max(position), 0) FROM events")

    async def counters(self, nodepool: str | None = None) -> dict[str, PoolCounters]:
        async with self.engine.connect() as conn:
            raw = await _driver(conn)
            if nodepool is None:
                rows = await raw.fetch("SELECT * FROM nodepool_counters ORDER BY nodepool")
            else:
                rows = await raw.fetch("SELECT * FROM nodepool_counters WHERE nodepool = $1", nodepool)
        return {r["nodepool"]: _pool_from_row(r) for r in rows}


async def _driver(conn: AsyncConnection) -> asyncpg.Connection:
    raw = await conn.get_raw_connection()
    return raw.driver_connection  # type: ignore[return-value]


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


def _pool_from_row(r: Any) -> PoolCounters:
    return PoolCounters(
        nodepool=r["nodepool"],
        spec=r["spec"],
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

    def __init__(self, raw: asyncpg.Connection, units: Sequence[Unit]) -> None:
        self.raw = raw
        self.units = units
        self.results: list[list[int] | StoreError | ReservationError | None] = [None] * len(units)
        self.twins: dict[int, int] = {}

    async def run(self) -> list[list[int] | StoreError | ReservationError]:
        # Lock first, then look for stored ids: a redelivery that waited on the lock for its first
        # copy's commit must find that copy, not a stream that moved.
        pools = await self._lock_pools(list(range(len(self.units))))
        pending = await self._drop_redelivered()
        if not pending:
            for i, twin in self.twins.items():
                self.results[i] = self.results[twin]
            return self.results  # type: ignore[return-value]
        heads, claims = await self._read_streams(pending, pools)
        written: list[tuple[int, list[_Row]]] = []
        for i in pending:
            outcome = self._apply(self.units[i], pools, claims, heads)
            if isinstance(outcome, list):
                written.append((i, outcome))
            else:
                self.results[i] = outcome
        if written:
            await self._write(written, pools)
        for i, twin in self.twins.items():
            self.results[i] = self.results[twin]
        return self.results  # type: ignore[return-value]

    async def _drop_redelivered(self) -> list[int]:
        ids = [e.event_id for u in self.units for a in u for e in a.events]
        found = dict(
            await self.raw.fetch(
                "SELECT e.event_id, e.position FROM unnest($1::uuid[]) AS i(id) JOIN events e ON e.event_id = i.id", ids
            )
        )
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

    async def _lock_pools(self, pending: list[int]) -> dict[str, PoolCounters]:
        names = sorted(
            {
                name
                for i in pending
                for a in self.units[i]
                for e in a.events
                if (name := counted_pool(e.type, e.data)) is not None
            }
        )
        if not names:
            return {}
        await self.raw.execute(
            "INSERT INTO nodepool_counters (nodepool) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING", names
        )
        rows = await self.raw.fetch(
            "SELECT * FROM nodepool_counters WHERE nodepool = ANY($1::text[]) ORDER BY nodepool FOR UPDATE", names
        )
        return {r["nodepool"]: _pool_from_row(r) for r in rows}

    async def _read_streams(
        self, pending: list[int], pools: dict[str, PoolCounters]
    ) -> tuple[dict[str, int], dict[str, ClaimState]]:
        streams = sorted({a.stream_id for i in pending for a in self.units[i]})
        claim_names: set[str] = set()
        for i in pending:
            for a in self.units[i]:
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
        folded = sorted({_claim_stream(n) for n in claim_names})
        heads_only = sorted(set(streams) - set(folded))
        # One round trip, one index probe per stream (`= ANY ... GROUP BY` turns into a scan as
        # the log grows): whole streams of the claims to fold, only the head of the others.
        rows = await self.raw.fetch(
            "SELECT s.id, e.version, e.type, e.data FROM unnest($1::text[]) AS s(id)"
            " CROSS JOIN LATERAL (SELECT version, type, data FROM events WHERE stream_id = s.id ORDER BY version) AS e"
            " UNION ALL"
            " SELECT s.id, (SELECT max(version) FROM events WHERE stream_id = s.id), NULL, NULL"
            " FROM unnest($2::text[]) AS s(id)",
            folded,
            heads_only,
        )
        heads: dict[str, int] = {}
        by_stream: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for stream, version, kind, data in rows:
            if version is None:
                continue
            heads[stream] = max(version, heads.get(stream, 0))
            if kind is not None:
                by_stream.setdefault(stream, []).append((kind, data))
        claims: dict[str, ClaimState] = {}
        for name in claim_names:
            state = fold_claim(by_stream.get(_claim_stream(name), ()))
            if state is not None:
                claims[name] = state
        return heads, claims

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
            saved_claims = {n: copy(claims[n]) if n in claims else None for n in _claims_touched(appends)}
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

    async def _write(self, written: list[tuple[int, list[_Row]]], pools: dict[str, PoolCounters]) -> None:
        rows_out = [r for _, rs in written for r in rs]
        events = [r.event for r in rows_out]
        last_event: dict[str, uuid.UUID] = {r.pool: r.event.event_id for r in rows_out if r.pool is not None}
        changed = [pools[n] for n in sorted(last_event)]
        dumps = json.dumps
        rows = await self.raw.fetch(
            _INSERT,
            APPEND_LOCK,
            [e.event_id for e in events],
            [e.stream_id for e in events],
            [r.version for r in rows_out],
            [e.type for e in events],
            [e.schema_version for e in events],
            [dumps(r.data, separators=(",", ":")) for r in rows_out],
            [dumps(e.metadata.to_dict(), separators=(",", ":")) for e in events],
            [e.occurred_at for e in events],
            [p.nodepool for p in changed],
            [None if p.spec is None else dumps(p.spec) for p in changed],
            [p.nodes for p in changed],
            [p.in_flight for p in changed],
            [p.initialized for p in changed],
            [dumps(format_resources({k: v for k, v in p.resources.items() if v})) for p in changed],
            [dumps(p.disrupting) for p in changed],
            [dumps(p.disrupting_by_reason()) for p in changed],
            [p.version for p in changed],
            [last_event[p.nodepool] for p in changed],
            [dumps(p.replacing) for p in changed],
        )
        positions = {r[1]: r[0] for r in rows}
        for i, rs in written:
            self.results[i] = [positions[r.event.event_id] for r in rs]


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
