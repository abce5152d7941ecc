"""`nodewright audit`, `replay --at` and `events export`: the log, read back and checked.

Audit and replay fold the log with the same pure code the store runs when it appends
(`shared.policy.audit`), from the database or from an exported JSONL file.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from cli.folding import fold_log
from cli.migrate import open_store
from shared.events.envelope import RecordedEvent
from shared.events.registry import REGISTRY
from shared.policy.anchors import Heads
from shared.policy.audit import LogEntry, Replay
from shared.policy.chain import Problem, Signatures
from shared.policy.counters import COUNTED_EVENTS, PoolCounters
from shared.policy.digests import MIN_KEY_BYTES, Signer
from shared.policy.exported import TRAILER, FileChain, trailer_of
from shared.runtime.inputs import json_lines
from shared.store import integrity
from shared.store.eventstore import EventStore

KEY_FILE_LIMIT = 4096


def read_key(path: Path) -> bytes:
    """A signing key from a file (`audit --key-file`): its bytes, without one trailing newline, as
    `NODEWRIGHT_SIGNING_KEY=$(cat FILE)` would give them. ValueError naming the file and the rule."""
    try:
        if path.stat().st_size > KEY_FILE_LIMIT:
            raise ValueError(f"{path}: not a signing key: larger than {KEY_FILE_LIMIT} bytes")
        key = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the key file: {exc.strerror or exc}") from None
    key = key.removesuffix(b"\n").removesuffix(b"\r")
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"{path}: a signing key must be at least {MIN_KEY_BYTES} bytes, not {len(key)}")
    return key


# --- export ---------------------------------------------------------------------------------------


async def export(url: str, path: Path) -> int:
    """The log up to its settled position (`LogReader.settled_snapshot`: no event may still
    commit below it), in position order, then the trailer line (`shared.policy.exported`): the
    number of events and the heads as of the last, as the database's audit computes them."""
    store = await open_store(url)
    count = 0
    try:
        async with store.settled_snapshot() as (snapshot, last):
            heads = (await integrity.check(store, snapshot, at=last)).at
            with path.open("w", encoding="utf-8") as out:
                async for page in store.read_chained(batch_size=10000, snapshot=snapshot, until=last):
                    out.writelines(json.dumps(line, separators=(",", ":")) + "\n" for line in page)
                    count += len(page)
                out.write(json.dumps(trailer_of(count, heads), separators=(",", ":")) + "\n")
    finally:
        await store.close()
    return count


def read_jsonl(path: Path) -> Iterator[LogEntry]:
    """The log back from `events export`; a bad line is an error naming its number. The trailer
    is skipped, and so is a line whose position an earlier one has (`audit` names it)."""
    seen: set[int] = set()
    for _, row in _jsonl_rows(path):
        if TRAILER in row:
            continue
        event = RecordedEvent.from_json_dict(row)
        if event.position in seen:
            continue
        seen.add(event.position)
        yield LogEntry(event.position, event.stream_id, event.type, event.data, event.occurred_at)


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, line) of the exported lines, each checked to be an event or the trailer (a
    bad line is an error naming its number). Read through `shared.runtime.inputs`: each line
    within the size and nesting limits, the file of any size."""
    for number, row in json_lines(path):
        if isinstance(row, dict) and TRAILER in row:
            yield number, row
            continue
        try:
            RecordedEvent.from_json_dict(row)
            if not isinstance(row.get("data"), dict):
                raise ValueError("`data` is not an object")
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
            raise ValueError(f"{path}:{number}: not an exported event: {exc}") from None
        yield number, row


# --- audit and replay -------------------------------------------------------------------------------


@dataclass
class AuditResult:
    replay: Replay
    counters_match: bool | None
    mismatches: list[str]
    chain: list[Problem] = field(default_factory=list)
    heads: dict[str, tuple[int, bytes | None]] = field(default_factory=dict)
    """Per pool, its chained counted events and their head, at the end."""
    at: Heads = field(default_factory=lambda: Heads(0, {}, {}))
    """The heads of every stream and pool as of the audit's position: its digest, an anchor."""
    signatures: dict[str, Any] = field(default_factory=lambda: {"checked": False})

    @property
    def ok(self) -> bool:
        return not self.replay.violations and self.counters_match is not False and not self.chain

    @property
    def position(self) -> int:
        return self.at.position

    @property
    def digest(self) -> str:
        return self.at.digest

    def anchor(self) -> dict[str, Any]:
        return self.at.document()

    def to_json(self) -> dict[str, Any]:
        r = self.replay
        out: dict[str, Any] = {
            "events": r.events,
            "launches": r.launches,
            "disruptions": r.disruptions,
            "violations": [v.to_dict() for v in r.violations],
            "counters_match": self.counters_match,
        }
        if self.mismatches:
            out["counter_mismatches"] = self.mismatches
        out["chain"] = {
            "problems": [p.to_dict() for p in self.chain],
            "digest": self.digest,
            "position": self.position,
            "signatures": self.signatures,
        }
        if r.explain:
            out["explain"] = {
                "stream": r.explain,
                "story": [
                    {"position": c.position, "at": c.at.isoformat(), "type": c.type, "text": c.text, **c.facts}
                    for c in r.story
                ],
            }
        return out


