"""The log's hash chain, checked without a database: the rules `shared.store.integrity` runs in
PostgreSQL, for an exported JSONL log, and the anchor a user keeps elsewhere.

An event's `hash` is sha256(previous hash in its stream || digest), or its digest alone for the
first chained event of a stream; the digest is sha256 of its canonical text (PostgreSQL's
`nodewright_event_canonical`: its fields joined by U+001F, the payload as jsonb prints it). A
pool's head chains the hashes of the events it counted, in position order: step(state, h) =
sha256(state || h), the first hash as it is. Migration 0006 says why this shape.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SEPARATOR = "\x1f"
UNCHAINED = "no hash: written around the store"
REWRITTEN = "the event does not match its hash: rewritten, or moved within its stream"


@dataclass(frozen=True, slots=True)
class Problem:
    """One place where the log does not match its chain."""

    position: int | None
    stream: str
    kind: str  # deleted, reordered, rewritten, unchained, pool-head, anchor
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position, "stream": self.stream, "kind": self.kind, "detail": self.detail}


def missing(stream: str, previous: int, version: int) -> str:
    return f"versions {previous + 1}..{version - 1} of {stream} are missing: deleted"


def reordered(stream: str, version: int) -> str:
    return f"version {version} of {stream} comes before the version preceding it: positions swapped"


def chain_step(state: bytes | None, value: bytes) -> bytes:
    return value if state is None else hashlib.sha256(state + value).digest()


def heads_digest(heads: Mapping[str, tuple[int, bytes | None]]) -> str:
    """One digest of every pool's (chained events, head): what `nodewright audit` prints."""
    canonical = json.dumps(
        {pool: [n, head.hex() if head else None] for pool, (n, head) in sorted(heads.items())}, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def anchor(heads: Mapping[str, tuple[int, bytes | None]], position: int) -> dict[str, Any]:
    """What to keep elsewhere: the pools' heads as of this audit, and their digest."""
    return {
        "position": position,
        "digest": heads_digest(heads),
        "pools": {p: {"events": n, "head": h.hex() if h else None} for p, (n, h) in sorted(heads.items())},
    }


def read_anchor(document: Any) -> dict[str, tuple[int, bytes | None]]:
    """The pools of an anchor file; ValueError naming the field when it is not one."""
    if not isinstance(document, dict) or not isinstance(document.get("pools"), dict):
        raise ValueError("not an anchor: `pools` must be an object (write one with `nodewright audit --save-anchor`)")
    out: dict[str, tuple[int, bytes | None]] = {}
    for pool, entry in document["pools"].items():
        try:
            n, head = entry["events"], entry["head"]
            if not isinstance(n, int) or n < 0:
                raise ValueError
            out[pool] = (n, bytes.fromhex(head) if head else None)
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"not an anchor: pools.{pool} must be {{events: a count, head: hex}}") from None
    if document.get("digest") != heads_digest(out):
        raise ValueError("not an anchor: its `digest` does not match its `pools` (the file was edited)")
    return out


