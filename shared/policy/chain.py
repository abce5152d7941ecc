"""The rules that check the log's hash chain, for the database's audit (`shared.store.integrity`)
and for an exported JSONL log alike; how each hash is made is `shared.policy.digests`.

The checks read the log in position order (`LogChain`), keeping only each stream's last event
and each pool's head. A form-3 event a pool counts is checked against its pool's previous
counted event; any other against its stream's previous event. An event whose predecessor in
its stream was not seen just before it (another part of a split audit holds it, it was deleted,
or it comes later: moved) is handed back as a `Link`, settled once its predecessor is looked up
(`settle`). Pools never cross parts, so a pool's chain is checked whole in one. No I/O here.
"""

from __future__ import annotations

import hashlib
import json
import struct
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from shared.policy.digests import (
    OPTIONS,
    POOL_LINKED,
    SEPARATOR,
    SQL_TEXT,
    WRITER_JSON,
    chain_step,
    epoch_micros,
    event_key,
    link_value,
)

UNCHAINED = "no hash: written around the store"
REWRITTEN = "the event does not match its hash: rewritten, or moved within its stream"
POOL_REWRITTEN = (
    "the event does not match its hash: rewritten, or an event its pool counted before it removed, inserted or moved"
)
_sha256 = hashlib.sha256


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


# --- checking ---------------------------------------------------------------------------------------

ROW = (
    "position",
    "stream_id",
    "type",
    "data",
    "occurred_at",
    "version",
    "hash",
    "digest_form",
    "key",
    "metadata",
    "event_id",
    "schema_version",
    "micros",
    "canonical",
)
"""The fields `LogChain.feed` reads, in this order: the replay's five first, so one row serves
both. `key` is form 3's `event_key`; `event_id` (text), `schema_version` and `micros` are read
for form 2 only; `canonical` is form 1's text (UTF-8). Each is None for the other forms."""


@dataclass(frozen=True, slots=True)
class Link:
    """An event whose predecessor in its stream the pass did not see just before it."""

    position: int
    stream: str
    version: int
    hash: bytes | None
    digest: bytes | None
    """Form 1 or 2: its digest; form 3: its key and payload text."""
    chained: bool
    """After `chained_after`, and not checked against its pool: its link to its stream is checked."""
    form: int = WRITER_JSON


@dataclass(frozen=True, slots=True)
class Predecessor:
    """A stream's event before a `Link`'s: the highest version below it."""

    version: int
    position: int
    hash: bytes | None


@dataclass
class ChainPart:
    """What one pass over (a part of) the log found: sent back by an audit's worker processes."""

    problems: list[Problem] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    heads: dict[str, tuple[int, bytes | None]] = field(default_factory=dict)
    prefixes: dict[str, tuple[int, bytes | None]] = field(default_factory=dict)
    """Per anchored pool, its first `limits[pool]` chained counted events (fewer if the log has
    fewer) and their head."""


def link_problem(
    position: int, stream: str, own: bytes | None, digest: bytes | None, prev: bytes | None, form: int = WRITER_JSON
) -> Problem | None:
    """A chained event against the hash of its stream's previous event (None: it is the first)."""
    if own is None:
        return Problem(position, stream, "unchained", UNCHAINED)
    if digest is None or own != link_value(prev, form, digest):
        return Problem(position, stream, "rewritten", REWRITTEN)
    return None


def settle(link: Link, previous: Predecessor | None) -> Problem | None:
    """A `Link` against its predecessor, looked up elsewhere (None: no earlier version)."""
    before = previous.version if previous is not None else 0
    if previous is not None and previous.position > link.position:
        return Problem(link.position, link.stream, "reordered", reordered(link.stream, link.version))
    if link.version != before + 1:
        return Problem(link.position, link.stream, "deleted", missing(link.stream, before, link.version))
    if not link.chained:
        return None
    prev = previous.hash if previous else None
    return link_problem(link.position, link.stream, link.hash, link.digest, prev, link.form)