async def fold_database(
    url: str,
    *,
    until: datetime | None = None,
    explain: str | None = None,
    workers: int | None = None,
    verify_chain: bool = False,
    anchored: Heads | None = None,
    signer: Signer | None = None,
    settled: bool = False,
) -> tuple[Replay, dict[str, PoolCounters], integrity.Integrity]:
    """The replay of the database's log, its live counters and (with `verify_chain`) the hash
    chain's check, made by the replay's own parts on the rows they read, all as of one instant:
    every read (and every worker's) goes through one exported snapshot, so writers may go on.
    `settled`: the heads are taken as of a position no event may still commit below, which an
    anchor may vouch for (`LogReader.settled_snapshot`)."""
    store = await open_store(url)
    try:
        async with _snapshot(store, settled) as (snapshot, at):
            live = await store.counters(snapshot=snapshot)
            sizes = {name: pool.version for name, pool in live.items() if pool.version}
            if not sizes:  # a log written around the store (imported, planted): ask the log itself
                sizes = await store.pool_sizes(snapshot=snapshot)
            spec = await integrity.begin(store, snapshot, anchored, signer, at) if verify_chain else None
            replay, parts = await fold_log(
                store, url, sizes, until=until, explain=explain, workers=workers, snapshot=snapshot, chain=spec
            )
            checked = integrity.Integrity()
            if spec is not None:
                checked = await integrity.conclude(store, snapshot, spec, parts, anchored)
    finally:
        await store.close()
    return replay, live, checked


@asynccontextmanager
async def _snapshot(store: EventStore, settled: bool) -> AsyncIterator[tuple[str, int | None]]:
    """An exported snapshot, and the position its heads are taken at (None: its last)."""
    if settled:
        async with store.settled_snapshot() as (snapshot, position):
            yield snapshot, position
    else:
        async with store.exported_snapshot() as snapshot:
            yield snapshot, None


def signatures_of(checked: Signatures | None, signer: Signer | None) -> dict[str, Any]:
    """What `audit` says of the signatures: not checked without the key."""
    if checked is None or signer is None:
        return {"checked": False}
    return {"checked": True, "key_id": signer.key_id.hex(), "signed": checked.signed, "before_signing": checked.before}


def compare_counters(replayed: dict[str, PoolCounters], live: dict[str, PoolCounters]) -> list[str]:
    """Where the live table and the replay disagree; rows no event ever changed are ignored."""
    out = []
    for name in sorted(set(replayed) | set(live)):
        mine = replayed[name].comparable() if name in replayed else None
        theirs = live[name].comparable() if name in live and live[name].version else None
        if mine == theirs:
            continue
        if mine is None or theirs is None:
            out.append(f"nodepool {name}: {'only in the live table' if mine is None else 'missing from the table'}")
            continue
        for key in mine:
            if mine[key] != theirs[key]:
                out.append(f"nodepool {name}: {key} live={theirs[key]!r} replayed={mine[key]!r}")
    return out


async def audit_database(
    url: str,
    explain: str | None = None,
    workers: int | None = None,
    anchored: Heads | None = None,
    verify_chain: bool = True,
    signer: Signer | None = None,
    settled: bool = False,
) -> AuditResult:
    """The replay and the hash chain, from one snapshot, in one pass: the replay's parts check
    the chain on the rows they fold (`shared.store.integrity`). Without `verify_chain` (the
    benchmark's baseline), the replay alone; `signer`: the signatures verified too; `settled`:
    the heads as of a settled position, for an anchor (`fold_database`)."""
    replay, live, chain = await fold_database(
        url,
        explain=explain,
        workers=workers,
        verify_chain=verify_chain,
        anchored=anchored,
        signer=signer,
        settled=settled,
    )
    mismatches = compare_counters(replay.pools, live)
    signatures = signatures_of(chain.signatures, signer)
    return AuditResult(replay, not mismatches, mismatches, chain.problems, chain.heads, chain.at, signatures)


