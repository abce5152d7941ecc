"""The hash chain of an exported log, checked without a database (`shared.policy.exported`): the
same problems the database's audit names, from the lines alone, for either digest form."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import uuid
from datetime import UTC, datetime

import pytest

from shared.policy.anchors import compare, read_heads
from shared.policy.digests import (
    SEPARATOR,
    as_stored,
    canonical,
    chain_step,
    event_key,
    linked,
    payload_text,
    stored_canonical,
    stored_payload_text,
)
from shared.policy.exported import FileChain

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
    return {(p.position, p.stream, p.kind) for p in chain.finish(trailer=False)}


def _rewrite(rows):
    rows[2]["data"]["n"] = 99


def _drop(rows):
    del rows[2]


def _swap(rows):
    """Two events' positions exchanged in the database: the export writes them in position order."""
    rows[2]["position"], rows[4]["position"] = rows[4]["position"], rows[2]["position"]
    rows.sort(key=lambda row: row["position"])


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
    assert chain.finish(trailer=False) == []
    assert {pool: n for pool, (n, _) in chain.heads.items()} == {"p": 4}


def test_an_anchor_round_trips_and_finds_a_cut_back():
    chain = FileChain(COUNTED)
    for row in log():
        chain.feed(row)
    chain.finish(trailer=False)
    kept = read_heads(json.loads(json.dumps(chain.at.document())))
    assert kept == chain.at and kept.position == 5
    assert compare(kept, chain.at, 5) == []
    shorter = FileChain(COUNTED)
    for row in log()[:3]:
        shorter.feed(row)
    assert {(p.stream, p.kind) for p in shorter.finish(kept, trailer=False)} == {
        ("log", "anchor"),  # it ends at position 3
        ("nodepool-p", "anchor"),  # 2 counted events of the 3 the anchor saw
        ("nodeclaim-*", "anchor"),  # nodeclaim-a's head is version 1 now
        ("pod-*", "anchor"),  # pod-x has no event by then
    }


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


def log3(form_two_first: int = 0) -> list[dict]:
    """The log of `log()` as the store writes it now (form 3): an event the pool counts linked to
    the pool's previous counted event, the others to their stream's; the first `form_two_first`
    lines written by an older writer (form 2), whose pool head the form-3 events go on from."""
    rows: list[dict] = []
    tips: dict[str, bytes] = {}
    head: bytes | None = None
    for position, old in enumerate(log(), 1):
        stream, version, kind, data = old["stream_id"], old["version"], old["type"], old["data"]
        if position <= form_two_first:
            row = line2(position, stream, version, kind, data, tips.get(stream))
            own = bytes.fromhex(row["hash"])
            if kind in COUNTED:
                head = chain_step(head, own)
        else:
            row = line(position, stream, version, kind, data, None)
            del row["canonical"]
            row["digest_form"] = 3
            at = datetime.fromisoformat(row["occurred_at"])
            content = event_key(uuid.UUID(row["event_id"]), version, 1, at) + stored_payload_text(
                stream, kind, data, {}
            )
            own = linked(head if kind in COUNTED else tips.get(stream), content)
            if kind in COUNTED:
                head = own
            row["hash"] = own.hex()
        tips[stream] = own
        rows.append(row)
    return rows


def _retyped(rows):
    rows[3]["type"] = "NodeClaimLaunched"  # an uncounted event made to look counted


FORM_THREE = [
    ("intact", lambda rows: None, set()),
    ("payload rewritten", _rewrite, {(3, "nodeclaim-a", "rewritten")}),
    # the stream's versions skip, and the pool's next counted event no longer follows its predecessor
    ("middle deleted", _drop, {(5, "nodeclaim-a", "deleted"), (5, "nodeclaim-a", "rewritten")}),
    (
        "positions swapped",
        _swap,
        {(3, "nodeclaim-a", "reordered"), (3, "nodeclaim-a", "rewritten"), (5, "nodeclaim-a", "rewritten")},
    ),
    ("hash stripped", _strip, {(4, "pod-x", "unchained")}),
    # now counted, it joins the pool's chain: its hash and the next counted event's no longer match
    ("type rewritten", _retyped, {(4, "pod-x", "rewritten"), (5, "nodeclaim-a", "rewritten")}),
    ("form flipped", _form_flipped, {(4, "pod-x", "rewritten")}),
]


@pytest.mark.parametrize("form_two_first", [0, 2], ids=["form 3 only", "form 2 then 3"])
@pytest.mark.parametrize(("change", "expected"), [c[1:] for c in FORM_THREE], ids=[c[0] for c in FORM_THREE])
def test_form_three_lines_name_what_changed(change, expected, form_two_first):
    rows = log3(form_two_first)
    change(rows)
    assert problems(rows) == expected


def test_a_form_three_pool_head_is_its_newest_counted_hash():
    rows = log3()
    chain = FileChain(COUNTED)
    for row in rows:
        chain.feed(row)
    assert chain.finish(trailer=False) == []
    assert chain.heads == {"p": (4, bytes.fromhex(rows[4]["hash"]))}
    cut = FileChain(COUNTED)
    for row in rows[:-1]:  # the newest counted event gone: the head the counter row keeps no longer matches
        cut.feed(row)
    assert cut.finish(trailer=False) == [] and cut.heads["p"] != chain.heads["p"]


def test_a_form_three_line_with_an_impossible_key_fails_its_hash_without_an_error():
    rows = log3()
    rows[1]["event_id"] = "not-a-uuid"
    assert problems(rows) == {(2, "nodeclaim-b", "rewritten")}


def test_form_three_payloads_are_hashed_as_they_read_back_from_jsonb():
    plain = stored_payload_text("s", "T", {"price": 0.5}, {})
    assert plain == payload_text("s", "T", {"price": 0.5}, {})
    odd = stored_payload_text("s", "T", {"price": -0.0, "big": 1e16}, {"note": 2e20})
    assert odd == payload_text("s", "T", {"big": 10**16, "price": 0.0}, {"note": 2e20})
