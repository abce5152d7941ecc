"""The event store: an append-only PostgreSQL log with per-NodePool counters, strict by construction.

An append goes `eventstore.EventStore.append_units` -> a snapshot of what its units need
(`snapshot.recall` from memory, or `gather.read` from PostgreSQL, unlocked or locked) -> `plan`
(pure: the rules of `shared.policy.counters`) -> `write` (`sql.WRITE`: one statement that writes
only if every pool is still at the snapshot's version). The protocol, its invariants and why
they hold: `docs/store.md`.
"""
