"""What one process remembers between its appends, so that most appends need no read.

A pool's counters change only through events that pool counts, and so does a claim's state
(every claim event names the claim's pool, and a check refuses any other pool). Pool versions
order those changes. So if this process knows a pool at version v, and every event the pool
counted after version s (s <= v) was appended by this process, then a claim this process last
saw while the pool was at version s or later is still as it saw it, as long as the pool is still
at v. The write statement checks exactly that: it writes only if every pool it counts in is
still at the version the batch was checked against (`eventstore._WRITE`).

A pool is remembered with its `since` (that s): the version a read found it at, kept for as long
as this process's own appends follow each other. A claim is remembered with `at`: the version its
pool had when this process last saw it. A batch that fails (anything raised between its snapshot
and its commit) makes the process forget its pools: the next append to them reads.

The hash chain rests on the same proof: a pool's `chain_head` changes only with its version, and
a stored event never changes, so the hash of a claim's head event (its `tip`) is right for as
long as the stream is at that version; a write at the next version fails if it is not.

All of this rests on versions never repeating: restore a database from a backup only with every
writer stopped (a process would otherwise trust what it remembers of versions the restore undid).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from shared.events.contracts import NodeClaimEvent
from shared.policy.counters import ClaimState, PoolCounters


class ClaimCache:
    """Claim states as of a stream version, and the pool version they were seen at. A stream
    never changes below its head, so a read fetches only the events after the version known
    here (usually none: this process wrote them). A state handed out is never changed by its
    taker (a plan copies what it evolves, a read folds a copy), so a batch that does not commit
    leaves the cache as it was. `put` takes the state over: its batch has committed."""

    def __init__(self, size: int = 200_000) -> None:
        self.size = size
        self._states: dict[str, tuple[int, ClaimState, int, bytes | None]] = {}

    def get(self, name: str) -> tuple[int, ClaimState | None, int, bytes | None]:
        """(stream version, state, pool version it was seen at, the hash of the event at that stream
        version); (0, None, -1, None) for a claim not known."""
        return self._states.get(name) or (0, None, -1, None)

    def put(self, name: str, version: int, state: ClaimState, at: int, tip: bytes | None) -> None:
        if len(self._states) >= self.size and name not in self._states:
            self._states.clear()  # simple and bounded: the next transactions read the streams whole
        self._states[name] = (version, state, at, tip)


class PoolCache:
    """Each pool's counters as this process's last append to it left them, with the version from
    which every change to the pool was this process's own (`since`). An entry is never changed:
    a batch plans on copies, and a committed one puts its own in."""

    def __init__(self) -> None:
        self._pools: dict[str, tuple[PoolCounters, int, bytes | None]] = {}

    def has(self, name: str) -> bool:
        return name in self._pools

    def since(self, name: str) -> int:
        return self._pools[name][1]

    def get(self, name: str) -> PoolCounters:
        return self._pools[name][0]

    def chain_head(self, name: str) -> bytes | None:
        """The pool's `chain_head` at its remembered version."""
        return self._pools[name][2]

    def put(self, name: str, pool: PoolCounters, since: int, chain_head: bytes | None) -> None:
        """Hand `pool` over: its batch is done with it."""
        self._pools[name] = (pool, since, chain_head)

    def forget(self, names: Iterable[str]) -> None:
        for name in names:
            self._pools.pop(name, None)


class SpecCache:
    """One object per distinct stored NodePool spec, so its parsed policy is reused by identity
    (`PoolCounters.policy`) instead of being looked up by its serialised form every transaction."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._specs: dict[str, dict[str, Any]] = {}

    def parse(self, text: str | None) -> dict[str, Any] | None:
        if text is None:
            return None
        spec = self._specs.get(text)
        if spec is None:
            if len(self._specs) >= self.size:
                self._specs.clear()
            spec = self._specs[text] = orjson.loads(text)
        return spec


class Memory:
    """The three together, as one store keeps them."""

    def __init__(self) -> None:
        self.claims = ClaimCache()
        self.pools = PoolCache()
        self.specs = SpecCache()

    def keep(
        self,
        pools: Mapping[str, PoolCounters],
        claims: Mapping[str, ClaimState],
        heads: Mapping[str, int],
        since: Mapping[str, int],
        loaded: Mapping[str, PoolCounters],
        tips: Mapping[str, bytes | None],
        chain_heads: Mapping[str, bytes | None],
    ) -> None:
        """After the commit: the pools and claims as the batch left them, with the hashes of the
        streams' heads (`tips`) and the pools' chain heads. `loaded`: the pools as the batch
        found them, to tell a spec the batch applied (the event's own dict, its caller's to
        change) from the one it read."""
        for name, pool in pools.items():
            before = loaded.get(name)
            if pool.spec is not None and (before is None or pool.spec is not before.spec):
                pool.spec = self.specs.parse(orjson.dumps(pool.spec).decode())
            self.pools.put(name, pool, since[name], chain_heads.get(name))
        for name, state in claims.items():
            pool = pools.get(state.nodepool)
            stream = NodeClaimEvent.stream_of(name)
            if stream in heads and (stream in tips or not heads[stream]):
                self.claims.put(name, heads[stream], state, pool.version if pool is not None else -1, tips.get(stream))

    def forget(self, pools: Iterable[str]) -> None:
        self.pools.forget(pools)
