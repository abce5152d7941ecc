"""The event store: an append-only log with per-NodePool counters kept in the same transaction.

An append is a batch of units (`shared.store.units`); each unit is written all or nothing and
gets its own outcome. `EventStore.append_units` runs the protocol `shared.store` explains: a
snapshot (`snapshot.recall`, `gather.read`), a pure plan (`plan.plan`), one conditional write
(`write.write_batch`), from memory first, then after an unlocked read, then locked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import orjson

from shared.config import driver_params
from shared.events.contracts import DisruptionDecided, NodeClaimCreated
from shared.events.envelope import NewEvent, first_event_id
from shared.policy.counters import ReservationError
from shared.policy.digests import Signer
from shared.store import fence as fences
from shared.store import write as writes
from shared.store.errors import ConcurrencyConflict, DuplicateMismatch, InvalidEvent, NotLeader, StoreError
from shared.store.fence import Fence
from shared.store.gather import read
from shared.store.memory import Memory
from shared.store.plan import Result, TooOld, WritePlan, plan
from shared.store.reads import LogReader
from shared.store.snapshot import Needs, Snapshot, needs, recall
from shared.store.sql import EVENT_ROWS_INSERT
from shared.store.units import ANY, NO_STREAM, Append, Unit, unit

__all__ = [
    "ANY",
    "EVENT_ROWS_INSERT",
    "NO_STREAM",
    "Append",
    "AppendPaths",
    "ConcurrencyConflict",
    "DuplicateMismatch",
    "EventStore",
    "InvalidEvent",
    "NotLeader",
    "StoreError",
    "Unit",
    "unit",
]

OPTIMISTIC_ATTEMPTS = 3
"""Unlocked tries of a batch before it locks its pools for the whole transaction: a retry costs
two round trips, while a locked run makes writers of the same pool queue behind its round trips."""


@dataclass(slots=True)
class AppendPaths:
    """How this store's transactions went: planned on what the process remembered, in one round
    trip (`recalled`); after an unlocked read (`read`); or with their pools locked for the whole
    transaction (`locked`)."""

    recalled: int = 0
    read: int = 0
    locked: int = 0


class EventStore(LogReader):
    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 20,
        memory: bool = True,
        optimistic: bool = True,
        signing_key: bytes | None = None,
    ) -> None:
        """`memory`: plan from what this process remembers when it can; `optimistic`: else read
        without locks first. With neither, every append locks its pools (the contract suite runs
        every combination). `signing_key` (`NODEWRIGHT_SIGNING_KEY`): every event appended is
        signed with it."""
        self.url = url
        self.signer = Signer(signing_key) if signing_key is not None else None
        self.pool_size = pool_size
        self.use_memory = memory
        self.attempts = OPTIMISTIC_ATTEMPTS if optimistic else 0
        self.paths = AppendPaths()
        self._memory = Memory()
        self._turns = _Turns()
        self._pool: asyncpg.Pool | None = None
        self._pool_opened = asyncio.Lock()

    @classmethod
    def connect(
        cls,
        url: str,
        *,
        pool_size: int = 10,
        memory: bool = True,
        optimistic: bool = True,
        signing_key: bytes | None = None,
    ) -> EventStore:
        """A store on `url` (any PostgreSQL URL form `shared.config` reads); nothing connects before
        the first use. One asyncpg pool of up to twice `pool_size` connections."""
        return cls(url, pool_size=2 * pool_size, memory=memory, optimistic=optimistic, signing_key=signing_key)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def driver_connection(self) -> AbstractAsyncContextManager[asyncpg.Connection]:
        """A connection of the store's pool; once the pool is open, asyncpg's own acquire context
        (nothing is wrapped around it per append)."""
        if self._pool is not None:
            return self._pool.acquire()
        return self._first_connection()

    @asynccontextmanager
    async def _first_connection(self) -> AsyncIterator[asyncpg.Connection]:
        async with (await self._open_pool()).acquire() as raw:
            yield raw

    async def session_connection(self) -> asyncpg.Connection:
        """A connection outside the pool, for its caller to close: session state such as an
        advisory lock must neither leak to the pool's next user nor end when the pool recycles it."""
        return await asyncpg.connect(**driver_params(self.url))

    async def _open_pool(self) -> asyncpg.Pool:
        async with self._pool_opened:
            if self._pool is None:
                self._pool = await asyncpg.create_pool(
                    min_size=0,
                    max_size=self.pool_size,
                    init=_json_codecs,
                    reset=_end_transaction,
                    server_settings={"plan_cache_mode": "force_generic_plan"},
                    **driver_params(self.url),
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

    async def append_units(self, units: Sequence[Unit], *, fence: Fence | None = None) -> list[Result]:
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

    async def _append_alone(self, appends: Unit, fence: Fence | None = None, attempts: int = 3) -> Result:
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

    async def _append_units(self, units: Sequence[Unit], fence: Fence | None) -> list[Result]:
        """The protocol, in order of cost. Any failure makes the process forget the batch's pools."""
        need = needs(units)
        async with self._turns.take(need.pools), self.driver_connection() as raw:
            try:
                return await self._append(raw, units, need, fence)
            except BaseException:
                self._memory.forget(need.pools)
                raise

    async def _append(
        self, raw: asyncpg.Connection, units: Sequence[Unit], need: Needs, fence: Fence | None
    ) -> list[Result]:
        if fence is None and self.use_memory and (snapshot := recall(units, need, self._memory)) is not None:
            done = await self._plan_and_write(raw, units, snapshot)
            if done is not None:
                self.paths.recalled += 1
                return self._kept(snapshot, *done)
            self._memory.forget(need.pools)
        for _ in range(self.attempts if fence is None else 0):
            snapshot = await read(raw, need, self._memory, locked=False)
            if snapshot is None:
                break  # only the locked read will do
            done = await self._plan_and_write(raw, units, snapshot)
            if done is not None:
                self.paths.read += 1
                return self._kept(snapshot, *done)
        async with raw.transaction():
            if fence is not None and not await fences.fence_holds(raw, fence):
                raise NotLeader(fence)
            snapshot = await read(raw, need, self._memory, locked=True)
            assert snapshot is not None
            done = await self._plan_and_write(raw, units, snapshot)
            assert done is not None, "a locked snapshot holds until the commit"
        self.paths.locked += 1
        return self._kept(snapshot, *done)

    async def _plan_and_write(
        self, raw: asyncpg.Connection, units: Sequence[Unit], snapshot: Snapshot
    ) -> tuple[WritePlan, writes.Written] | None:
        """The plan and what its write drew; None when the snapshot cannot vouch for the batch
        or no longer holds (nothing was written)."""
        planned = plan(units, snapshot)
        if isinstance(planned, TooOld):
            return None
        try:
            written = await writes.write_batch(raw, snapshot, planned, signer=self.signer)
        except asyncpg.UniqueViolationError:
            if snapshot.unvouched or (snapshot.since and snapshot.source == "memory"):
                return None  # a head memory had wrong, or an id stored meanwhile: read
            raise
        return None if written is None else (planned, written)

    def _kept(self, snapshot: Snapshot, planned: WritePlan, written: writes.Written) -> list[Result]:
        """After the commit: remember the batch's pools and claims, with the chain as the write
        left it, and hand out the outcomes."""
        self._memory.keep(
            planned.pools,
            planned.claims,
            planned.heads,
            snapshot.since,
            snapshot.pools,
            written.tips,
            written.chain_heads,
        )
        return planned.outcomes(written.positions)

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
        fence: Fence | None = None,
        parts: Sequence[DisruptionDecided] = (),
    ) -> list[int]:
        """Mark candidates for disruption only if the pool's budgets (active at `occurred_at`) and
        its node hard limit allow it, creating the replacements in the same transaction;
        otherwise append nothing and raise `BudgetExceeded` / `NodeLimitExceeded`. `parts`: the
        same command's decisions for its candidates of other pools, each checked against its own
        pool's budgets in the same transaction. With a `fence`, only while that leader lock holds."""
        appends = []
        for part in (decision, *parts):
            event = NewEvent.of(
                part,
                occurred_at=occurred_at,
                producer=producer,
                correlation_id=correlation_id,
                event_id=first_event_id(part.stream_id),
            )
            appends.append(Append(part.stream_id, NO_STREAM, [event]))
        decided = appends[0].events[0]
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
        return await self.append_unit(appends, fence=fence)


async def _end_transaction(raw: asyncpg.Connection) -> None:
    """What a returned connection needs: these statements keep no session state (no LISTEN,
    cursors or session locks), so asyncpg's four-statement reset would be a wasted round trip."""
    if raw.is_in_transaction():
        await raw.execute("ROLLBACK")


async def _json_codecs(raw: asyncpg.Connection) -> None:
    """JSON goes in as text and comes back parsed, by orjson."""
    for kind in ("json", "jsonb"):
        await raw.set_type_codec(kind, schema="pg_catalog", encoder=str, decoder=orjson.loads, format="text")


def _stream_in(detail: str | None) -> str | None:
    """The stream named in a unique violation's detail: `Key (stream_id, version)=(s, 3) ...`."""
    if not detail or "=(" not in detail:
        return None
    inner = detail.split("=(", 1)[1]
    return inner.rsplit(", ", 1)[0] if ", " in inner else None


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
