"""The pure middle of an append: given the units and a snapshot, what to write, or why not.

`plan` checks each unit against the snapshot as the units before it in the batch left it, with
the same rules the audit replays (`shared.policy.counters`), and returns a `WritePlan`: the rows
to insert, the counter rows to write, each unit's outcome (written, stored already, refused with
its numbers). A snapshot taken from memory cannot vouch for a refusal or a stored id (only a
write proves memory right), so then it returns `TooOld` and the batch is read instead. No I/O,
no clock: the snapshot is not changed (states are copied when first touched).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from shared.events.contracts import NodeClaimEvent
from shared.events.envelope import NewEvent
from shared.events.registry import REGISTRY, UnknownEventType
from shared.policy.counters import ClaimState, PoolCounters, ReservationError, check, counted_pool, evolve, raise_for
from shared.policy.touches import touches
from shared.store.errors import ConcurrencyConflict, DuplicateMismatch, InvalidEvent, StoreError
from shared.store.snapshot import Snapshot, Source
from shared.store.units import Append, Unit

Refusal = StoreError | ReservationError
Result = list[int] | Refusal


@dataclass(frozen=True, slots=True)
class Row:
    """An event ready to insert: its stream version, its payload with the figures the check
    recorded, and the pool whose counters it changed."""

    event: NewEvent
    version: int
    data: dict[str, Any]
    pool: str | None


@dataclass(frozen=True, slots=True)
class WritePlan:
    rows: tuple[Row, ...]
    written: tuple[tuple[int, int, int], ...]
    """(unit, first row, end row) of every unit whose events are written."""
    settled: tuple[Result | None, ...]
    """Each unit's outcome that needs no write (stored already, refused); None for the others."""
    twins: Mapping[int, int]
    """A unit repeated in the batch shares its first copy's outcome."""
    pools: Mapping[str, PoolCounters]
    claims: Mapping[str, ClaimState]
    heads: Mapping[str, int]
    """The pools, claims and stream heads as the batch leaves them once written."""

    def outcomes(self, positions: Mapping[uuid.UUID, int]) -> list[Result]:
        """Every unit's outcome, given the positions the write drew."""
        out: list[Result | None] = list(self.settled)
        for i, first, end in self.written:
            out[i] = [positions[row.event.event_id] for row in self.rows[first:end]]
        for i, twin in self.twins.items():
            out[i] = out[twin]
        return out  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class TooOld:
    """The snapshot cannot vouch for this batch's outcome: read, then plan again."""

    reason: str


def plan(units: Sequence[Unit], snapshot: Snapshot) -> WritePlan | TooOld:
    pools = _Pools(snapshot.pools)
    claims = _Claims(snapshot.claims)
    heads = dict(snapshot.heads)
    settled: list[Result | None] = [None] * len(units)
    twins: dict[int, int] = {}
    pending = _not_stored(units, snapshot.stored, settled, twins)
    if snapshot.source is Source.MEMORY and len(pending) + len(twins) < len(units):
        return TooOld("a unit is stored already, or repeats another: only a read can say which")
    rows: list[Row] = []
    written: list[tuple[int, int, int]] = []
    for i in pending:
        outcome = _apply(units[i], pools, claims, heads)
        if isinstance(outcome, list):
            written.append((i, len(rows), len(rows) + len(outcome)))
            rows.extend(outcome)
        elif snapshot.source is Source.MEMORY:
            return TooOld(f"refused ({outcome}): only a read can confirm a refusal")
        else:
            settled[i] = outcome
    return WritePlan(tuple(rows), tuple(written), tuple(settled), twins, pools.after(), claims.after(), heads)


def _not_stored(
    units: Sequence[Unit], stored: Mapping[uuid.UUID, int], settled: list[Result | None], twins: dict[int, int]
) -> list[int]:
    """The units to check: those none of whose ids is stored or repeated in this batch."""
    if not stored and all(len(u) == 1 and len(u[0].events) == 1 for u in units):
        ids = {u[0].events[0].event_id for u in units}  # the usual batch: one event per unit
        if len(ids) == len(units):
            return list(range(len(units)))
    pending = []
    first_with: dict[uuid.UUID, int] = {}
    for i, u in enumerate(units):
        unit_ids = [e.event_id for a in u for e in a.events]
        found = [stored[e] for e in unit_ids if e in stored]
        twin = first_with.get(unit_ids[0]) if unit_ids else None
        if twin is not None and [e.event_id for a in units[twin] for e in a.events] == unit_ids:
            twins[i] = twin
            continue
        if any(e in first_with for e in unit_ids):
            settled[i] = DuplicateMismatch("this append repeats some events of another in the same batch")
            continue
        first_with.update(dict.fromkeys(unit_ids, i))
        if not found:
            pending.append(i)
        elif len(found) == len(unit_ids):
            settled[i] = found  # a redelivery: the first copy's positions
        else:
            settled[i] = DuplicateMismatch(
                f"{len(found)} of the {len(unit_ids)} events of this append are stored already"
            )
    return pending


