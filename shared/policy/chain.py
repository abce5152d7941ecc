"""The rules that check the log's hash chain, for the database's audit (`shared.store.integrity`)
and for an exported JSONL log alike; how each hash is made is `shared.policy.digests`.

The checks read the log in position order (`LogChain`), keeping only each stream's last event
and each pool's head. A form-3 event a pool counts is checked against its pool's previous
counted event; any other against its stream's previous event. An event whose predecessor in
its stream was not seen just before it (another part of a split audit holds it, it was deleted,
or it comes later: moved) is handed back as a `Link`, settled once its predecessor is looked up
(`settle`). Pools never cross parts, so a pool's chain is checked whole in one.

The heads of every stream as of a position (a mark: the audit's own, an anchor's) are summed per
kind of stream, so that each part adds its own and the parts add up (`join`); given the signing
key, each event's signature is verified on the same rows. No I/O here.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import orjson

from shared.events.envelope import stream_kind
from shared.policy.digests import (
    HEADS_MODULUS,
    KEY_ID_BYTES,
    OPTIONS,
    POOL_LINKED,
    SIGNATURE_BYTES,
    SQL_TEXT,
    WRITER_JSON,
    Signer,
    chain_step,
    head_term,
    link_value,
)

UNCHAINED = "no hash: written around the store"
REWRITTEN = "the event does not match its hash: rewritten, or moved within its stream"
POOL_REWRITTEN = (
    "the event does not match its hash: rewritten, or an event its pool counted before it removed, inserted or moved"
)
UNSIGNED = "no signature, though an event before it is signed: written without the signing key"
FORGED = "its signature does not match its hash under the key given: forged, or rewritten and its hash recomputed"
NOTHING_SIGNED = (
    "no event of the log is signed, though a key was given: the services never had NODEWRIGHT_SIGNING_KEY,"
    " or every signature was removed"
)
_sha256 = hashlib.sha256


@dataclass(frozen=True, slots=True)
class Problem:
    """One place where the log does not match its chain."""

    position: int | None
    stream: str
    kind: str
    """deleted, reordered, rewritten, unchained, pool-head; unsigned, signature (given the key);
    anchor (given one); of an exported file: duplicate, out-of-order, missing, trailer."""
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
    "signature",
)
"""The fields `LogChain.feed` reads, in this order: the replay's five first, so one row serves
both. `key` is form 3's `event_key`; `event_id` (text), `schema_version` and `micros` are read
for form 2 only; `canonical` is form 1's text (UTF-8). Each is None for the other forms.
`signature` is read only when the audit has the signing key (rows without it end before it)."""

_CHECKED = itemgetter(*range(len(ROW) - 1))
"""A row without its signature: the check's loop unpacks a fixed width (a `*rest` would cost
every row of every audit, signed or not)."""
_position = itemgetter(0)
SIGNATURE = len(ROW) - 1

Mark = tuple[dict[str, tuple[int, bytes | None]], dict[str, list[int]]]
"""What a part saw as of a position: each pool's (chained counted events, head), and per kind of
stream (`stream_kind`) its [heads, sum of their `head_term`s]; the parts' marks add up (`join`)."""


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
class Signatures:
    """What a pass found of the events' signatures (given the key)."""

    signed: int = 0
    """Verified with the key given."""
    before: int = 0
    """Unsigned, at or before the first signed event: written before signing began."""
    foreign: dict[bytes, list[Any]] = field(default_factory=dict)
    """Per key id other than the one given: [events, first position, its stream]."""

    def add(self, other: Signatures) -> None:
        self.signed += other.signed
        self.before += other.before
        for key_id, (n, position, stream) in other.foreign.items():
            mine = self.foreign.setdefault(key_id, [0, position, stream])
            mine[0] += n
            if position < mine[1]:
                mine[1:] = [position, stream]


@dataclass
class ChainPart:
    """What one pass over (a part of) the log found: sent back by an audit's worker processes."""

    problems: list[Problem] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    heads: dict[str, tuple[int, bytes | None]] = field(default_factory=dict)
    marks: dict[int, Mark] = field(default_factory=dict)
    """The heads it saw as of each of the audit's marks."""
    signatures: Signatures = field(default_factory=Signatures)


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
    marks: tuple[int, ...] = ()
    """The positions as of which the heads are wanted: the audit's own (`at`), an anchor's."""
    at: int = 0
    """The audit's own position: the heads it prints are as of it."""
    signer: Signer | None = None
    """Given the key, every event's signature is verified."""
    signed_from: int | None = None
    """The first signed event's position: every event after it must be signed."""

    def start(self) -> LogChain:
        return LogChain(self.counted, self.chained_after, self.marks, self.signer, self.signed_from)


