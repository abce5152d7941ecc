"""Reading the log back: streams, the whole log in pages, a replay's rows, the counters, and
one consistent view (an exported snapshot) that other connections and processes share."""

from __future__ import annotations

import asyncio
import re
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from typing import Any

import asyncpg

from shared.events.envelope import Metadata, RecordedEvent
from shared.policy.audit import Partition
from shared.policy.counters import COUNTED_EVENTS, PoolCounters
from shared.store import sql
from shared.store.gather import pool_from_row

_SNAPSHOT_ID = re.compile(r"[0-9A-F]+-[0-9A-F]+(-[0-9]+)?")
_SETTLED = "SELECT pg_snapshot_xmin(pg_current_snapshot()) >= $1::bigint::text::xid8"
SETTLE_TIMEOUT = 10.0
"""Seconds `settled_snapshot` waits for the transactions older than its horizon (an append
takes milliseconds)."""


class LogReader(ABC):
    """The reading half of the store (`EventStore`), over the connection it hands out."""

    @abstractmethod
    def driver_connection(self) -> AbstractAsyncContextManager[asyncpg.Connection]:
        """A connection of the store's pool, for as long as the block runs."""

    async def identity(self) -> str:
        """The store's own random id (migration 0004): what tells its messages on a stream from
        another store's."""
        async with self.driver_connection() as raw:
            return str(await raw.fetchval("SELECT id FROM store_identity"))

    async def stream_version(self, stream_id: str) -> int:
        async with self.driver_connection() as raw:
            return await raw.fetchval("SELECT coalesce(max(version), 0) FROM events WHERE stream_id = $1", stream_id)

    async def read_stream(self, stream_id: str, from_version: int = 1) -> list[RecordedEvent]:
        async with self.driver_connection() as raw:
            rows = await raw.fetch(
                f"SELECT {sql.EVENT_COLUMNS} FROM events WHERE stream_id = $1 AND version >= $2 ORDER BY version",
                stream_id,
                from_version,
            )
        return [_recorded(r) for r in rows]

    async def read_all(self, from_position: int = 0, *, batch_size: int = 5000) -> AsyncIterator[list[RecordedEvent]]:
        """Every event after `from_position`, in position order, `batch_size` at a time."""
        async for rows in self._pages(sql.EVENT_COLUMNS, from_position, batch_size):
            yield [_recorded(r) for r in rows]

    async def read_chained(
        self, *, batch_size: int = 5000, snapshot: str | None = None, until: int | None = None
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """Every event (up to position `until`) as `events export` writes it: with its hash,
        digest form and signature, the metadata as stored, and for a form-1 digest the canonical
        text it is of (a form-2 digest is rebuilt from the line), so that an exported log
        verifies without a database."""
        columns = f"{sql.EVENT_COLUMNS}, encode(hash, 'hex'), digest_form, {sql.FORM1_CANONICAL}"
        columns += ", encode(signature, 'hex')"
        where, arguments = ("position <= $3", [until]) if until is not None else ("TRUE", [])
        async for rows in self._pages(columns, 0, batch_size, where, arguments, snapshot):
            out = []
            for r in rows:
                line = _recorded(r).to_json_dict()
                line["metadata"] = r[7]
                if r[10] is not None:
                    line["hash"], line["digest_form"] = r[10], r[11]
                    if r[12] is not None:
                        line["canonical"] = r[12]
                if r[13] is not None:
                    line["signature"] = r[13]
                out.append(line)
            yield out

    async def log_entries(
        self,
        from_position: int = 0,
        *,
        batch_size: int = 20000,
        partition: Partition | None = None,
        until: datetime | None = None,
        timed: Iterable[str] | None = None,
        snapshot: str | None = None,
        chain: bool = False,
        signed: bool = False,
    ) -> AsyncIterator[Sequence[Sequence[Any]]]:
        """The log as a replay reads it: rows of (position, stream_id, type, data, occurred_at), the
        JSON parsed by orjson as the rows are decoded. With `partition`, only its events; with
        `until`, only events that occurred by then; with `timed`, occurred_at only for those types
        (None elsewhere: decoding a timestamp costs a replay as much as parsing the payload); with
        `chain`, followed by what the hash chain's check reads (`shared.policy.chain.ROW`; its
        signature too if `signed`)."""
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
        columns = f"position, stream_id, type, data, {at}" + (f", {sql.CHAIN_COLUMNS}" if chain else "")
        columns += ", signature" if chain and signed else ""
        async for rows in self._pages(columns, from_position, batch_size, where, arguments, snapshot):
            yield rows

    async def unfolded(
        self, *, snapshot: str | None = None, batch_size: int = 20000, signed: bool = False
    ) -> AsyncIterator[list[Any]]:
        """The events no part of a split replay folds (`uncounted`), as the hash chain's check
        reads them (`shared.policy.chain.ROW`; its signature too if `signed`)."""
        async for rows in self._pages(
            f"position, stream_id, type, data, NULL::timestamptz, {sql.CHAIN_COLUMNS}"
            + (", signature" if signed else ""),
            0,
            batch_size,
            "nodepool IS NULL AND type <> ALL($3::text[])",
            [sorted(COUNTED_EVENTS)],
            snapshot,
        ):
            yield rows

    async def read_types(
        self, types: Sequence[str], *, batch_size: int = 10000
    ) -> AsyncIterator[list[tuple[str, dict[str, Any]]]]:
        """(type, data) of every event of these types, in position order: how a service rebuilds
        what it once recorded (the watcher, what it reported of the cluster)."""
        async for rows in self._pages("position, type, data", 0, batch_size, "type = ANY($3::text[])", [list(types)]):
            yield [(t, d) for _, t, d in rows]

    async def read_recorded(
        self, types: Sequence[str], *, batch_size: int = 10000
    ) -> AsyncIterator[list[RecordedEvent]]:
        """Every event of these types, recorded, in position order: for a reader that decodes
        them into their contracts (the watcher, what it once reported of the cluster)."""
        async for rows in self._pages(sql.EVENT_COLUMNS, 0, batch_size, "type = ANY($3::text[])", [list(types)]):
            yield [_recorded(r) for r in rows]

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
    async def settled_snapshot(self, timeout: float = SETTLE_TIMEOUT) -> AsyncIterator[tuple[str, int]]:
        """An exported snapshot (`exported_snapshot`) and a position below which it holds every
        event that will ever commit: what an anchor or an export may vouch for. Positions commit
        out of order (`shared.store.gaps`), so the log's last position is read first, then a
        fresh transaction id drawn; once every transaction older than it has ended, each event
        at or below that position has committed or never will, and the snapshot, taken after,
        sees all of them. TimeoutError when a transaction stays open `timeout` seconds."""
        async with self.driver_connection() as raw:
            position = await raw.fetchval("SELECT coalesce(max(position), 0) FROM events")
            horizon = int(await raw.fetchval("SELECT pg_current_xact_id()::text::bigint"))
            running = asyncio.get_running_loop()
            deadline = running.time() + timeout
            while not await raw.fetchval(_SETTLED, horizon):
                if running.time() > deadline:
                    raise TimeoutError(
                        f"a transaction begun before position {position} was read is still open after {timeout:.0f} s:"
                        " it may yet commit events below it (a session idle in a transaction? see pg_stat_activity);"
                        " try again"
                    )
                await asyncio.sleep(0.02)
        async with self.exported_snapshot() as snapshot:
            yield snapshot, position

    async def first_signed(self, snapshot: str | None = None) -> int | None:
        """The position of the log's first signed event (None: none is): where signing began.
        An index scan in position order up to it."""
        async with self.reading(snapshot) as raw:
            return await raw.fetchval(
                "SELECT position FROM events WHERE signature IS NOT NULL ORDER BY position LIMIT 1"
            )

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

    async def read_position(self, position: int) -> RecordedEvent | None:
        """The event at `position`, if the log holds one (a consumer checks a message by it)."""
        async with self.driver_connection() as raw:
            row = await raw.fetchrow(f"SELECT {sql.EVENT_COLUMNS} FROM events WHERE position = $1", position)
        return _recorded(row) if row is not None else None

    async def head_position(self) -> int:
        async with self.driver_connection() as raw:
            return await raw.fetchval("SELECT coalesce(max(position), 0) FROM events")

    async def counters(self, nodepool: str | None = None, *, snapshot: str | None = None) -> dict[str, PoolCounters]:
        async with self.reading(snapshot) as raw:
            if nodepool is None:
                rows = await raw.fetch("SELECT * FROM nodepool_counters ORDER BY nodepool")
            else:
                rows = await raw.fetch("SELECT * FROM nodepool_counters WHERE nodepool = $1", nodepool)
        return {r["nodepool"]: pool_from_row(r, r["spec"]) for r in rows}


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
