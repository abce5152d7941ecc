"""The log's heads as of a position, their digest, and what keeps them: an anchor (`nodewright
audit --save-anchor`, kept elsewhere) and an exported file's trailer line.

The heads as of position P are each pool's (chained counted events, head) and, per kind of
stream (`pod`, `node`, `nodeclaim`, `nodepool`, ...), how many streams have an event at or
before P and a digest of their heads (version and hash of each one's newest event by then). The
digest `nodewright audit` prints covers all of them and P. A later audit recomputes them from
the events at or before P: one removed, rewritten or inserted there changes the heads of its
stream (the newest of a stream included, which the chain alone cannot see), and a log that
ends before P was cut back. No I/O here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.policy.chain import Problem
from shared.policy.digests import HEADS_BYTES

PoolHeads = Mapping[str, tuple[int, bytes | None]]
StreamHeads = Mapping[str, tuple[int, bytes]]
"""Per kind of stream: (streams, sha256 of the sum of their heads' terms, `digests.head_term`)."""


@dataclass(frozen=True)
class Heads:
    position: int
    pools: PoolHeads
    streams: StreamHeads | None
    """None: an anchor saved before the streams' heads were kept (its pools and position count)."""

    @classmethod
    def summed(cls, position: int, pools: PoolHeads, sums: Mapping[str, tuple[int, int]]) -> Heads:
        """From the sums `shared.policy.chain.join` adds up."""
        digests = {
            kind: (n, hashlib.sha256(total.to_bytes(HEADS_BYTES, "big")).digest()) for kind, (n, total) in sums.items()
        }
        return cls(position, dict(pools), dict(sorted(digests.items())))

    @property
    def digest(self) -> str:
        pools = {pool: [n, head.hex() if head else None] for pool, (n, head) in sorted(self.pools.items())}
        if self.streams is None:  # the digest before the streams were covered: the pools alone
            canonical = pools
        else:
            streams = {kind: [n, heads.hex()] for kind, (n, heads) in sorted(self.streams.items())}
            canonical = {"pools": pools, "position": self.position, "streams": streams}
        return hashlib.sha256(json.dumps(canonical, separators=(",", ":"), sort_keys=True).encode()).hexdigest()

    def document(self) -> dict[str, Any]:
        """What an anchor file holds, and an exported file's trailer beside its count of events."""
        out: dict[str, Any] = {
            "position": self.position,
            "digest": self.digest,
            "pools": {p: {"events": n, "head": h.hex() if h else None} for p, (n, h) in sorted(self.pools.items())},
        }
        if self.streams is not None:
            out["streams"] = {k: {"streams": n, "heads": h.hex()} for k, (n, h) in sorted(self.streams.items())}
        return out


def read_heads(document: Any, what: str = "anchor", *, verify: bool = True) -> Heads:
    """The heads an anchor (or a trailer: `what`) keeps; ValueError naming the field and the rule
    when it is not one or (`verify`) when its digest does not match it: the file was edited."""
    hint = " (write one with `nodewright audit --save-anchor`)" if what == "anchor" else ""
    what = f"an {what}" if what[0] in "aeiou" else f"a {what}"
    if not isinstance(document, dict) or not isinstance(document.get("pools"), dict):
        raise ValueError(f"not {what}: `pools` must be an object{hint}")
    position = document.get("position")
    if type(position) is not int or position < 0:
        raise ValueError(f"not {what}: `position` must be a log position (a whole number, 0 or more)")
    pools: dict[str, tuple[int, bytes | None]] = {}
    for pool, entry in document["pools"].items():
        try:
            n, head = entry["events"], entry["head"]
            if type(n) is not int or n < 0:
                raise ValueError
            pools[pool] = (n, bytes.fromhex(head) if head else None)
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"not {what}: pools.{pool} must be {{events: a count, head: hex}}") from None
    streams: dict[str, tuple[int, bytes]] | None = None
    if "streams" in document:
        if not isinstance(document["streams"], dict):
            raise ValueError(f"not {what}: `streams` must be an object")
        streams = {}
        for kind, entry in document["streams"].items():
            try:
                n, heads = entry["streams"], bytes.fromhex(entry["heads"])
                if type(n) is not int or n < 0 or len(heads) != 32:
                    raise ValueError
                streams[kind] = (n, heads)
            except (KeyError, TypeError, ValueError):
                raise ValueError(
                    f"not {what}: streams.{kind} must be {{streams: a count, heads: 64 hex digits}}"
                ) from None
    kept = Heads(position, pools, streams)
    if verify and document.get("digest") != kept.digest:
        raise ValueError(f"not {what}: its `digest` does not match its content (the file was edited)")
    return kept


def compare(kept: Heads, now: Heads, end: int, label: str = "anchor") -> list[Problem]:
    """The log's heads as of the position `kept` was taken at (`now`), against `kept`; `end` is
    the log's last position. Each difference is a problem of kind `label` naming the pool or the
    kind of stream (as `<kind>-*`): what was kept no longer describes the log."""
    at, out = kept.position, []
    if end < at:
        detail = f"the {label} covers the log up to position {at}, but the log ends at position {end}: cut back"
        out.append(Problem(None, "log", label, detail))
    for pool, (n, head) in sorted(kept.pools.items()):
        have, again = now.pools.get(pool, (0, None))
        if have != n:
            what = "removed, or the log cut back" if have < n else "inserted"
            detail = (
                f"nodepool {pool}: the {label} saw {n} chained counted event(s) up to position {at},"
                f" the log has {have}: {what}"
            )
        elif again != head:
            detail = (
                f"nodepool {pool}: its counted events up to position {at} no longer chain to the {label}'s head:"
                " rewritten"
            )
        else:
            continue
        out.append(Problem(None, f"nodepool-{pool}", label, detail))
    for pool in sorted(set(now.pools) - set(kept.pools)):
        n = now.pools[pool][0]
        detail = f"nodepool {pool}: {n} chained counted event(s) up to position {at} the {label} did not see: inserted"
        out.append(Problem(None, f"nodepool-{pool}", label, detail))
    if kept.streams is None or now.streams is None:
        return out
    for kind in sorted(set(kept.streams) | set(now.streams)):
        n, heads = kept.streams.get(kind, (0, b""))
        have, again = now.streams.get(kind, (0, b""))
        if have != n:
            what = "one's events removed" if have < n else "one inserted"
            detail = f"{kind} streams: the {label} saw {n} up to position {at}, the log has {have} there: {what}"
        elif again != heads:
            detail = (
                f"{kind} streams: their heads as of position {at} differ from the {label}'s: the newest event of one"
                " (or more) removed, rewritten or inserted by then"
            )
        else:
            continue
        out.append(Problem(None, f"{kind}-*", label, detail))
    return out