@dataclass
class FileChain:
    """The chain of an exported log: `feed` each line, then `finish`, which checks what
    `shared.store.integrity` checks in PostgreSQL (streams in version order, pools in position
    order), so a file and its database report the same problems."""

    counted: frozenset[str]
    problems: list[Problem] = field(default_factory=list)
    heads: dict[str, tuple[int, bytes | None]] = field(default_factory=dict)
    _streams: dict[str, list[tuple[int, int, bytes | None, bytes | None]]] = field(default_factory=dict)
    _counted: list[tuple[int, str, bytes]] = field(default_factory=list)

    def feed(self, row: Mapping[str, Any]) -> None:
        """One exported line: its (version, position, hash, digest), the digest None when the
        canonical text is missing or says something else than the line."""
        position, raw, canonical = int(row["position"]), row.get("hash"), row.get("canonical")
        own = bytes.fromhex(raw) if isinstance(raw, str) else None
        digest = None
        if isinstance(canonical, str) and _matches(canonical, row):
            digest = hashlib.sha256(canonical.encode()).digest()
        self._streams.setdefault(row["stream_id"], []).append((int(row["version"]), position, own, digest))
        pool = row["data"].get("nodepool")
        if row["type"] in self.counted and isinstance(pool, str) and own is not None:
            self._counted.append((position, pool, own))

    def finish(self) -> list[Problem]:
        found: list[Problem] = []
        hashed = [p for events in self._streams.values() for _, p, own, _ in events if own is not None]
        chained_after = min(hashed) - 1 if hashed else 0  # older events predate the chain (migration 0006)
        for stream, events in self._streams.items():
            events.sort()
            previous, prev_hash, prev_position = 0, None, 0
            for version, position, own, digest in events:
                if prev_position > position:
                    found.append(Problem(position, stream, "reordered", reordered(stream, version)))
                elif version != previous + 1:
                    found.append(Problem(position, stream, "deleted", missing(stream, previous, version)))
                elif own is None:
                    if position > chained_after:
                        found.append(Problem(position, stream, "unchained", UNCHAINED))
                elif digest is None or own != (digest if prev_hash is None else _sha(prev_hash + digest)):
                    found.append(Problem(position, stream, "rewritten", REWRITTEN))
                previous, prev_hash, prev_position = version, own, position
        for _, pool, own in sorted(self._counted):
            n, head = self.heads.get(pool, (0, None))
            self.heads[pool] = (n + 1, chain_step(head, own))
        self.problems = sorted(found, key=lambda p: p.position or 0)
        return self.problems


def _sha(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


def _matches(canonical: str, row: Mapping[str, Any]) -> bool:
    """The canonical text says what the line says (its payload compared as JSON)."""
    parts = canonical.split(SEPARATOR)
    if len(parts) != 8:
        return False
    event_id, stream, version, kind, schema, _, data, metadata = parts
    try:
        same_payload = json.loads(data) == row["data"] and json.loads(metadata) == (row.get("metadata") or {})
    except ValueError:
        return False
    return (
        same_payload
        and event_id == row["event_id"]
        and stream == row["stream_id"]
        and version == str(row["version"])
        and kind == row["type"]
        and schema == str(row.get("schema_version", 1))
    )


def compare_heads(
    recomputed: Mapping[str, tuple[int, bytes | None]], recorded: Mapping[str, bytes | None]
) -> list[Problem]:
    """A pool whose counted events chain to another head than its counter row keeps: one of them
    was removed (the newest included), inserted or reordered."""
    out = []
    for pool in sorted(set(recomputed) | {p for p, h in recorded.items() if h is not None}):
        n, head = recomputed.get(pool, (0, None))
        if head != recorded.get(pool):
            out.append(
                Problem(
                    None,
                    f"nodepool-{pool}",
                    "pool-head",
                    f"nodepool {pool}: its {n} chained counted event(s) do not chain to the head its counter row"
                    " keeps: an event was removed (the newest too), inserted or reordered",
                )
            )
    return out


def compare_anchor(
    anchored: Mapping[str, tuple[int, bytes | None]], now: Mapping[str, tuple[int, bytes | None]]
) -> list[Problem]:
    """Each anchored pool's first `n` counted events must still chain to the anchored head."""
    out = []
    for pool, (n, head) in sorted(anchored.items()):
        have, again = now.get(pool, (0, None))
        if have < n:
            detail = f"nodepool {pool}: the anchor saw {n} chained counted event(s), the log has {have}: cut back"
        elif again != head:
            detail = f"nodepool {pool}: its first {n} counted event(s) no longer chain to the anchor: rewritten"
        else:
            continue
        out.append(Problem(None, f"nodepool-{pool}", "anchor", detail))
    return out


def prefix_heads(rows: Iterable[tuple[str, bytes]], limits: Mapping[str, int]) -> dict[str, tuple[int, bytes | None]]:
    """Per pool, the chain of its first `limits[pool]` counted hashes (rows in position order)."""
    out: dict[str, tuple[int, bytes | None]] = {}
    for pool, value in rows:
        n, head = out.get(pool, (0, None))
        if n < limits.get(pool, 0):
            out[pool] = (n + 1, chain_step(head, value))
    return out