@dataclass(frozen=True)
class ChainSpec:
    """What every pass of one audit checks against (sent to its worker processes)."""

    counted: frozenset[str]
    chained_after: int
    """Events at or before it predate the chain (migration 0006): their versions alone are checked."""
    limits: Mapping[str, int] = field(default_factory=dict)
    """Per anchored pool, the counted events its anchor saw."""

    def start(self) -> LogChain:
        return LogChain(self.counted, self.chained_after, self.limits)


class LogChain:
    """One pass over the log (or one part of a split audit) in position order: every chained
    event's hash, each pool's head. `counted`: the event types a pool counts."""

    def __init__(self, counted: frozenset[str], chained_after: int, limits: Mapping[str, int] | None = None) -> None:
        self.counted = counted
        self.chained_after = chained_after
        self.limits = dict(limits or {})
        self.problems: list[Problem] = []
        self._tails: dict[str, tuple[int, bytes | None]] = {}
        self._waiting: dict[tuple[str, int], Link] = {}
        self._heads: dict[str, list[Any]] = {}
        self._prefixes: dict[str, tuple[int, bytes | None]] = {}

    def feed(self, rows: Iterable[Sequence[Any]]) -> None:
        """Rows of `ROW`'s fields, in position order. This loop runs a million times per audit:
        what it needs is kept in locals, and the common case (form 3) is checked inline."""
        after, counted, tails, waiting, heads = (
            self.chained_after,
            self.counted,
            self._tails,
            self._waiting,
            self._heads,
        )
        problems, limits, sha256, dumps, options = self.problems, self.limits, _sha256, orjson.dumps, OPTIONS
        for row in rows:
            position, stream, kind, data, _, version, own, form, key, metadata, event_id, schema, micros, text = row
            chained = position > after
            digest = None
            pooled = False  # form 3, counted: checked against its pool's previous counted event
            if chained and own is not None:
                pool = data.get("nodepool") if kind in counted and type(data) is dict else None
                if form == POOL_LINKED:
                    if key is not None:
                        digest = key + dumps([stream, kind, data, metadata], option=options)
                    pooled = type(pool) is str
                elif form == WRITER_JSON:
                    digest = sha256(
                        dumps([event_id, stream, version, kind, schema, micros, data, metadata], option=options)
                    ).digest()
                elif form == SQL_TEXT and text is not None:
                    digest = sha256(text).digest()
                if type(pool) is str:
                    head = heads.get(pool)
                    if head is None:
                        head = heads[pool] = [0, None]
                    if pooled:  # its hash follows the pool's previous counted event's; the head is its own
                        prev = head[1]
                        if digest is None or own != sha256(prev + digest if prev is not None else digest).digest():
                            problems.append(Problem(position, stream, "rewritten", POOL_REWRITTEN))
                        head[1] = own
                    else:  # forms 1 and 2: the head chains the pool's hashes
                        head[1] = chain_step(head[1], own)
                    head[0] += 1
                    if limits and head[0] == limits.get(pool):
                        self._prefixes[pool] = (head[0], head[1])
            tail = tails.get(stream)
            if (tail[0] == version - 1) if tail is not None else version == 1:
                if chained and not pooled:
                    prev = tail[1] if tail is not None else None
                    if own is None or digest is None or own != link_value(prev, form, digest):
                        problem = link_problem(position, stream, own, digest, prev, form)
                        if problem is not None:
                            problems.append(problem)
            else:
                link = Link(position, stream, version, own, digest, chained and not pooled, form)
                waiting[(stream, version - 1)] = link
            if waiting and (slot := (stream, version)) in waiting:  # it waited for this one: which comes later
                early = waiting.pop(slot)
                problems.append(Problem(early.position, stream, "reordered", reordered(stream, early.version)))
            tails[stream] = (version, own)

    def part(self) -> ChainPart:
        """What the pass found; `links` still need their predecessors (`settle`)."""
        heads = {pool: (n, head) for pool, (n, head) in self._heads.items()}
        prefixes = {pool: heads[pool] for pool in self.limits if pool in heads}
        prefixes.update(self._prefixes)
        return ChainPart(list(self.problems), list(self._waiting.values()), heads, prefixes)


