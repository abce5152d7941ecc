"""What each level of the log's protection sees, against a real PostgreSQL (issue 38, item 4):
the chain alone, an anchor kept elsewhere (the heads of every stream as of its position) and
the signing key. Each tampering is done as a superuser would do it, and is named as the README
says, or (the chain alone, without an anchor or the key) not seen."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest

from cli.audit import audit_database, audit_file, export
from shared.events import contracts as c
from shared.policy.anchors import Heads, read_heads
from shared.policy.digests import Signer, event_key, linked, stored_payload_text
from shared.store.eventstore import EventStore
from tests.conftest import ROOT
from tests.factories import T0, new, terminated
from tests.integration.test_audit import workload
from tests.integration.test_log_integrity import as_maintenance, position_of
from tests.integration.test_log_roles import logins  # noqa: F401 (a fixture)

KEY, OTHER_KEY = b"s" * 40, b"o" * 40

Found = set[tuple[int | None, str, str]]


async def facts(store: EventStore) -> None:
    """Pods and nodes as the watcher records them: no pool counts them, and a node's deletion
    names no pool (an audit's parts split its stream)."""
    for pool in ("web", "batch"):
        for i in range(2):
            name = f"{pool}-{i}"
            for event in (
                c.NodeRegistered(node=name, provider_id=f"sim:///{name}", nodeclaim=name, nodepool=pool),
                c.NodeInitialized(node=name, nodeclaim=name, nodepool=pool),
            ):
                await store.append(event.stream_id, None, [new(event, T0)])
            for event in (
                c.PodPending(namespace="default", name=f"{name}-pod", requests={"cpu": "1"}),
                c.PodBound(namespace="default", name=f"{name}-pod", node=name),
            ):
                await store.append(event.stream_id, None, [new(event, T0)])
    gone = c.NodeDeleted(node="batch-1", nodeclaim="batch-1")
    await store.append(gone.stream_id, None, [new(gone, T0 + timedelta(hours=2))])


async def log(store: EventStore) -> None:
    await workload(store)
    await facts(store)


async def found(url: str, **kw) -> Found:
    result = await audit_database(url, **kw)
    return {(p.position, p.stream, p.kind) for p in result.chain}


def named(problems: Found) -> set[tuple[str, str]]:
    return {(stream, kind) for _, stream, kind in problems}


async def newest(store: EventStore, stream: str) -> int:
    return await position_of(store, stream, await store.stream_version(stream))


async def rewrite_rehashed(store: EventStore, stream: str, data: dict) -> int:
    """The stream's newest event given another payload and the hash the writer would have given
    it (form 3: linked to its stream's previous event): the chain cannot tell."""
    position = await newest(store, stream)
    async with store.driver_connection() as raw:
        row = await raw.fetchrow(
            "SELECT e.event_id, e.version, e.type, e.schema_version, e.metadata, e.occurred_at, p.hash AS previous"
            " FROM events AS e LEFT JOIN events AS p ON p.stream_id = e.stream_id AND p.version = e.version - 1"
            " WHERE e.position = $1",
            position,
        )
    content = event_key(row["event_id"], row["version"], row["schema_version"], row["occurred_at"])
    content += stored_payload_text(stream, row["type"], data, row["metadata"])
    await as_maintenance(
        store,
        "UPDATE events SET data = $1::jsonb, hash = $2 WHERE position = $3",
        args=(json.dumps(data), linked(row["previous"], content), position),
    )
    return position


# --- an anchor ----------------------------------------------------------------------------------------


async def _newest_pod_event_removed(store: EventStore) -> tuple[Found, set]:
    position = await newest(store, "pod-default/web-1-pod")
    await as_maintenance(store, f"DELETE FROM events WHERE position = {position}")
    return set(), {("pod-*", "anchor")}


async def _newest_node_event_removed(store: EventStore) -> tuple[Found, set]:
    """A node's deletion names no pool: no part of the audit counts it."""
    position = await newest(store, "node-batch-1")
    await as_maintenance(store, f"DELETE FROM events WHERE position = {position}")
    return set(), {("node-*", "anchor")}


async def _newest_pod_event_rewritten(store: EventStore) -> tuple[Found, set]:
    await rewrite_rehashed(store, "pod-default/batch-0-pod", {"namespace": "default", "name": "x", "node": "web-0"})
    return set(), {("pod-*", "anchor")}


async def _newest_claim_event_removed(store: EventStore) -> tuple[Found, set]:
    """A pool's newest counted event: its counter row tells, and the anchor names both."""
    position = await newest(store, "nodeclaim-batch-1")
    await as_maintenance(store, f"DELETE FROM events WHERE position = {position}")
    return {(None, "nodepool-batch", "pool-head")}, {("nodeclaim-*", "anchor"), ("nodepool-batch", "anchor")}


ANCHORED: list[tuple[str, Callable[[EventStore], Awaitable[tuple[Found, set]]]]] = [
    ("the newest event of a pod stream removed", _newest_pod_event_removed),
    ("the newest event of a node stream removed", _newest_node_event_removed),
    ("the newest event of a pod stream rewritten, its hash recomputed", _newest_pod_event_rewritten),
    ("the newest event of a claim removed", _newest_claim_event_removed),
]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("tamper", [t[1] for t in ANCHORED], ids=[t[0] for t in ANCHORED])
async def test_an_anchor_names_the_newest_event_of_any_stream_removed_or_rewritten(
    store: EventStore, migrated_url: str, tmp_path, tamper, workers: int
):
    await log(store)
    kept = tmp_path / "anchor.json"
    saved = await audit_database(migrated_url, settled=True, workers=workers)
    kept.write_text(json.dumps(saved.anchor()))
    anchored = read_heads(json.loads(kept.read_text()))
    late = terminated("web-2", "web")  # the log goes on after the anchor: that is no problem
    await store.append(late.stream_id, None, [new(late, T0 + timedelta(hours=3))])
    assert await found(migrated_url, anchored=anchored, workers=workers) == set()
    alone, expected = await tamper(store)
    assert await found(migrated_url, workers=workers) == alone  # without the anchor
    with_anchor = await found(migrated_url, anchored=anchored, workers=workers)
    assert with_anchor - alone == {(None, stream, kind) for stream, kind in expected}
    path = tmp_path / "log.jsonl"
    await export(migrated_url, path)
    offline = {(p.position, p.stream, p.kind) for p in audit_file(path, anchored=anchored).chain}
    assert offline == {p for p in with_anchor if p[2] != "pool-head"}  # the file has no counter rows


async def test_a_log_shorter_than_its_anchor_fails_it(store: EventStore, migrated_url: str, tmp_path):
    await log(store)
    anchored = (await audit_database(migrated_url, settled=True)).at
    last = anchored.position
    await as_maintenance(store, f"DELETE FROM events WHERE position > {last - 1}")
    problems = await audit_database(migrated_url, anchored=anchored)
    (cut,) = [p for p in problems.chain if p.stream == "log"]
    assert cut.kind == "anchor" and f"up to position {last}, but the log ends at position {last - 1}" in cut.detail


async def test_an_anchor_waits_for_a_transaction_that_may_still_commit_below_it(store: EventStore, migrated_url: str):
    """Positions commit out of order: an anchor taken while an append that drew a lower position
    is still open would not hold once it commits. The anchor's snapshot waits for it."""
    await log(store)
    pod = c.PodPending(namespace="default", name="late", requests={"cpu": "1"})
    event = new(pod, T0)
    content = event_key(event.event_id, 1, 1, T0) + stored_payload_text(pod.stream_id, pod.TYPE, pod.payload(), {})
    raw = await store.session_connection()
    try:
        open_append = raw.transaction()
        await open_append.start()
        held = await raw.fetchval(
            "INSERT INTO events (event_id, stream_id, version, type, data, occurred_at, hash, digest_form)"
            " VALUES ($1, $2, 1, $3, $4::jsonb, $5, $6, 3) RETURNING position",
            event.event_id,
            pod.stream_id,
            pod.TYPE,
            json.dumps(pod.payload()),
            T0,
            linked(None, content),
        )
        after = c.NodeDeleted(node="web-0", nodeclaim="web-0")
        (committed,) = await store.append(after.stream_id, None, [new(after, T0 + timedelta(hours=2))])
        assert committed > held
        with pytest.raises(TimeoutError, match="still open after 0 s: it may yet commit events below it"):
            async with store.settled_snapshot(timeout=0.2):
                pass
        unsettled = await audit_database(migrated_url)  # an audit without --save-anchor does not wait
        saving = asyncio.ensure_future(audit_database(migrated_url, settled=True))
        await asyncio.sleep(0.1)
        await open_append.commit()
        settled = (await saving).at
    finally:
        await raw.close()
    assert settled.position == committed
    assert await found(migrated_url, anchored=settled) == set()
    late = {p.stream for p in (await audit_database(migrated_url, anchored=unsettled.at)).chain}
    assert late == {"pod-*"}  # what an anchor at that position would have said once the append committed


# --- the signing key -----------------------------------------------------------------------------------


@pytest.fixture
async def signed(migrated_url: str):
    store = EventStore.connect(migrated_url, signing_key=KEY)
    yield store
    await store.close()


async def _appended_without_the_key(store: EventStore, url: str) -> Found:
    """A superuser with the code but not the key: the store computes the hash, the pool's head
    and the counters exactly as the services would."""
    forger = EventStore.connect(url)
    try:
        gone = terminated("web-2", "web")
        (position,) = await forger.append(gone.stream_id, None, [new(gone, T0 + timedelta(hours=5))])
    finally:
        await forger.close()
    return {(position, "nodeclaim-web-2", "unsigned")}


async def _appended_with_a_made_up_signature(store: EventStore, url: str) -> Found:
    ((position, stream, _),) = await _appended_without_the_key(store, url)
    made_up = Signer(KEY).key_id + os.urandom(32)
    await as_maintenance(store, "UPDATE events SET signature = $1 WHERE position = $2", args=(made_up, position))
    return {(position, stream, "signature")}


async def _rewritten_with_its_hash_recomputed(store: EventStore, url: str) -> Found:
    position = await rewrite_rehashed(
        store, "pod-default/web-0-pod", {"namespace": "default", "name": "x", "node": "y"}
    )
    return {(position, "pod-default/web-0-pod", "signature")}


async def _appended_with_another_key(store: EventStore, url: str) -> Found:
    other = EventStore.connect(url, signing_key=OTHER_KEY)
    try:
        gone = terminated("batch-2", "batch")
        (position,) = await other.append(gone.stream_id, None, [new(gone, T0 + timedelta(hours=5))])
    finally:
        await other.close()
    return {(position, "nodeclaim-batch-2", "signature")}


FORGED: list[tuple[str, Callable[[EventStore, str], Awaitable[Found]]]] = [
    ("appended with a recomputed hash, head and counters", _appended_without_the_key),
    ("the same, with a made-up signature", _appended_with_a_made_up_signature),
    ("a stream's newest event rewritten, its hash recomputed", _rewritten_with_its_hash_recomputed),
    ("appended with another key", _appended_with_another_key),
]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("forge", [f[1] for f in FORGED], ids=[f[0] for f in FORGED])
async def test_the_key_names_a_forged_event_that_passes_the_chain(
    signed: EventStore, migrated_url: str, tmp_path, forge, workers: int
):
    await log(signed)
    signer = Signer(KEY)
    clean = await audit_database(migrated_url, signer=signer, workers=workers)
    assert clean.chain == [] and clean.signatures == {
        "checked": True,
        "key_id": signer.key_id.hex(),
        "signed": clean.replay.events,
        "before_signing": 0,
    }
    expected = await forge(signed, migrated_url)
    assert await found(migrated_url, workers=workers) == set()  # the chain alone: nothing
    assert (await audit_database(migrated_url, workers=workers)).signatures == {"checked": False}
    assert await found(migrated_url, signer=signer, workers=workers) == expected
    path = tmp_path / "log.jsonl"
    await export(migrated_url, path)
    assert {(p.position, p.stream, p.kind) for p in audit_file(path, signer=signer).chain} == expected


async def test_events_before_signing_began_are_counted_as_such(store: EventStore, migrated_url: str):
    await workload(store)  # no key yet
    before = await store.head_position()
    assert await found(migrated_url, signer=Signer(KEY)) == {(None, "log", "unsigned")}  # nothing signed at all
    signing = EventStore.connect(migrated_url, signing_key=KEY)
    try:
        await facts(signing)
    finally:
        await signing.close()
    result = await audit_database(migrated_url, signer=Signer(KEY), workers=2)
    assert result.chain == []
    assert (result.signatures["before_signing"], result.signatures["signed"]) == (before, result.replay.events - before)


async def test_a_wrong_key_is_one_problem_naming_both_ids(signed: EventStore, migrated_url: str):
    await log(signed)
    wrong = Signer(OTHER_KEY)
    (problem,) = (await audit_database(migrated_url, signer=wrong)).chain
    assert problem.kind == "signature" and problem.position == 1
    assert f"signed with key id {Signer(KEY).key_id.hex()}, not with the key given (id {wrong.key_id.hex()})" in (
        problem.detail
    )


# --- as a user runs it ----------------------------------------------------------------------------------


def nodewright(url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    inherited = {k: v for k, v in os.environ.items() if k != "NODEWRIGHT_SIGNING_KEY"}
    environment = {**inherited, "NODEWRIGHT_DATABASE_URL": url, **env}
    exe = str(Path(sys.executable).parent / "nodewright")
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=ROOT, env=environment, timeout=120)


async def test_the_cli_saves_an_anchor_checks_it_and_verifies_signatures(
    signed: EventStore, migrated_url: str, tmp_path
):
    await log(signed)
    anchor, key = tmp_path / "anchor.json", tmp_path / "key"
    key.write_bytes(KEY + b"\n")
    saved = nodewright(migrated_url, "audit", "--save-anchor", str(anchor), "--key-file", str(key))
    assert saved.returncode == 0, saved.stdout + saved.stderr
    heads = read_heads(json.loads(anchor.read_text()))
    assert f"head digest: {heads.digest} (at position {heads.position})" in saved.stdout
    assert f"signatures: {heads.position} event(s) verified with key id {Signer(KEY).key_id.hex()}" in saved.stdout
    assert set(heads.streams) == {"nodepool", "nodeclaim", "disruption", "node", "pod"}
    unkeyed = nodewright(migrated_url, "audit")
    assert unkeyed.returncode == 0 and "signatures: not checked (no key" in unkeyed.stdout
    await _newest_pod_event_removed(signed)
    forged = await _appended_without_the_key(signed, migrated_url)
    assert nodewright(migrated_url, "audit").returncode == 0  # the chain alone sees neither
    checked = nodewright(migrated_url, "audit", "--anchor", str(anchor), NODEWRIGHT_SIGNING_KEY=KEY.decode())
    assert checked.returncode == 1
    assert "pod-* [anchor] pod streams: their heads as of position" in checked.stdout
    ((position, stream, _),) = forged
    assert f"#{position} {stream} [unsigned]" in checked.stdout
    assert KEY.decode() not in checked.stdout + checked.stderr


def test_an_old_anchor_without_streams_is_still_read():
    heads = Heads(12, {"web": (3, b"\x01" * 32)}, None)
    document = heads.document()
    assert "streams" not in document
    assert read_heads(document) == heads


# --- an exported file ------------------------------------------------------------------------------------


def _duplicated(lines: list[str]) -> None:
    lines.insert(-1, lines[10])  # an exact copy of a line, before the trailer


def _moved(lines: list[str]) -> None:
    lines.insert(5, lines.pop(20))


def _newest_removed(lines: list[str]) -> None:
    del lines[-2]


def _newest_and_trailer_removed(lines: list[str]) -> None:
    del lines[-2:]


EDITED = [
    ("a line duplicated", _duplicated, {"duplicate"}),
    ("a line moved", _moved, {"out-of-order"}),
    ("the newest line removed", _newest_removed, {"missing", "trailer"}),
    ("the newest line and the trailer removed", _newest_and_trailer_removed, {"missing"}),
]


@pytest.mark.parametrize(("edit", "kinds"), [e[1:] for e in EDITED], ids=[e[0] for e in EDITED])
async def test_an_edited_export_fails_its_audit_and_is_counted_once(
    store: EventStore, migrated_url: str, tmp_path, edit, kinds
):
    from cli import report as reporting

    await log(store)
    path = tmp_path / "log.jsonl"
    events = await export(migrated_url, path)
    before = audit_file(path)
    assert before.ok and before.replay.events == events
    lines = path.read_text().splitlines(keepends=True)
    edit(lines)
    path.write_text("".join(lines))
    result = audit_file(path)
    assert not result.ok and {p.kind for p in result.chain} == kinds
    summary, _, counted = reporting.from_file(path)
    distinct = len({json.loads(line).get("position") for line in lines} - {None})
    assert summary["events"] == len(counted) == result.replay.events == distinct
    assert summary["audit_ok"] is False


async def test_a_writer_login_signs_and_a_reader_login_saves_an_anchor_and_exports(
    migrated_url: str,
    logins: dict[str, str],  # noqa: F811 (the fixture imported above)
    tmp_path,
):
    """The roles of migration 0005: a writer inserts the signature as it inserts the hash; a
    reader draws the transaction id a settled anchor and an export wait on, and writes nothing."""
    writer = EventStore.connect(logins["w1"], signing_key=KEY)
    try:
        await log(writer)
    finally:
        await writer.close()
    signer = Signer(KEY)
    saved = await audit_database(logins["r"], settled=True, signer=signer)
    assert saved.ok and saved.signatures["signed"] == saved.replay.events == saved.position
    path = tmp_path / "log.jsonl"
    assert await export(logins["r"], path) == saved.position
    offline = audit_file(path, anchored=saved.at, signer=signer)
    assert offline.chain == [] and offline.digest == saved.digest