def audit_file(
    path: Path, explain: str | None = None, anchored: Heads | None = None, signer: Signer | None = None
) -> AuditResult:
    """A file that holds no event nodewright knows proves nothing: that is an error, not a clean
    audit (an empty export, the wrong file, a truncated copy). A line that repeats a position is
    named and folded once; a malformed trailer is an error naming its line."""
    known = set(REGISTRY.types())
    seen: Counter[str] = Counter()
    chain = FileChain(COUNTED_EVENTS, signer)

    def counted(rows: Iterator[tuple[int, dict[str, Any]]]) -> Iterator[LogEntry]:
        for number, row in rows:
            if TRAILER in row:
                try:
                    chain.end(row[TRAILER], number)
                except ValueError as exc:
                    raise ValueError(f"{path}:{number}: {exc}") from None
                continue
            seen[row["type"]] += 1
            if not chain.feed(row, number):
                continue
            event = RecordedEvent.from_json_dict(row)
            yield LogEntry(event.position, event.stream_id, event.type, event.data, event.occurred_at)

    replay = Replay(explain=explain)
    replay.feed(counted(_jsonl_rows(path)))
    if not seen:
        raise ValueError(f"{path}: holds no events (an empty file is not an audited log)")
    if not known.intersection(seen):
        kinds = ", ".join(sorted(seen)[:5]) + (", ..." if len(seen) > 5 else "")
        raise ValueError(f"{path}: holds no event type nodewright records (only {kinds})")
    problems = chain.finish(anchored)
    signatures = signatures_of(chain.signatures, signer)
    return AuditResult(replay, None, [], problems, chain.heads, chain.at, signatures)


def render_audit(result: AuditResult) -> str:
    r = result.replay
    lines = [f"events: {r.events}  launches: {r.launches}  disruptions: {r.disruptions}"]
    if result.counters_match is None:
        lines.append("counters: no live table to compare (audit of a file)")
    elif result.counters_match:
        lines.append(f"counters: the live table equals the replay ({len(r.pools)} nodepools)")
    else:
        lines.append("counters: the live table DIFFERS from the replay")
        lines.extend(f"  {m}" for m in result.mismatches)
    if r.violations:
        lines.append(f"violations: {len(r.violations)}")
        lines.extend(f"  #{v.position} {v.stream} {v.type} [{v.rule}] {v.detail}" for v in r.violations)
    else:
        lines.append("violations: none")
    if result.chain:
        lines.append(f"hash chain: {len(result.chain)} problem(s)")
        lines.extend(
            f"  {'#' + str(p.position) if p.position else '-'} {p.stream} [{p.kind}] {p.detail}" for p in result.chain
        )
    else:
        streams = sum(n for n, _ in (result.at.streams or {}).values())
        lines.append(f"hash chain: intact ({len(result.heads)} nodepool head(s), {streams} stream head(s))")
    lines.append(f"head digest: {result.digest} (at position {result.position})")
    lines.append(_render_signatures(result.signatures))
    if r.explain:
        lines.append("")
        lines.append(f"{r.explain}:")
        if not r.story:
            lines.append("  no event of the log mentions it")
        lines.extend(f"  {c.at.isoformat()}  #{c.position}  {c.text}" for c in r.story)
    return "\n".join(lines)


def _render_signatures(signatures: dict[str, Any]) -> str:
    if not signatures["checked"]:
        return "signatures: not checked (no key: set NODEWRIGHT_SIGNING_KEY or give --key-file)"
    before = signatures["before_signing"]
    earlier = f"; {before} event(s) from before signing began" if before else ""
    return f"signatures: {signatures['signed']} event(s) verified with key id {signatures['key_id']}{earlier}"


def point_in_time(replay: Replay, at: datetime) -> dict[str, Any]:
    return {
        "at": at.isoformat(),
        "position": replay.last_position,
        "events": replay.events,
        "nodepools": {
            name: {**pool.comparable(), "disrupting_by_reason": pool.disrupting_by_reason()}
            for name, pool in sorted(replay.pools.items())
        },
    }


def render_point_in_time(view: dict[str, Any]) -> str:
    lines = [f"at {view['at']} (log position {view['position']}, {view['events']} events)"]
    if not view["nodepools"]:
        lines.append("  no nodepool yet")
    for name, pool in view["nodepools"].items():
        spec = pool["spec"]
        state = "applied" if spec is not None else "not applied (deleted or never valid)"
        limits = (spec or {}).get("spec", {}).get("limits") or {}
        lines.append(f"nodepool {name}: {state}")
        lines.append(f"  limits: {_kv(limits) or 'none'}")
        lines.append(
            f"  nodes {pool['nodes']} (in flight {pool['in_flight']}, initialized {pool['initialized']}); "
            f"resources {_kv(pool['resources']) or 'none'}"
        )
        lines.append(f"  disrupting: {_kv(pool['disrupting_by_reason']) or 'none'}")
    return "\n".join(lines)


def _kv(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())
