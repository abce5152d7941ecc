"""The hash chain of an exported log, checked without a database (`shared.policy.chain`): the
same problems the database's audit names, from the lines alone, for either digest form."""

from __future__ import annotations

import copy
import hashlib
import json
import math
from datetime import UTC, datetime

import pytest

from shared.policy.chain import (
    SEPARATOR,
    FileChain,
    anchor,
    as_stored,
    canonical,
    compare_anchor,
    read_anchor,
    stored_canonical,
)

COUNTED = frozenset({"NodeClaimCreated", "NodeClaimLaunched"})


def line(position: int, stream: str, version: int, kind: str, data: dict, prev: bytes | None) -> dict:
    row = {
        "position": position,
        "event_id": f"00000000-0000-0000-0000-{position:012d}",
        "stream_id": stream,
        "version": version,
        "type": kind,
        "schema_version": 1,
        "data": data,
        "metadata": {},
        "occurred_at": "2026-11-23T09:00:00+00:00",
    }
    fields = [row["event_id"], stream, str(version), kind, "1", "1763888400.000000", json.dumps(data), "{}"]
    row["canonical"] = SEPARATOR.join(fields)
    digest = hashlib.sha256(row["canonical"].encode()).digest()
    own = digest if prev is None else hashlib.sha256(prev + digest).digest()
    row["hash"] = own.hex()
    return row


def log() -> list[dict]:
    rows, last = [], {}
    plan = [
        ("nodeclaim-a", "NodeClaimCreated"),
        ("nodeclaim-b", "NodeClaimCreated"),
        ("nodeclaim-a", "NodeClaimLaunched"),
    ]
    plan += [("pod-x", "PodBound"), ("nodeclaim-a", "NodeClaimLaunched")]
    for position, (stream, kind) in enumerate(plan, 1):
        version = sum(1 for r in rows if r["stream_id"] == stream) + 1
        row = line(position, stream, version, kind, {"nodepool": "p", "n": position}, last.get(stream))
        last[stream] = bytes.fromhex(row["hash"])
        rows.append(row)
    return rows


def problems(rows: list[dict]) -> set[tuple[int | None, str, str]]:
    chain = FileChain(COUNTED)
    for row in rows:
        chain.feed(row)
    return {(p.position, p.stream, p.kind) for p in chain.finish()}


def _rewrite(rows):
    rows[2]["data"]["n"] = 99


def _drop(rows):
    del rows[2]


def _swap(rows):
    rows[2]["position"], rows[4]["position"] = rows[4]["position"], rows[2]["position"]


def _strip(rows):
    del rows[3]["hash"]


CASES = [
    ("intact", lambda rows: None, set()),
    ("payload rewritten", _rewrite, {(3, "nodeclaim-a", "rewritten")}),
    ("middle deleted", _drop, {(5, "nodeclaim-a", "deleted")}),
    ("positions swapped", _swap, {(3, "nodeclaim-a", "reordered")}),
    ("hash stripped", _strip, {(4, "pod-x", "unchained")}),
]


@pytest.mark.parametrize(("change", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_file_chain_names_what_changed(change, expected):
    rows = log()
    change(rows)
    assert problems(rows) == expected


def test_events_before_the_chain_are_not_unchained_and_heads_follow_counted_events():
    rows = log()
    legacy = copy.deepcopy(rows[0])
    legacy.update(position=0, stream_id="nodepool-p", version=1, type="NodePoolApplied")
    del legacy["hash"], legacy["canonical"]
    chain = FileChain(COUNTED)
    for row in [legacy, *rows]:
        chain.feed(row)
    assert chain.finish() == []
    assert {pool: n for pool, (n, _) in chain.heads.items()} == {"p": 4}


def test_an_anchor_round_trips_and_finds_a_cut_back():
    chain = FileChain(COUNTED)
    for row in log():
        chain.feed(row)
    chain.finish()
    kept = read_anchor(json.loads(json.dumps(anchor(chain.heads, 5))))
    assert compare_anchor(kept, chain.heads) == []
    shorter = FileChain(COUNTED)
    for row in log()[:3]:
        shorter.feed(row)
    shorter.finish()
    assert [p.kind for p in compare_anchor(kept, shorter.heads)] == ["anchor"]


def line2(position: int, stream: str, version: int, kind: str, data: dict, prev: bytes | None) -> dict:
    """A form-2 line (migration 0007): no canonical text, the digest is rebuilt from the line."""
    row = line(position, stream, version, kind, data, None)
    del row["canonical"]
    row["digest_form"] = 2
    at = datetime.fromisoformat(row["occurred_at"])
    text = stored_canonical(row["event_id"], stream, version, kind, 1, at, data, {})
    digest = hashlib.sha256(text).digest()
    row["hash"] = (digest if prev is None else hashlib.sha256(prev + digest).digest()).hex()
    return row


def mixed_log() -> list[dict]:
    """The log of `log()`, its first two events form 1 (an older writer), the rest form 2."""
    rows, last = [], {}
    for position, old in enumerate(log(), 1):
        make = line if position <= 2 else line2
        row = make(position, old["stream_id"], old["version"], old["type"], old["data"], last.get(old["stream_id"]))
        last[old["stream_id"]] = bytes.fromhex(row["hash"])
        rows.append(row)
    return rows


def _form_flipped(rows):
    rows[3]["digest_form"] = 1


@pytest.mark.parametrize(
    ("change", "expected"),
    [c[1:] for c in CASES] + [(_form_flipped, {(4, "pod-x", "rewritten")})],
    ids=[c[0] for c in CASES] + ["form flipped"],
)
def test_form_two_lines_name_the_same_problems(change, expected):
    rows = mixed_log()
    change(rows)
    assert problems(rows) == expected


def test_numbers_are_hashed_as_they_read_back_from_jsonb():
    assert math.copysign(1, as_stored(-0.0)) == 1
    assert as_stored({"a": [1e16, 1.5e17, 1e23, 1.5e-7, 0.1, 7]}) == {"a": [10**16, 15 * 10**16, 1e23, 1.5e-7, 0.1, 7]}
    assert type(as_stored(1e16)) is int and type(as_stored(1e23)) is float
    at = datetime(2026, 11, 23, 9, tzinfo=UTC)
    plain = stored_canonical("e", "s", 1, "T", 1, at, {"price": 0.5}, {})
    assert plain == canonical("e", "s", 1, "T", 1, 1795424400000000, {"price": 0.5}, {})
    odd = stored_canonical("e", "s", 1, "T", 1, at, {"price": -0.0, "big": 1e16}, {})
    assert odd == canonical("e", "s", 1, "T", 1, 1795424400000000, {"big": 10**16, "price": 0.0}, {})
