"""The heads of every stream as of a position (`shared.policy.anchors`), an exported file's lines
and trailer (`shared.policy.exported`) and the events' signatures (`digests.Signer`): each way a
log can be tampered with is named, or (without a trailer, an anchor or the key) documented as
unseen."""

from __future__ import annotations

import copy
import hmac
import pickle
import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.policy.anchors import Heads, compare, read_heads
from shared.policy.chain import ChainSpec, Predecessor, join
from shared.policy.digests import Signer, event_key, linked, stored_payload_text
from shared.policy.exported import FileChain, trailer_of

COUNTED = frozenset({"NodeClaimCreated", "NodeClaimLaunched"})
AT = datetime(2026, 11, 23, 9, tzinfo=UTC)
KEY, OTHER_KEY = b"k" * 32, b"o" * 32

PLAN = [
    ("nodepool-p", "NodePoolApplied", {"nodepool": "p"}),
    ("nodeclaim-a", "NodeClaimCreated", {"nodepool": "p"}),
    ("pod-web-1", "PodCreated", {"pod": "web-1"}),
    ("nodeclaim-b", "NodeClaimCreated", {"nodepool": "p"}),
    ("node-a", "NodeRegistered", {"nodepool": "p"}),
    ("pod-web-1", "PodBound", {"node": "a"}),
    ("nodeclaim-a", "NodeClaimLaunched", {"nodepool": "p"}),
    ("pod-web-2", "PodCreated", {"pod": "web-2"}),
    ("node-a", "NodeInitialized", {"nodepool": "p"}),
    ("nodeclaim-b", "NodeClaimLaunched", {"nodepool": "p"}),
    ("pod-web-1", "PodDeleted", {}),
    ("node-b", "NodeRegistered", {"nodepool": "p"}),
]


def build(plan=PLAN, signer: Signer | None = None, signed_from: int = 1) -> list[dict]:
    """Form-3 lines as the store writes them: a counted event linked to its pool's previous
    counted event, any other to its stream's previous event; signed from `signed_from` on."""
    rows, tips, versions, pools = [], {}, {}, {}
    for position, (stream, kind, data) in enumerate(plan, 1):
        version = versions[stream] = versions.get(stream, 0) + 1
        event_id = uuid.UUID(int=position)
        content = event_key(event_id, version, 1, AT) + stored_payload_text(stream, kind, data, {})
        pool = data.get("nodepool") if kind in COUNTED else None
        own = linked(pools.get(pool) if pool else tips.get(stream), content)
        if pool:
            pools[pool] = own
        tips[stream] = own
        row = {
            "position": position,
            "event_id": str(event_id),
            "stream_id": stream,
            "version": version,
            "type": kind,
            "schema_version": 1,
            "data": data,
            "metadata": {},
            "occurred_at": AT.isoformat(),
            "recorded_at": AT.isoformat(),
            "hash": own.hex(),
            "digest_form": 3,
        }
        if signer is not None and position >= signed_from:
            row["signature"] = signer.sign(own).hex()
        rows.append(row)
    return rows


def checked(rows, trailer=None, anchored=None, signer=None, *, require_trailer=True) -> FileChain:
    chain = FileChain(COUNTED, signer)
    for number, row in enumerate(rows, 1):
        chain.feed(row, number)
    if trailer is not None:
        chain.end(trailer["trailer"])
    chain.finish(anchored, trailer=require_trailer)
    return chain


def found(chain: FileChain) -> set[tuple[int | None, str, str]]:
    return {(p.position, p.stream, p.kind) for p in chain.problems}


def exported(rows) -> dict:
    """The trailer `events export` writes after these lines."""
    return trailer_of(len(rows), checked(rows, require_trailer=False).at)


def anchored_at(rows) -> Heads:
    """An anchor saved by an audit of these lines, read back from its file."""
    return read_heads(copy.deepcopy(checked(rows, require_trailer=False).at.document()))


def rehash(rows: list[dict], signer: Signer | None = None) -> list[dict]:
    """The lines with every hash (and signature) recomputed, as a forger who knows the rules would."""
    plan = [(r["stream_id"], r["type"], r["data"]) for r in rows]
    again = build(plan, signer)
    for row, fresh in zip(rows, again, strict=True):
        row["hash"] = fresh["hash"]
        if signer is not None:
            row["signature"] = fresh["signature"]
    return rows


