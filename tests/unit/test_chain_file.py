"""The hash chain of an exported log, checked without a database (`shared.policy.chain`): the
same problems PostgreSQL's check names, from the lines alone."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

from shared.policy.chain import SEPARATOR, FileChain, anchor, compare_anchor, read_anchor

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
