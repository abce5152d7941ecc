"""The arithmetic and the check of a leader fence (`shared.store.leader` explains the protocol).

A fence names a session advisory lock, the backend that held it when it was taken, and a random
nonce key that backend locked at the same time (a pid is reused by later backends; the nonce is
not). A fenced write takes the lock's companion key shared and, in the same transaction, checks
that both locks are still granted to that backend; a new leader takes the companion key
exclusively once, so it waits for every fenced write that passed its check, and for nothing else.
Only `pg_locks` is read, which every role may: replicas may log in as different roles.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncpg

# The companion of a leader key is the key XOR this mask ("NWFENCE\0" in ASCII). The mask is
# nonzero, so the two keys always differ; its top bit is clear, so the XOR leaves the sign bit
# alone and a signed 64-bit key stays one; and it is its own inverse, so no two leader keys share
# a companion. Do not use a key and its companion as two leader keys.
COMPANION_MASK = 0x4E57_4645_4E43_4500


def companion_key(key: int) -> int:
    """The advisory key fenced appends hold shared while they run (`shared.store.leader`)."""
    return key ^ COMPANION_MASK


def advisory_lock_id(key: int) -> tuple[int, int]:
    """How `pg_locks` shows an advisory lock on a bigint key: (classid, objid), its high and low
    32 bits as unsigned numbers (objsubid is 1)."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    return unsigned >> 32, unsigned & 0xFFFF_FFFF


def new_nonce() -> int:
    """A random signed 64-bit advisory key for one leader session: no two sessions share one."""
    return secrets.randbits(64) - 2**63


@dataclass(frozen=True, slots=True)
class Fence:
    """What a fenced append proves it still holds: the session advisory lock `key`, granted to the
    backend `pid` that also holds the advisory lock `nonce` (the pid alone could be reused by a
    later backend). While it checks and until its transaction ends, it holds `companion_key(key)`
    shared."""

    key: int
    pid: int
    nonce: int

    @property
    def companion(self) -> int:
        return companion_key(self.key)


# The fence check, one statement: the transaction first takes the fence's companion key shared
# (the CTE runs before the correlated test that reads it; the lock is held until the transaction
# ends), then asks the lock manager, live, whether the leader lock and the nonce lock are still
# granted to the fence's backend. A leader
# that takes the lock over then takes the companion key exclusively (`shared.store.leader`): it
# waits for every reservation that passed its check, and any that takes the shared lock after it
# finds the leader lock held by the new leader. Advisory locks on a bigint key are stored split:
# high 32 bits in classid, low in objid, objsubid 1.
def fence_ctes(p: int = 1) -> str:
    """The check as two CTEs (`fence_shared`, then `fence_held` with one boolean column `ok`), for
    a statement that writes only while the fence holds; its parameters `$p` to `$p+5` are
    `fence_arguments(fence)`."""
    return f"""fence_shared AS MATERIALIZED (SELECT pg_advisory_xact_lock_shared(${p + 5}::bigint) AS taken),
fence_held AS MATERIALIZED (
    SELECT (
        SELECT count(*) FROM pg_locks AS l
        WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.pid = ${p + 2} AND l.granted
          AND fence_shared.taken IS NOT NULL
          AND ((l.classid = ${p}::bigint::oid AND l.objid = ${p + 1}::bigint::oid)
               OR (l.classid = ${p + 3}::bigint::oid AND l.objid = ${p + 4}::bigint::oid))
    ) = 2 AS ok
    FROM fence_shared
)"""


FENCE_CHECK = f"WITH {fence_ctes()} SELECT ok FROM fence_held"


def fence_arguments(fence: Fence) -> tuple[int, int, int, int, int, int]:
    classid, objid = advisory_lock_id(fence.key)
    nonce_classid, nonce_objid = advisory_lock_id(fence.nonce)
    return classid, objid, fence.pid, nonce_classid, nonce_objid, fence.companion


async def fence_holds(raw: asyncpg.Connection, fence: Fence) -> bool:
    """Within the caller's transaction: take the companion key shared (held until it ends) and
    say whether the fence's lock is still granted to its backend."""
    return bool(await raw.fetchval(FENCE_CHECK, *fence_arguments(fence)))