def _without(position: int):
    def change(rows):
        rows[:] = [r for r in rows if r["position"] != position]

    return change


# --- the heads of every stream, and an anchor ---------------------------------------------------------


ANCHORED = [
    # the newest event of a stream removed: the chain alone cannot see it, the anchor names its kind
    ("newest of a pod stream", _without(11), {("pod-*", "anchor")}),
    ("a pod stream's only event", _without(8), {("pod-*", "anchor")}),
    ("newest of a node stream", _without(9), {("node-*", "anchor")}),
    ("newest of a claim, a pool's newest counted", _without(10), {("nodeclaim-*", "anchor"), ("nodepool-p", "anchor")}),
    ("the log's newest event", _without(12), {("log", "anchor"), ("node-*", "anchor")}),
    ("the newest pod event rewritten and rehashed", lambda rows: rehash(_rename(rows, 11)), {("pod-*", "anchor")}),
]


def _rename(rows, position):
    rows[position - 1]["data"] = {"forged": True}
    return rows


@pytest.mark.parametrize(("change", "expected"), [c[1:] for c in ANCHORED], ids=[c[0] for c in ANCHORED])
def test_an_anchor_names_the_kind_of_stream_whose_newest_event_went(change, expected):
    rows = build()
    kept = anchored_at(rows)
    change(rows)
    assert found(checked(rows, require_trailer=False)) == set()  # the chain alone sees nothing
    named = checked(rows, anchored=kept, require_trailer=False)
    assert {(stream, kind) for _, stream, kind in found(named)} == expected


def test_an_anchor_holds_on_a_log_that_grew_after_it():
    rows = build()
    kept = anchored_at(rows[:7])
    assert checked(rows, anchored=kept, require_trailer=False).problems == []
    assert checked(rows, require_trailer=False).at.digest != kept.digest


def test_the_digest_covers_every_kind_of_stream_and_the_position():
    heads = checked(build(), require_trailer=False).at
    assert heads.position == 12 and set(heads.streams) == {"nodepool", "nodeclaim", "pod", "node"}
    assert {kind: n for kind, (n, _) in heads.streams.items()} == {"nodepool": 1, "nodeclaim": 2, "pod": 2, "node": 2}
    moved = Heads(13, heads.pools, heads.streams)
    assert moved.digest != heads.digest


plans = st.lists(
    st.tuples(st.sampled_from(["pod-a", "pod-b", "node-x", "nodeclaim-c", "nodeclaim-d"]), st.sampled_from(["p", "q"])),
    min_size=1,
    max_size=40,
)


def _plan(steps) -> list[tuple[str, str, dict]]:
    """Claims' events are counted in their pool (each claim keeps its first pool), the rest not."""
    pool_of: dict[str, str] = {}
    out = []
    for stream, pool in steps:
        if stream.startswith("nodeclaim"):
            out.append((stream, "NodeClaimCreated", {"nodepool": pool_of.setdefault(stream, pool)}))
        else:
            out.append((stream, "PodBound", {"n": len(out)}))
    return out


def _sums(rows) -> dict:
    return checked(rows, require_trailer=False).at.streams


@settings(max_examples=60, deadline=None)
@given(plans, st.data())
def test_the_heads_as_of_a_mark_are_those_of_the_log_cut_there(steps, data):
    rows = build(_plan(steps))
    at = data.draw(st.integers(1, len(rows)))
    spec = ChainSpec(COUNTED, 0, (at, len(rows)))
    chain = spec.start()
    chain.feed([_row(r) for r in rows])
    joined = join([chain.part()], {}, spec)
    assert joined.problems == []
    pools, sums = joined.marks[at]
    assert Heads.summed(at, pools, sums) == checked(rows[:at], require_trailer=False).at


