"""The log's hash chain: how an event's digest and hash are made, and the rules that check them,
for the database's audit (`shared.store.integrity`) and for an exported JSONL log alike.

An event's `hash` is sha256(previous hash in its stream || digest), or its digest alone for the
first chained event of a stream. Its digest has one of two forms (`events.digest_form`):
1. sha256 of `nodewright_event_canonical`, the fields as PostgreSQL prints them (migration 0006);
2. sha256 of `canonical`: the fields as one JSON array, keys sorted, computed by the writer
   (migration 0007), so that neither the write nor the audit asks PostgreSQL to print a payload.
A pool's head chains the hashes of the events it counted, in position order: step(state, h) =
sha256(state || h), the first hash as it is.

The checks read the log in position order (`LogChain`), keeping only each stream's last event.
An event whose predecessor in its stream was not seen just before it (another part of a split
audit holds it, it was deleted, or it comes later: moved) is handed back as a `Link`, settled
once its predecessor is looked up (`settle`). No I/O here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson

SEPARATOR = "\x1f"
SQL_TEXT = 1
"""Digest form 1: sha256 of PostgreSQL's canonical text (migration 0006)."""
WRITER_JSON = 2
"""Digest form 2: sha256 of `canonical`, computed by the writer (migration 0007)."""
UNCHAINED = "no hash: written around the store"
REWRITTEN = "the event does not match its hash: rewritten, or moved within its stream"

_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NAIVE_UTC
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
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


def chain_step(state: bytes | None, value: bytes) -> bytes:
    return value if state is None else _sha256(state + value).digest()


# --- digest form 2 ----------------------------------------------------------------------------------


def canonical(
    event_id: Any,
    stream_id: str,
    version: int,
    kind: str,
    schema_version: int,
    micros: int | None,
    data: Any,
    metadata: Any,
) -> bytes:
    """The text a form-2 digest is of: the fields as one JSON array (unambiguous, unlike text
    joined by a separator), objects' keys sorted, `occurred_at` as microseconds since the epoch.
    The audit builds it from the payload as it reads it back; the writer from what it sends
    (`stored_canonical`)."""
    return orjson.dumps([event_id, stream_id, version, kind, schema_version, micros, data, metadata], option=_OPTIONS)


def stored_canonical(
    event_id: Any,
    stream_id: str,
    version: int,
    kind: str,
    schema_version: int,
    occurred_at: datetime,
    data: Any,
    metadata: Any,
) -> bytes:
    """`canonical` of an event about to be written, as the audit will rebuild it: a payload reads
    back from jsonb as it went in, except numbers PostgreSQL prints otherwise (-0.0 as 0.0, and
    1e+16 or larger in full, which reads back as an integer); the JSON text shows both, so only
    such payloads pay for `as_stored`."""
    micros = epoch_micros(occurred_at)
    text = canonical(event_id, stream_id, version, kind, schema_version, micros, data, metadata)
    if b"e+" in text or b"-0.0" in text:
        text = canonical(
            event_id, stream_id, version, kind, schema_version, micros, as_stored(data), as_stored(metadata)
        )
    return text


def epoch_micros(at: datetime) -> int:
    """Microseconds since the epoch, as PostgreSQL stores a timestamptz (naive means UTC, as the
    write's JSON says)."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return (at - _EPOCH) // _MICROSECOND


def as_stored(value: Any) -> Any:
    """The value as it reads back from jsonb: the JSON the write sends, each number through
    PostgreSQL's numeric (printed in full, no negative zero), parsed again by orjson."""
    return _numbers(orjson.loads(orjson.dumps(value, option=orjson.OPT_NAIVE_UTC)))


def _numbers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    if isinstance(value, float):
        number = Decimal(orjson.dumps(value).decode())
        return orjson.loads(format(number.copy_abs() if number.is_zero() else number, "f"))
    return value


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
    "event_id",
    "schema_version",
    "metadata",
    "micros",
    "canonical",
)
"""The fields `LogChain.feed` reads, in this order: the replay's five first, so one row serves
both; `canonical` is form 1's text (UTF-8), absent for other forms."""


@dataclass(frozen=True, slots=True)
class Link:
    """An event whose predecessor in its stream the pass did not see just before it."""

    position: int
    stream: str
    version: int
    hash: bytes | None
    digest: bytes | None
    chained: bool
    """After `chained_after`: its hash is checked."""


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
    position: int, stream: str, own: bytes | None, digest: bytes | None, prev: bytes | None
) -> Problem | None:
    """A chained event against the hash of its stream's previous event (None: it is the first)."""
    if own is None:
        return Problem(position, stream, "unchained", UNCHAINED)
    if digest is None or own != chain_step(prev, digest):
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
    return link_problem(link.position, link.stream, link.hash, link.digest, previous.hash if previous else None)


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
    event's digest and link, each pool's head. `counted`: the event types a pool counts."""

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
        what it needs is kept in locals, and a link is checked inline."""
        after, counted, tails, waiting, heads = (
            self.chained_after,
            self.counted,
            self._tails,
            self._waiting,
            self._heads,
        )
        problems, limits, sha256, dumps, options = self.problems, self.limits, _sha256, orjson.dumps, _OPTIONS
        for row in rows:
            position, stream, kind, data, _, version, own, form, event_id, schema, metadata, micros, text = row
            chained = position > after
            digest = None
            if chained and own is not None:
                if form == WRITER_JSON:
                    digest = sha256(
                        dumps([event_id, stream, version, kind, schema, micros, data, metadata], option=options)
                    ).digest()
                elif form == SQL_TEXT and text is not None:
                    digest = sha256(text).digest()
                if kind in counted and type(data) is dict and type(pool := data.get("nodepool")) is str:
                    head = heads.get(pool)
                    if head is None:
                        head = heads[pool] = [1, own]
                    else:
                        head[0] += 1
                        head[1] = sha256(head[1] + own).digest()
                    if limits and head[0] == limits.get(pool):
                        self._prefixes[pool] = (head[0], head[1])
            tail = tails.get(stream)
            if (tail[0] == version - 1) if tail is not None else version == 1:
                if chained:
                    prev = tail[1] if tail is not None else None
                    if (
                        own is None
                        or digest is None
                        or own != (digest if prev is None else sha256(prev + digest).digest())
                    ):
                        problem = link_problem(position, stream, own, digest, prev)
                        if problem is not None:
                            problems.append(problem)
            else:
                waiting[(stream, version - 1)] = Link(position, stream, version, own, digest, chained)
            if waiting and (key := (stream, version)) in waiting:  # it waited for this one: which comes later
                early = waiting.pop(key)
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
        says what the line says; a form-2 digest is rebuilt from the line itself."""
        raw = row.get("hash")
        own = bytes.fromhex(raw) if isinstance(raw, str) else None
        form, text = row.get("digest_form", SQL_TEXT), row.get("canonical")
        utf8 = text.encode() if form == SQL_TEXT and isinstance(text, str) and _matches(text, row) else None
        at = datetime.fromisoformat(row["occurred_at"])
        metadata = row.get("metadata") if row.get("metadata") is not None else {}
        self._rows.append(
            (
                int(row["position"]),
                row["stream_id"],
                row["type"],
                row["data"],
                None,
                int(row["version"]),
                own,
                form,
                row["event_id"],
                row.get("schema_version", 1),
                metadata,
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