@dataclass
class FileChain:
    """The chain of an exported log: `feed` each line, then `finish`, which checks what the
    database's audit checks (`LogChain`), settling links from the file itself, so a file and
    its database report the same problems."""

    counted: frozenset[str]
    problems: list[Problem] = field(default_factory=list)
    heads: dict[str, tuple[int, bytes | None]] = field(default_factory=dict)
    prefixes: dict[str, tuple[int, bytes | None]] = field(default_factory=dict)
    """Per pool given to `finish`, its first chained counted events: what an anchor compares."""
    _rows: list[tuple[Any, ...]] = field(default_factory=list)

    def feed(self, row: Mapping[str, Any]) -> None:
        """One exported line. A form-1 line carries PostgreSQL's canonical text, used only when it
        says what the line says; a form-2 or form-3 digest is rebuilt from the line itself."""
        raw = row.get("hash")
        own = bytes.fromhex(raw) if isinstance(raw, str) else None
        form, text = row.get("digest_form", SQL_TEXT), row.get("canonical")
        utf8 = text.encode() if form == SQL_TEXT and isinstance(text, str) and _matches(text, row) else None
        at = datetime.fromisoformat(row["occurred_at"])
        metadata = row.get("metadata") if row.get("metadata") is not None else {}
        version, schema = int(row["version"]), row.get("schema_version", 1)
        self._rows.append(
            (
                int(row["position"]),
                row["stream_id"],
                row["type"],
                row["data"],
                None,
                version,
                own,
                form,
                _key(row["event_id"], version, schema, at) if form == POOL_LINKED else None,
                metadata,
                row["event_id"],
                schema,
                epoch_micros(at),
                utf8,
            )
        )

    def finish(self, limits: Mapping[str, int] | None = None) -> list[Problem]:
        self._rows.sort(key=lambda r: r[0])
        hashed = [r[0] for r in self._rows if r[6] is not None]
        chained_after = hashed[0] - 1 if hashed else 0  # older events predate the chain (migration 0006)
        chain = LogChain(self.counted, chained_after, limits)
        chain.feed(self._rows)
        part = chain.part()
        found = part.problems
        if part.links:
            streams: dict[str, list[tuple[int, int, bytes | None]]] = {}
            wanted = {link.stream for link in part.links}
            for r in self._rows:
                if r[1] in wanted:
                    streams.setdefault(r[1], []).append((r[5], r[0], r[6]))
            for link in part.links:
                earlier = [e for e in streams[link.stream] if e[0] < link.version]
                previous = Predecessor(*max(earlier)) if earlier else None
                if (problem := settle(link, previous)) is not None:
                    found.append(problem)
        self.heads = part.heads
        self.prefixes = part.prefixes
        self.problems = sorted(found, key=lambda p: p.position or 0)
        return self.problems


def _key(event_id: Any, version: int, schema: Any, at: datetime) -> bytes | None:
    """Form 3's `event_key` of an exported line; None (its hash then fails) when a field cannot be one."""
    try:
        return event_key(uuid.UUID(str(event_id)), version, int(schema), at)
    except (ValueError, TypeError, OverflowError, struct.error):
        return None


def _matches(text: str, row: Mapping[str, Any]) -> bool:
    """Form 1's canonical text says what the line says (its payload compared as JSON)."""
    parts = text.split(SEPARATOR)
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


# --- pool heads and anchors ---------------------------------------------------------------------------


def heads_digest(heads: Mapping[str, tuple[int, bytes | None]]) -> str:
    """One digest of every pool's (chained events, head): what `nodewright audit` prints."""
    canonical_heads = json.dumps(
        {pool: [n, head.hex() if head else None] for pool, (n, head) in sorted(heads.items())}, separators=(",", ":")
    )
    return hashlib.sha256(canonical_heads.encode()).hexdigest()


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
