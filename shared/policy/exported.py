"""An exported log (`nodewright events export`), checked without a database: its chain by the
rules the database's audit uses (`shared.policy.chain`), its lines, and its trailer.

The export writes its events in position order, then one trailer line: how many events, and
the heads as of the last one (`shared.policy.anchors.Heads`). So beside what the chain shows:
- a line whose position another line already has is `duplicate` (skipped: counted once);
- a line whose position is below the line before it is `out-of-order`;
- fewer events than the trailer counts, a last position below the trailer's, or no trailer at
  all is `missing` (lines removed; with the trailer, the newest too);
- more events, lines after the trailer, heads that differ from the trailer's (a line rewritten
  with its hash recomputed) or a trailer that does not match its own digest is `trailer`.
An editor who rewrites the trailer to match can still remove the newest lines or rewrite a
stream's newest event: only an anchor kept elsewhere, or the signing key, catches that.
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.policy.anchors import Heads, compare, read_heads
from shared.policy.chain import ChainSpec, Predecessor, Problem, Signatures, join
from shared.policy.digests import POOL_LINKED, SEPARATOR, SQL_TEXT, Signer, epoch_micros, event_key

TRAILER = "trailer"
"""The key of the trailer line's one field; a reader of exported events skips that line."""
NO_TRAILER = (
    "the file has no trailer line: its end may have been cut off, with its newest events"
    " (a file exported before trailers were written: export it again)"
)


@dataclass(frozen=True)
class Trailer:
    events: int
    heads: Heads
    edited: bool
    """Its digest does not match its heads."""

    def line(self) -> dict[str, Any]:
        return {TRAILER: {"events": self.events, **self.heads.document()}}


def trailer_of(events: int, heads: Heads) -> dict[str, Any]:
    """The trailer line `events export` writes after `events` lines."""
    return Trailer(events, heads, False).line()


def read_trailer(document: Any) -> Trailer:
    """A trailer line's content; ValueError naming the field when it is not one."""
    if not isinstance(document, dict):
        raise ValueError("not a trailer: `trailer` must be an object")
    events = document.get("events")
    if type(events) is not int or events < 0:
        raise ValueError("not a trailer: trailer.events must be a count of events (0 or more)")
    heads = read_heads(document, "trailer", verify=False)
    return Trailer(events, heads, document.get("digest") != heads.digest)