class LogChain:
    """One pass over the log (or one part of a split audit) in position order: every chained
    event's hash, each pool's head, and the heads of every stream as of each mark. `counted`:
    the event types a pool counts."""

    def __init__(
        self,
        counted: frozenset[str],
        chained_after: int,
        marks: Iterable[int] = (),
        signer: Signer | None = None,
        signed_from: int | None = None,
    ) -> None:
        self.counted = counted
        self.chained_after = chained_after
        self.signer = signer
        self.signed_from = signed_from
        self.problems: list[Problem] = []
        self.signatures = Signatures()
        self._tails: dict[str, tuple[int, bytes | None]] = {}
        self._waiting: dict[tuple[str, int], Link] = {}
        self._heads: dict[str, list[Any]] = {}
        self._pending = sorted(set(marks))
        self._marks: dict[int, Mark] = {}
        self._ends: dict[str, list[int]] = {}
        """Per kind of stream, the heads this part saw superseded by an event it did not see
        follow them (a `Link`): each still counts until the link is settled (`join`)."""

    def feed(self, rows: Sequence[Sequence[Any]]) -> None:
        """Rows of `ROW`'s fields, in position order; the heads are taken at each mark passed."""
        pending = self._pending
        while pending and rows and rows[-1][0] > pending[0]:
            cut = bisect_right(rows, pending[0], key=_position)
            self._check(rows[:cut])
            self._mark(pending.pop(0))
            rows = rows[cut:]
        if rows:
            self._check(rows)

    def _check(self, rows: Sequence[Sequence[Any]]) -> None:
        if self.signer is None:
            self._feed(rows)
            return
        self._feed([_CHECKED(row) for row in rows])
        self._verify(rows)

    def _feed(self, rows: Iterable[Sequence[Any]]) -> None:
        """This loop runs a million times per audit: what it needs is kept in locals, and the
        common case (form 3) is checked inline."""
        after, counted, tails, waiting, heads = (
            self.chained_after,
            self.counted,
            self._tails,
            self._waiting,
            self._heads,
        )
        problems, sha256, dumps, options = self.problems, _sha256, orjson.dumps, OPTIONS
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
            tail = tails.get(stream)
            if (tail[0] == version - 1) if tail is not None else version == 1:
                if chained and not pooled:
                    prev = tail[1] if tail is not None else None
                    if own is None or digest is None or own != link_value(prev, form, digest):
                        problem = link_problem(position, stream, own, digest, prev, form)
                        if problem is not None:
                            problems.append(problem)
            else:
                if tail is not None:  # the head this part saw, followed by an event it did not see
                    self._supersede(stream, tail)
                link = Link(position, stream, version, own, digest, chained and not pooled, form)
                waiting[(stream, version - 1)] = link
            if waiting and (slot := (stream, version)) in waiting:  # it waited for this one: which comes later
                early = waiting.pop(slot)
                problems.append(Problem(early.position, stream, "reordered", reordered(stream, early.version)))
            tails[stream] = (version, own)

    def _supersede(self, stream: str, tail: tuple[int, bytes | None]) -> None:
        total = self._ends.setdefault(stream_kind(stream), [0, 0])
        total[0] += 1
        total[1] += head_term(stream, *tail)

    def _verify(self, rows: Iterable[Sequence[Any]]) -> None:
        """Each row's signature (`ROW`'s last field) against its hash, under the key given."""
        assert self.signer is not None
        mac, key_id, since = self.signer.mac, self.signer.key_id, self.signed_from
        tally, problems = self.signatures, self.problems
        for row in rows:
            position, signature = row[0], row[SIGNATURE]
            if signature is None:
                if since is not None and position > since:
                    problems.append(Problem(position, row[1], "unsigned", UNSIGNED))
                else:
                    tally.before += 1
            elif len(signature) != SIGNATURE_BYTES:
                problems.append(Problem(position, row[1], "signature", FORGED))
            elif signature[:KEY_ID_BYTES] != key_id:
                foreign = tally.foreign.setdefault(bytes(signature[:KEY_ID_BYTES]), [0, position, row[1]])
                foreign[0] += 1
            elif row[6] is None or signature[KEY_ID_BYTES:] != mac(row[6]):
                problems.append(Problem(position, row[1], "signature", FORGED))
            else:
                tally.signed += 1

    def _mark(self, position: int) -> None:
        """The heads as of `position` (every row up to it fed, none after): one pass over the
        streams this part holds, whose number bounds its memory anyway."""
        streams = {kind: list(total) for kind, total in self._ends.items()}
        for stream, (version, own) in self._tails.items():
            total = streams.get(kind := stream_kind(stream))
            if total is None:
                total = streams[kind] = [0, 0]
            total[0] += 1
            total[1] += head_term(stream, version, own)
        self._marks[position] = ({pool: (n, head) for pool, (n, head) in self._heads.items()}, streams)

    def part(self) -> ChainPart:
        """What the pass found; `links` still need their predecessors (`settle`, `join`)."""
        while self._pending:
            self._mark(self._pending.pop(0))
        heads = {pool: (n, head) for pool, (n, head) in self._heads.items()}
        return ChainPart(list(self.problems), list(self._waiting.values()), heads, dict(self._marks), self.signatures)