@settings(max_examples=60, deadline=None)
@given(plans, st.data())
def test_a_split_pass_adds_up_to_the_heads_of_one_pass(steps, data):
    """Pools never cross the parts of an audit; any other stream may: its head is then in one
    part and its earlier events in others, and the links' predecessors settle the sums."""
    rows = [_row(r) for r in build(_plan(steps))]
    parts = data.draw(st.integers(2, 4))
    pool_part = {"p": 0, "q": 1 % parts}
    marks = tuple(sorted({data.draw(st.integers(1, len(rows))), len(rows)}))
    spec = ChainSpec(COUNTED, 0, marks)
    chains = [spec.start() for _ in range(parts)]
    split: list[list] = [[] for _ in range(parts)]
    for row in rows:
        counted = row[2] in COUNTED
        split[pool_part[row[3]["nodepool"]] if counted else data.draw(st.integers(0, parts - 1))].append(row)
    for chain, mine in zip(chains, split, strict=True):
        chain.feed(mine)
    previous = {}
    for chain in chains:
        for link in chain.part().links:
            earlier = [(r[5], r[0], r[6]) for r in rows if r[1] == link.stream and r[5] < link.version]
            previous[(link.stream, link.version)] = Predecessor(*max(earlier))
    joined = join([c.part() for c in chains], previous, spec)
    assert joined.problems == []
    whole = ChainSpec(COUNTED, 0, marks).start()
    whole.feed(rows)
    assert joined.marks == join([whole.part()], {}, spec).marks


def _row(line: dict) -> tuple:
    """A line as `LogChain` reads it (`shared.policy.chain.ROW`, without the signature)."""
    chain = FileChain(COUNTED)
    chain.feed(line)
    return chain._rows[0]


# --- an exported file's lines and trailer -------------------------------------------------------------


def _duplicate_last(rows):
    rows.append(copy.deepcopy(rows[3]))


def _duplicate_in_place(rows):
    rows.insert(5, copy.deepcopy(rows[4]))


def _move(rows):
    rows.insert(2, rows.pop(6))


def _drop_trailer(rows):
    return None


FILES = [
    ("intact", lambda rows: None, set()),
    ("an exact duplicate line at the end", _duplicate_last, {(4, "nodeclaim-b", "duplicate")}),
    ("a duplicate line in place", _duplicate_in_place, {(5, "node-a", "duplicate")}),
    ("a line moved up", _move, {(3, "pod-web-1", "out-of-order")}),
    (
        "a line removed in the middle",
        _without(6),
        {(11, "pod-web-1", "deleted"), (None, "log", "missing")},
    ),
    ("the newest line removed", _without(12), {(None, "log", "missing"), (None, "node-*", "trailer")}),
    (
        "the newest pod event rewritten, its hash recomputed",
        lambda rows: rehash(_rename(rows, 11)),
        {(None, "pod-*", "trailer")},
    ),
]


@pytest.mark.parametrize(("change", "expected"), [c[1:] for c in FILES], ids=[c[0] for c in FILES])
def test_an_exported_file_names_a_duplicated_missing_or_moved_line(change, expected):
    rows = build()
    trailer = exported(rows)
    change(rows)
    chain = checked(rows, trailer)
    assert found(chain) == expected
    assert len(chain._rows) == len({r["position"] for r in rows})  # a duplicate is counted once


def test_a_file_without_its_trailer_or_with_lines_after_it_is_named():
    rows = build()
    assert found(checked(rows)) == {(None, "log", "missing")}
    chain = FileChain(COUNTED)
    for row in rows[:-1]:
        chain.feed(row)
    chain.end(exported(rows[:-1])["trailer"])
    chain.feed(rows[-1], 13)
    chain.end(exported(rows)["trailer"], 14)
    chain.finish()
    assert {p.detail for p in chain.problems} == {
        "line 13: an event after the trailer: appended",
        "line 14: a second trailer: lines appended",
        "the file holds 12 events, its trailer counts 11: lines added",
        "the file ends at position 12, its trailer at 11: lines appended",
    }
    assert {p.kind for p in chain.problems} == {"trailer"}


def test_an_edited_trailer_is_named_and_a_rewritten_one_needs_an_anchor():
    rows = build()
    trailer = exported(rows)
    trailer["trailer"]["events"] = 11
    trailer["trailer"]["digest"] = "0" * 64
    assert {p.detail.split(":")[0] for p in checked(rows, trailer).problems} >= {
        "the file holds 12 events, its trailer counts 11",
        "the trailer's `digest` does not match its own heads",
    }
    kept = anchored_at(rows)
    rows.pop()  # the newest line removed and the trailer written again: the file alone is consistent
    assert checked(rows, exported(rows)).problems == []
    assert {(p.stream, p.kind) for p in checked(rows, exported(rows), kept).problems} == {
        ("log", "anchor"),
        ("node-*", "anchor"),
    }


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "`trailer` must be an object"),
        ({"events": -1}, "trailer.events must be a count"),
        ({"events": 3}, "not a trailer: `pools` must be an object"),
        ({"events": 3, "pools": {}, "position": "12"}, "`position` must be a log position"),
        ({"events": 3, "pools": {}, "position": 3, "streams": {"pod": {"streams": 1}}}, "streams.pod must be"),
    ],
)
def test_a_malformed_trailer_is_an_error_naming_the_field(document, message):
    with pytest.raises(ValueError, match=message):
        FileChain(COUNTED).end(document)


