"""Replay and audit of a real log: the replay equals the live counters, a planted event is found,
and the JSONL export audits the same as the database. The CLI runs as a process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from cli.audit import audit_database, audit_file, export, fold_database, point_in_time
from shared.events.contracts import DisruptionCancelled
from shared.policy.audit import LogEntry, replay
from shared.store.eventstore import EventStore
from shared.store.migrate import head_revision
from tests.conftest import ROOT
from tests.factories import T0, applied, created, decided, failed, initialized, launched, new, terminated


async def workload(store: EventStore) -> None:
    """Two pools through a day: launches, a failure, initializations, disruptions, a cancel, terminations."""
    at = T0
    for pool, limits in (("web", {"nodes": "6", "cpu": "16"}), ("batch", {"cpu": "64"})):
        event = applied(
            pool, limits, budgets=[{"nodes": "50%"}, {"nodes": "0", "schedule": "0 9 * * 1-5", "duration": "1h"}]
        )
        await store.append(event.stream_id, None, [new(event, at)])
        await store.reserve_launch(
            [
                created(f"{pool}-{i}", pool, ("2", "8Gi"), ("4", "16Gi"), pods=[f"default/{pool}-pod-{i}"])
                for i in range(4)
            ],
            occurred_at=at,
            producer="scheduler",
        )
        for i in range(4):
            name = f"{pool}-{i}"
            lifecycle = [failed(name, pool)] if i == 3 else [launched(name, pool), initialized(name, pool)]
            for e in lifecycle:
                await store.append(e.stream_id, None, [new(e, at)])
        at += timedelta(hours=1)
        await store.reserve_disruption(
            decided(f"{pool}-d1", pool, "Empty", [f"{pool}-0"]), occurred_at=at, producer="disruption"
        )
        cancel = DisruptionCancelled(decision_id=f"{pool}-d1", nodepool=pool, reason="Empty", candidates=[f"{pool}-0"])
        await store.append(cancel.stream_id, None, [new(cancel, at)])
        await store.reserve_disruption(
            decided(f"{pool}-d2", pool, "Drifted", [f"{pool}-1"]), occurred_at=at, producer="disruption"
        )
        gone = terminated(f"{pool}-1", pool)
        await store.append(gone.stream_id, None, [new(gone, at)])


async def plant(store: EventStore, event, at, position_hint: str = "") -> None:
    """Write an event straight into the table, past every check (what a buggy writer might do)."""
    version = await store.stream_version(event.stream_id) + 1
    async with store.driver_connection() as raw:
        await raw.execute(
            "INSERT INTO events (event_id, stream_id, version, type, data, metadata, occurred_at)"
            " VALUES ($1, $2, $3, $4, $5::jsonb, '{}'::jsonb, $6)",
            uuid.uuid4(),
            event.stream_id,
            version,
            event.TYPE,
            json.dumps(event.payload()),
            at,
        )


def nodewright(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NODEWRIGHT_DATABASE_URL": url}
    exe = str(Path(sys.executable).parent / "nodewright")
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)


async def test_replay_equals_live_and_finds_nothing_wrong(store: EventStore, migrated_url: str):
    await workload(store)
    result = await audit_database(migrated_url)
    assert result.counters_match is True, result.mismatches
    assert result.replay.violations == []
    assert (result.replay.launches, result.replay.disruptions) == (8, 4)
    assert result.replay.events == await store.head_position()


async def test_audit_finds_a_planted_violation_and_the_counter_drift(store: EventStore, migrated_url: str):
    await workload(store)
    # web allows 6 nodes and has 2 (one launch failed, one node terminated); plant 5 past the checks
    for i in range(5):
        await plant(store, created(f"web-planted-{i}", "web"), T0 + timedelta(hours=3))
    result = await audit_database(migrated_url)
    assert [(v.stream, v.rule) for v in result.replay.violations] == [("nodeclaim-web-planted-4", "limits")]
    assert result.counters_match is False
    assert any("nodes live=2 replayed=7" in m for m in result.mismatches)


async def test_a_disruption_during_a_freeze_is_a_budget_violation(store: EventStore, migrated_url: str):
    await workload(store)
    monday_nine_thirty = T0.replace(hour=9, minute=30) + timedelta(days=7)
    await plant(store, decided("sneaky", "batch", "Drifted", ["batch-2"]), monday_nine_thirty)
    result = await audit_database(migrated_url, explain="nodeclaim-batch-2")
    (violation,) = result.replay.violations
    assert (violation.stream, violation.rule) == ("disruption-sneaky", "budget")
    assert "due to blocking budget" in violation.detail
    story = [c.text for c in result.replay.story]
    assert story[0].startswith("created in nodepool batch for 1 pending pod(s): default/batch-pod-2")
    assert "VIOLATION budget" in story[-1]


async def test_forged_forceful_decisions_are_named_from_the_database_and_the_file(
    store: EventStore, migrated_url: str, tmp_path
):
    """Claims' creation times reach the re-check of an `Expired` decision however the log is
    read: one process, split, or exported."""
    await workload(store)
    later = T0 + timedelta(hours=5)
    await plant(store, decided("early", "web", "Expired", ["web-2"]), later)  # 5h of 720h
    await plant(store, decided("shrink", "batch", "OverLimit", ["batch-2"]), later)  # batch has no limits.nodes
    await plant(store, decided("sly", "web", "Underutilized", ["web-0"], forceful=True), later)
    await plant(store, decided("due", "batch", "Expired", ["batch-0"]), T0 + timedelta(days=31))  # truly expired
    one = await audit_database(migrated_url, workers=1, explain="nodeclaim-web-2")
    found = [(v.stream, v.rule) for v in one.replay.violations]
    assert found == [
        ("disruption-early", "expired"),
        ("disruption-shrink", "over-limit"),
        ("disruption-sly", "budget"),
        ("disruption-sly", "forceful"),
    ]
    assert "web-2 is 5h old, its expireAfter 720h" in one.replay.violations[0].detail
    assert "VIOLATION expired" in one.replay.story[-1].text
    split = await audit_database(migrated_url, workers=2, explain="nodeclaim-web-2")
    assert split.to_json() == one.to_json()
    path = tmp_path / "log.jsonl"
    await export(migrated_url, path)
    assert audit_file(path, explain="nodeclaim-web-2").to_json()["violations"] == one.to_json()["violations"]


async def test_audit_from_jsonl_equals_audit_from_the_database(store: EventStore, migrated_url: str, tmp_path):
    await workload(store)
    await plant(store, created("web-extra", "web", ("64", "256Gi")), T0 + timedelta(hours=4))
    path = tmp_path / "log.jsonl"
    assert await export(migrated_url, path) == await store.head_position()
    from_db = (await audit_database(migrated_url, explain="nodeclaim-web-0")).to_json()
    from_file = audit_file(path, explain="nodeclaim-web-0").to_json()
    assert from_file["counters_match"] is None
    for key in ("events", "launches", "disruptions", "violations", "explain", "chain"):
        assert from_file[key] == from_db[key], key
    assert [p["kind"] for p in from_db["chain"]["problems"]] == ["unchained"]  # the planted event
    assert from_db["violations"][0]["rule"] == "limits"


async def test_the_cli_migrates_audits_explains_replays_and_exports(fresh_database_url: str, tmp_path):
    first = nodewright(fresh_database_url, "migrate")
    assert first.returncode == 0 and f"migrated from empty to revision {head_revision()}" in first.stdout, first.stderr
    again = nodewright(fresh_database_url, "migrate")
    assert again.returncode == 0 and "nothing to do" in again.stdout
    store = EventStore.connect(fresh_database_url)
    try:
        await workload(store)
    finally:
        await store.close()
    ok = nodewright(fresh_database_url, "audit", "--output", "json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    report = json.loads(ok.stdout)
    assert report == {
        "events": report["events"],
        "launches": 8,
        "disruptions": 4,
        "violations": [],
        "counters_match": True,
        "chain": {
            "problems": [],
            "digest": report["chain"]["digest"],
            "position": report["events"],
            "signatures": {"checked": False},
        },
    }
    story = nodewright(fresh_database_url, "audit", "--explain", "nodeclaim-web-1")
    assert story.returncode == 0
    assert "created in nodepool web for 1 pending pod(s): default/web-pod-1" in story.stdout
    assert "disrupted for Drifted by decision web-d2" in story.stdout
    assert "terminated" in story.stdout
    assert nodewright(fresh_database_url, "audit", "--explain", "nodeclaim-nobody").returncode == 2
    at = nodewright(fresh_database_url, "replay", "--at", (T0 + timedelta(minutes=30)).isoformat(), "-o", "json")
    assert at.returncode == 0, at.stderr
    view = json.loads(at.stdout)
    assert view["nodepools"]["web"]["nodes"] == 3 and view["nodepools"]["web"]["initialized"] == 3
    assert "batch" not in view["nodepools"]  # applied an hour later
    path = tmp_path / "log.jsonl"
    exported = nodewright(fresh_database_url, "events", "export", str(path))
    assert exported.returncode == 0 and f"exported {report['events']} events" in exported.stdout
    offline = nodewright("postgresql://nobody@127.0.0.1:1/none", "audit", "--from-file", str(path), "-o", "json")
    assert offline.returncode == 0
    assert json.loads(offline.stdout)["events"] == report["events"]
    assert json.loads(offline.stdout)["chain"] == report["chain"]  # the chain verifies without a database


async def test_the_cli_refuses_an_unmigrated_database(fresh_database_url: str):
    run = nodewright(fresh_database_url, "audit")
    assert run.returncode == 2
    assert "run `nodewright migrate`" in run.stderr


async def messy_log(store: EventStore) -> None:
    """The workload, plus what a split replay must route: events naming no pool, a pool the counter
    table does not know, a counted event without a pool, and a late event `replay --at` leaves out."""
    from shared.events.contracts import NodePoolRejected, PodPending

    await workload(store)
    for i in range(3):
        pod = PodPending(namespace="default", name=f"p{i}", requests={"cpu": "1"})
        await store.append(pod.stream_id, None, [new(pod, T0)])
    rejected = NodePoolRejected(nodepool="typo", errors=[{"path": "spec", "message": "bad"}])
    await store.append(rejected.stream_id, None, [new(rejected, T0)])
    await plant(store, created("ghost-0", "ghost"), T0)
    await plant(store, initialized("ghost-0", "ghost"), T0 + timedelta(days=3))
    nameless = created("nobody-0", "web").payload()
    del nameless["nodepool"]
    await plant(store, _Raw("nodeclaim-nobody-0", "NodeClaimCreated", nameless), T0)
    for i in range(6):  # web allows 6 nodes: the last ones break its limit
        await plant(store, created(f"web-late-{i}", "web"), T0 + timedelta(hours=5))


class _Raw:
    def __init__(self, stream_id: str, kind: str, data: dict) -> None:
        self.stream_id, self.TYPE, self.data = stream_id, kind, data

    def payload(self) -> dict:
        return self.data


@pytest.mark.parametrize("workers", [2, 3, 8])
async def test_an_audit_split_over_processes_equals_one_fold(store: EventStore, migrated_url: str, workers: int):
    await messy_log(store)
    one = await audit_database(migrated_url, explain="nodeclaim-web-late-5", workers=1)
    split = await audit_database(migrated_url, explain="nodeclaim-web-late-5", workers=workers)
    assert one.replay.violations, "the log must hold violations for this comparison to mean anything"
    assert {v.rule for v in one.replay.violations} >= {"limits", "payload", "nodepool"}
    assert split.to_json() == one.to_json()
    assert split.replay.events == one.replay.events == await store.head_position()
    at = T0 + timedelta(days=1)
    split_view = point_in_time((await fold_database(migrated_url, until=at, workers=workers))[0], at)
    assert split_view == point_in_time((await fold_database(migrated_url, until=at, workers=1))[0], at)
    assert split_view["nodepools"]["ghost"]["nodes"] == 1
    # the database path leaves `until` to PostgreSQL and skips decoding most times: same answer
    # as the plain in-memory fold of the whole log
    log = [
        LogEntry(e.position, e.stream_id, e.type, e.data, e.occurred_at)
        async for page in store.read_all()
        for e in page
    ]
    assert point_in_time(replay(log, until=at), at) == split_view
    explained = replay(log, explain="nodeclaim-web-late-5")
    assert [(c.position, c.text) for c in explained.story] == [
        (c["position"], c["text"]) for c in split.to_json()["explain"]["story"]
    ]


async def test_a_claim_seen_from_two_pools_makes_the_split_audit_fold_again_in_one_piece(
    store: EventStore, migrated_url: str
):
    await workload(store)
    await plant(store, terminated("web-2", "batch"), T0 + timedelta(hours=4))  # web's claim, ended as batch's
    await plant(store, created("web-0", "batch"), T0 + timedelta(hours=4))  # a name web already holds
    one = await audit_database(migrated_url, workers=1)
    split = await audit_database(migrated_url, workers=2)
    assert [v.rule for v in one.replay.violations] == ["lifecycle", "lifecycle"]
    assert "belongs to nodepool web" in one.replay.violations[0].detail
    assert split.to_json() == one.to_json()


async def test_an_audit_while_writers_go_on_sees_one_instant(store: EventStore, migrated_url: str):
    """The live counters, the log and the tallies come from one exported snapshot: appends
    during the audit never make the replay and the table disagree."""
    await workload(store)
    writing = True

    async def writer() -> None:
        i = 0
        while writing:
            claim = created(f"busy-{i}", "batch")
            await store.reserve_launch([claim], occurred_at=T0, producer="scheduler")
            for e in (launched(f"busy-{i}", "batch"), terminated(f"busy-{i}", "batch")):
                await store.append(e.stream_id, None, [new(e, T0)])
            i += 1

    task = asyncio.create_task(writer())
    try:
        for workers in (1, 2, 1, 2):
            await asyncio.sleep(0.05)
            result = await audit_database(migrated_url, workers=workers)
            assert result.counters_match is True, result.mismatches
            assert result.replay.violations == []
    finally:
        writing = False
        await task
    assert (await store.counters())["batch"].version > 20  # the writer did write meanwhile
