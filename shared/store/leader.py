"""A leader lock that fences: a replica that lost it can no longer reserve.

A session advisory lock alone elects a leader but does not stop a former one: the lock ends
with its connection, silently, while the process that took it goes on planning. So the leader
passes its `Fence` (the lock's key, and the backend holding it) with each reservation, and the
store appends only if, in the same transaction, the lock is still granted to that backend
(`EventStore.reserve_launch`).

A reservation that passed its check may still be running when the lock changes hands, so a new
leader must wait for it before it reads the log and plans, and for nothing else: not for an idle
session or a migration elsewhere on the server. Each fenced reservation therefore takes a second
advisory key, the fence key's companion (`fence.companion_key`: the key XOR a fixed mask
below 2**63, so a valid signed 64-bit key always distinct from the leader key), with
`pg_advisory_xact_lock_shared`, in the statement that checks the leader lock and before it
checks, and holds it until its transaction ends. A new leader, once it holds the leader lock,
takes the companion key exclusively once, in a transaction of its own, and lets it go. That wait
is exact. Either a reservation's shared lock was granted before the new leader's exclusive one:
then the exclusive take waited until that transaction ended, committed or rolled back, and
PostgreSQL releases a transaction's locks only after its commit is visible to new snapshots, so
the new leader's first read of the log has it. Or its shared lock was granted after: then the
new leader already held the leader lock when the reservation checked it, found it granted to
another backend, and failed with `NotLeader`. Reservations unfenced, of other keys, or not
reservations at all never touch the companion key, and the exclusive take does not wait for them.
"""

from __future__ import annotations

import asyncpg

from shared.store.eventstore import EventStore, StoreError
from shared.store.fence import Fence, advisory_lock_id, companion_key, new_nonce

# The nonce lock is taken only with the leader lock, and never contended (a random key).
_ACQUIRE = (
    "SELECT taken, pg_backend_pid(), CASE WHEN taken THEN pg_advisory_lock($2) END"
    " FROM (SELECT pg_try_advisory_lock($1) AS taken) AS t"
)
# Alone, the statement is a transaction of its own: the lock is granted once every fenced
# reservation holding the companion key shared has ended, and let go at once.
_DRAIN = "SELECT pg_advisory_xact_lock($1::bigint)"
_HELD = (
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::bigint::oid"
    " AND objid = $2::bigint::oid AND objsubid = 1 AND pid = pg_backend_pid() AND granted)"
)
# How a session's end shows: a connection the server closed can fail with any of these (an
# InternalClientError when the termination notice arrives in the middle of a statement).
_LOST = (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError, OSError, TimeoutError)


class LeaderLock:
    """One session advisory lock on a connection of its own (outside the store's pools, whose
    connections are shared and recycled), held until `release` or until that connection dies.
    With it the session holds a random nonce key, so a fence names this session and not a later
    backend given the same pid; the check reads only `pg_locks`, so replicas may use any roles."""

    def __init__(self, store: EventStore, key: int) -> None:
        if not -(2**63) <= key < 2**63:
            raise ValueError(f"an advisory lock key is a signed 64-bit integer, not {key}")
        self.store = store
        self.key = key
        self.companion = companion_key(key)
        self._raw: asyncpg.Connection | None = None
        self._fence: Fence | None = None
        self._holding = False

    @property
    def fence(self) -> Fence:
        """What to pass to `reserve_launch`. The latest acquisition's, kept after the lock is lost
        or released, so that a late reservation is refused as `NotLeader` rather than unfenced."""
        if self._fence is None:
            raise StoreError(f"leader lock {self.key} was never acquired: no fence to reserve with")
        return self._fence

    async def try_acquire(self) -> bool:
        """Take the lock if it is free. True once it is this session's and every fenced
        reservation in flight when it was taken has ended, so the log read next holds all a
        former leader's reservations; that wait lasts as long as the longest such reservation,
        and no other transaction delays it (cancel it to give up: the lock is then released).
        False when another session holds the lock. A database out of reach raises, and the next
        call connects afresh."""
        if self._holding:
            if await self.held():
                return True
            await self.release()
        try:
            if self._raw is None or self._raw.is_closed():
                self._raw = await self.store.session_connection()
            nonce = new_nonce()
            taken, pid, _ = await self._raw.fetchrow(_ACQUIRE, self.key, nonce)
            if not taken:
                return False
            await self._raw.execute(_DRAIN, self.companion)
        except BaseException:
            await self.release()
            raise
        self._holding, self._fence = True, Fence(self.key, pid, nonce)
        return True

    @property
    def holding(self) -> bool:
        """Whether this replica believes it holds the lock (`held` asks PostgreSQL)."""
        return self._holding

    async def held(self) -> bool:
        """Whether the lock is still this session's, asked of PostgreSQL: a closed or broken
        connection has lost it. A reservation checks for itself; this lets a leader step down early."""
        if not self._holding or self._raw is None or self._raw.is_closed():
            return False
        try:
            if await self._raw.fetchval(_HELD, *advisory_lock_id(self.key)):
                return True
        except _LOST:
            pass
        await self.release()  # not held: never again, even should the session somehow recover
        return False

    async def release(self) -> None:
        """Unlock and close the connection (closing alone would unlock: the unlock just does not
        wait for the server to notice). Safe to call at any time, and again."""
        raw, self._raw, self._holding = self._raw, None, False
        if raw is None or raw.is_closed():
            return
        try:
            await raw.execute("SELECT pg_advisory_unlock_all()")
            await raw.close(timeout=5)
        except BaseException as exc:
            raw.terminate()
            if not isinstance(exc, _LOST):
                raise