@dataclass
class Joined:
    """The parts of one pass put together."""

    problems: list[Problem]
    heads: dict[str, tuple[int, bytes | None]]
    """Per pool, its chained counted events and their head, at the end."""
    marks: dict[int, tuple[dict[str, tuple[int, bytes | None]], dict[str, tuple[int, int]]]]
    """As of each mark: the pools' heads, and per kind of stream (its heads, their sum)."""
    signatures: Signatures


def join(
    parts: Iterable[ChainPart],
    previous: Mapping[tuple[str, int], Predecessor],
    spec: ChainSpec,
) -> Joined:
    """The parts' findings, each link settled against its predecessor (`previous`, by the link's
    stream and version). A stream split between parts left a head in each: a link's predecessor
    was the head as of the link, so its term comes off the sums of every mark at or after it."""
    found: list[Problem] = []
    links: list[Link] = []
    heads: dict[str, tuple[int, bytes | None]] = {}
    marks: dict[int, Mark] = {}
    signatures = Signatures()
    for part in parts:
        found += part.problems
        links += part.links
        heads.update(part.heads)
        signatures.add(part.signatures)
        for at, (pools, streams) in part.marks.items():
            mine = marks.setdefault(at, ({}, {}))
            mine[0].update(pools)
            for kind, (count, total) in streams.items():
                sums = mine[1].setdefault(kind, [0, 0])
                sums[0] += count
                sums[1] += total
    for link in links:
        before = previous.get((link.stream, link.version))
        if (problem := settle(link, before)) is not None:
            found.append(problem)
        if before is None:
            continue
        term, kind = head_term(link.stream, before.version, before.hash), stream_kind(link.stream)
        for at, (_, streams) in marks.items():
            if link.position <= at:
                sums = streams.setdefault(kind, [0, 0])
                sums[0] -= 1
                sums[1] -= term
    found += _signature_problems(signatures, spec)
    found.sort(key=lambda p: p.position or 0)
    summed = {
        at: (pools, {kind: (count, total % HEADS_MODULUS) for kind, (count, total) in sorted(streams.items())})
        for at, (pools, streams) in marks.items()
    }
    return Joined(found, heads, summed, signatures)


def _signature_problems(signatures: Signatures, spec: ChainSpec) -> list[Problem]:
    """What only the whole log shows: events signed with another key, a key given to a log that
    has no signed event."""
    if spec.signer is None:
        return []
    out = [
        Problem(
            position,
            stream,
            "signature",
            f"{n} event(s) signed with key id {key_id.hex()}, not with the key given (id {spec.signer.key_id.hex()}):"
            " give that key to verify them",
        )
        for key_id, (n, position, stream) in sorted(signatures.foreign.items())
    ]
    if spec.signed_from is None and signatures.before:
        out.append(Problem(None, "log", "unsigned", NOTHING_SIGNED))
    return out


# --- pool heads -------------------------------------------------------------------------------------


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
