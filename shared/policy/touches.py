"""What a counted event touches: the pool whose counters it changes and the claims it names.

One answer for everyone who needs it: the store (which pool rows to lock, which claim streams to
fold), what a process remembers between appends, and the audit (the claims a part of a split
fold mentions, the events a story tells).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.policy.counters import counted_pool


@dataclass(frozen=True, slots=True)
class Touched:
    pool: str | None
    """The pool whose counters the event changes (None: it counts nowhere)."""
    claims: tuple[str, ...] = ()
    """The claims it names: its `nodeclaim`, a decision's `candidates`."""
    replaces: str | None = None
    """The decision a replacement claim is created for: its candidates are the pool's to name."""


NOTHING = Touched(None)


def named_claims(data: Any) -> tuple[str, ...]:
    """The claim names a payload carries (`nodeclaim`, then `candidates`, then a validation's
    `dropped`); malformed ones are left out."""
    if not isinstance(data, Mapping):
        return ()
    claim = data.get("nodeclaim")
    out = (claim,) if isinstance(claim, str) else ()
    candidates = data.get("candidates")
    if isinstance(candidates, list):
        out += tuple(c for c in candidates if isinstance(c, str))
    dropped = data.get("dropped")
    if isinstance(dropped, Mapping):
        out += tuple(c for c in dropped if isinstance(c, str))
    return out


def touches(event_type: str, data: Mapping[str, Any]) -> Touched:
    pool = counted_pool(event_type, data)
    if pool is None:
        return NOTHING
    replaces = data.get("replacement_for") if event_type == "NodeClaimCreated" else None
    if data.get("replacement_from") not in (None, pool):
        replaces = None  # another pool's replacement is reserved as a launch: no candidates of its own pool
    return Touched(pool, named_claims(data), replaces if isinstance(replaces, str) else None)