# --- signatures -----------------------------------------------------------------------------------------


def _unsigned(rows):
    del rows[-1]["signature"]


def _random_signature(rows):
    rows[-1]["signature"] = Signer(KEY).key_id.hex() + "00" * 32


def _rewritten_keeping_its_signature(rows):
    old = rows[-1]["signature"]
    rehash(_rename(rows, 12))
    rows[-1]["signature"] = old


def _another_key(rows):
    rehash(rows, Signer(OTHER_KEY))


SIGNED = [
    ("intact", lambda rows: None, set()),
    ("an unsigned event appended", _unsigned, {(12, "node-b", "unsigned")}),
    ("a made-up signature", _random_signature, {(12, "node-b", "signature")}),
    ("a signature that is not hex", lambda rows: rows[-1].update(signature="zz"), {(12, "node-b", "signature")}),
    ("a signature cut short", lambda rows: rows[-1].update(signature="abcd"), {(12, "node-b", "signature")}),
    ("rewritten, its hash recomputed", _rewritten_keeping_its_signature, {(12, "node-b", "signature")}),
    ("every event signed with another key", _another_key, {(1, "nodepool-p", "signature")}),
]


@pytest.mark.parametrize(("change", "expected"), [c[1:] for c in SIGNED], ids=[c[0] for c in SIGNED])
def test_the_key_names_a_forged_or_unsigned_event(change, expected):
    signer = Signer(KEY)
    rows = build(signer=signer, signed_from=4)
    change(rows)
    trailer = exported(rows)  # the forger writes the trailer again: only the key tells
    assert found(checked(rows, trailer)) == set()  # without the key, signatures are not checked
    chain = checked(rows, trailer, signer=signer)
    assert found(chain) == expected
    if not expected:
        assert (chain.signatures.signed, chain.signatures.before) == (9, 3)


def test_a_key_given_to_a_log_nothing_signed_is_a_problem():
    rows = build()
    assert found(checked(rows, exported(rows), signer=Signer(KEY))) == {(None, "log", "unsigned")}


@settings(max_examples=50)
@given(st.binary(min_size=32, max_size=200), st.binary(max_size=64))
def test_the_signer_is_hmac_sha256(key, value):
    signer = Signer(key)
    assert signer.mac(value) == hmac.digest(key, value, "sha256")
    assert signer.sign(value) == signer.key_id + signer.mac(value) and len(signer.key_id) == 4
    assert pickle.loads(pickle.dumps(signer)).sign(value) == signer.sign(value)


def test_a_short_key_is_refused():
    with pytest.raises(ValueError, match="at least 32 bytes, not 31"):
        Signer(b"x" * 31)


# --- anchors read back ----------------------------------------------------------------------------------


def test_an_anchor_saved_before_streams_were_covered_still_checks_its_pools_and_position():
    rows = build()
    heads = checked(rows, require_trailer=False).at
    old = {k: v for k, v in heads.document().items() if k != "streams"}
    old["digest"] = Heads(heads.position, heads.pools, None).digest
    kept = read_heads(old)
    assert kept.streams is None
    assert compare(kept, heads, 12) == []
    assert {p.stream for p in compare(kept, heads, 11)} == {"log"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("position"), "`position` must be a log position"),
        (lambda d: d.update(position=-1), "`position` must be a log position"),
        (lambda d: d.update(streams=[]), "`streams` must be an object"),
        (lambda d: d["streams"]["pod"].update(heads="ab"), "streams.pod must be"),
        (lambda d: d["pools"]["p"].update(events=-1), r"pools\.p must be"),
        (lambda d: d["streams"]["pod"].update(streams=3), "does not match its content"),
    ],
)
def test_a_bad_anchor_is_an_error_naming_the_field(change, message):
    document = checked(build(), require_trailer=False).at.document()
    change(document)
    with pytest.raises(ValueError, match=message):
        read_heads(document)