def _apply(
    appends: Unit, pools: _Pools, claims: _Claims, heads: dict[str, int]
) -> list[Row] | StoreError | ReservationError:
    """Check and evolve one unit; on any failure restore what it touched. A unit of one event
    needs no saving: its check runs before anything changes."""
    single = len(appends) == 1 and len(appends[0].events) == 1
    saved: tuple[dict[str, PoolCounters], dict[str, ClaimState | None], dict[str, int]] | None = None
    if not single:
        touched = [touches(e.type, e.data) for a in appends for e in a.events]
        saved = (
            {t.pool: pools[t.pool].copy() for t in touched if t.pool is not None},
            {n: claims.get(n).copy() if n in claims else None for t in touched for n in t.claims},  # type: ignore[union-attr]
            {a.stream_id: heads.get(a.stream_id, 0) for a in appends},
        )
    out: list[Row] = []
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
                out.append(_check_and_evolve(event, head, pools, claims))
            heads[a.stream_id] = head
    except (StoreError, ReservationError) as exc:
        if saved is not None:
            pools.restore(saved[0])
            claims.restore(saved[1])
            heads.update(saved[2])
        return exc
    return out


def _check_and_evolve(event: NewEvent, version: int, pools: _Pools, claims: _Claims) -> Row:
    name = counted_pool(event.type, event.data)
    data = event.data
    if name is not None:
        pool = pools[name]
        outcome = check(pool, claims, event.type, data, event.occurred_at)
        raise_for(outcome, name)
        if outcome.record:
            data = {**data, **outcome.record}
        evolve(pool, claims, event.type, data, 0)
    return Row(event, version, data, name)


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


def claim_stream(name: str) -> str:
    return NodeClaimEvent.stream_of(name)


class _Pools:
    """The snapshot's pools, each copied the first time the batch touches it."""

    def __init__(self, base: Mapping[str, PoolCounters]) -> None:
        self.base = base
        self.mine: dict[str, PoolCounters] = {}

    def __getitem__(self, name: str) -> PoolCounters:
        pool = self.mine.get(name)
        if pool is None:
            pool = self.mine[name] = self.base[name].copy()
        return pool

    def restore(self, saved: Mapping[str, PoolCounters]) -> None:
        self.mine.update(saved)

    def after(self) -> dict[str, PoolCounters]:
        return {**self.base, **self.mine}


class _Claims(MutableMapping[str, ClaimState]):
    """The snapshot's claims, each copied the first time the batch reads it (the rules evolve a
    claim in place); a claim created or ended here lives only in this overlay."""

    _GONE: Any = object()

    def __init__(self, base: Mapping[str, ClaimState]) -> None:
        self.base = base
        self.mine: dict[str, Any] = {}

    def get(self, name: str, default: Any = None) -> Any:  # the rules' hot lookup, without a KeyError
        state = self.mine.get(name)
        if state is None:
            known = self.base.get(name)
            if known is None:
                return default
            state = self.mine[name] = known.copy()
        return default if state is self._GONE else state

    def __getitem__(self, name: str) -> ClaimState:
        state = self.get(name)
        if state is None:
            raise KeyError(name)
        return state

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __setitem__(self, name: str, state: ClaimState) -> None:
        self.mine[name] = state

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self.mine[name] = self._GONE

    def __iter__(self) -> Iterator[str]:
        return iter(self.after())

    def __len__(self) -> int:
        return len(self.after())

    def restore(self, saved: Mapping[str, ClaimState | None]) -> None:
        for name, state in saved.items():
            self.mine[name] = self._GONE if state is None else state

    def after(self) -> dict[str, ClaimState]:
        out = dict(self.base)
        for name, state in self.mine.items():
            if state is self._GONE:
                out.pop(name, None)
            else:
                out[name] = state
        return out