class FileChain:
    """The chain of an exported log: `feed` each event line and `end` with the trailer line, then
    `finish`, which checks what the database's audit checks (`LogChain`), settling links from the
    file itself, so a file and its database report the same problems; then the lines and the
    trailer. `signer`: given the key, each line's signature is verified."""

    def __init__(self, counted: frozenset[str], signer: Signer | None = None) -> None:
        self.counted = counted
        self.signer = signer
        self.problems: list[Problem] = []
        self.heads: dict[str, tuple[int, bytes | None]] = {}
        """Per pool, its chained counted events and their head, at the end."""
        self.kept: dict[int, Heads] = {}
        """The heads as of the file's last position, the trailer's and the anchor's."""
        self.last = 0
        self._previous = 0
        self.signatures = Signatures()
        self.trailer: Trailer | None = None
        self._rows: list[tuple[Any, ...]] = []
        self._positions: set[int] = set()
        self._lines: list[Problem] = []

    def feed(self, row: Mapping[str, Any], line: int | None = None) -> bool:
        """One exported event line (`line`: its number); False when its position was seen already
        (the line is then skipped). A form-1 line carries PostgreSQL's canonical text, used only
        when it says what the line says; a form-2 or form-3 digest is rebuilt from the line itself."""
        position, stream = int(row["position"]), row["stream_id"]
        where = f"line {line}: " if line is not None else ""
        if position in self._positions:
            detail = f"{where}position {position} again: a line duplicated (counted once)"
            self._lines.append(Problem(position, stream, "duplicate", detail))
            return False
        if self.trailer is not None:
            self._lines.append(Problem(position, stream, "trailer", f"{where}an event after the trailer: appended"))
        if position < self._previous:
            detail = f"{where}position {position} comes after position {self._previous}: lines moved"
            self._lines.append(Problem(position, stream, "out-of-order", detail))
        self._previous = position
        self._positions.add(position)
        self.last = max(self.last, position)
        raw = row.get("hash")
        own = bytes.fromhex(raw) if isinstance(raw, str) else None
        form, text = row.get("digest_form", SQL_TEXT), row.get("canonical")
        utf8 = text.encode() if form == SQL_TEXT and isinstance(text, str) and _matches(text, row) else None
        at = datetime.fromisoformat(row["occurred_at"])
        metadata = row.get("metadata") if row.get("metadata") is not None else {}
        version, schema = int(row["version"]), row.get("schema_version", 1)
        fields = (
            position,
            stream,
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
        self._rows.append((*fields, _signature(row.get("signature"))) if self.signer is not None else fields)
        return True

    def end(self, document: Any, line: int | None = None) -> None:
        """The trailer line's content; ValueError naming the field when it is not a trailer."""
        if self.trailer is not None:
            where = f"line {line}: " if line is not None else ""
            self._lines.append(Problem(None, "log", "trailer", f"{where}a second trailer: lines appended"))
            return
        self.trailer = read_trailer(document)

    def finish(self, anchored: Heads | None = None, *, trailer: bool = True) -> list[Problem]:
        """Every problem of the file, by position; with `anchored`, also where the file no longer
        extends that anchor. `trailer=False`: a file without a trailer is not `missing` (lines
        made by hand, not by `events export`)."""
        rows = sorted(self._rows, key=lambda r: r[0])
        hashed = [r[0] for r in rows if r[6] is not None]
        chained_after = hashed[0] - 1 if hashed else 0  # older events predate the chain (migration 0006)
        signed = [r[0] for r in rows if r[-1] is not None] if self.signer is not None else []
        marks = {self.last}
        marks |= {anchored.position} if anchored is not None else set()
        marks |= {self.trailer.heads.position} if self.trailer is not None else set()
        spec = ChainSpec(
            self.counted, chained_after, tuple(sorted(marks)), self.last, self.signer, signed[0] if signed else None
        )
        chain = spec.start()
        chain.feed(rows)
        part = chain.part()
        previous: dict[tuple[str, int], Predecessor] = {}
        if part.links:
            streams: dict[str, list[tuple[int, int, bytes | None]]] = {}
            wanted = {link.stream for link in part.links}
            for r in rows:
                if r[1] in wanted:
                    streams.setdefault(r[1], []).append((r[5], r[0], r[6]))
            for link in part.links:
                earlier = [e for e in streams[link.stream] if e[0] < link.version]
                if earlier:
                    previous[(link.stream, link.version)] = Predecessor(*max(earlier))
        joined = join([part], previous, spec)
        self.heads, self.signatures = joined.heads, joined.signatures
        self.kept = {at: Heads.summed(at, pools, sums) for at, (pools, sums) in joined.marks.items()}
        found = joined.problems + self._lines + self._trailer_problems(len(rows), trailer)
        if anchored is not None:
            found += compare(anchored, self.kept[anchored.position], self.last)
        self.problems = sorted(found, key=lambda p: p.position or 0)
        return self.problems

    @property
    def at(self) -> Heads:
        """The heads as of the file's last position: what the audit prints and an anchor keeps."""
        return self.kept[self.last]

    def _trailer_problems(self, events: int, required: bool) -> list[Problem]:
        kept = self.trailer
        if kept is None:
            return [Problem(None, "log", "missing", NO_TRAILER)] if required else []
        out = []
        if events != kept.events:
            kind, what = ("missing", "lines removed") if events < kept.events else ("trailer", "lines added")
            out.append(
                Problem(None, "log", kind, f"the file holds {events} events, its trailer counts {kept.events}: {what}")
            )
        at = kept.heads.position
        if self.last != at:
            kind, what = ("missing", "its newest lines removed") if self.last < at else ("trailer", "lines appended")
            out.append(
                Problem(None, "log", kind, f"the file ends at position {self.last}, its trailer at {at}: {what}")
            )
        if kept.edited:
            detail = "the trailer's `digest` does not match its own heads: the trailer was edited"
            out.append(Problem(None, "log", "trailer", detail))
        out += compare(kept.heads, self.kept[at], max(self.last, at), label="trailer")
        return out


def _signature(raw: Any) -> bytes | None:
    """A line's signature; one that is not hex reads as an empty one, which then fails its check."""
    if raw is None:
        return None
    try:
        return bytes.fromhex(raw)
    except (TypeError, ValueError):
        return b""


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
