"""Disruption leaders killed with SIGKILL in the middle of a command, as real processes: a standby
takes the lock (it goes with the dead process's session) and finishes or cancels the command,
never both, and never launches a replacement or hands a candidate to termination twice.

The integration test stops a leader by cancelling its task inside one process; here the leader is
a process of its own, killed by pid, once the moment a decision is in the log and once while its
command waits for its replacement, so that a standby inherits a command in each of the steps
where it has something left to do."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from cli.audit import audit_database
from shared.store.eventstore import EventStore
from tests.e2e.processes import Service, System, bound_pods, environment, gone, wait_for
from tests.integration.test_disruption import pool, scenario, web

pytestmark = pytest.mark.timeout(300)
TERMINAL = ("DisruptionCompleted", "DisruptionCancelled")
APPLIED_AT = "30m"
"""When the drifting NodePool is applied: well after the processes are up (they take seconds to
start, minutes of the shared clock at 60x), so that the watcher sees the first version first."""


async def test_disruption_leaders_killed_mid_command_leave_it_to_a_standby_which_acts_once(
    tmp_path: Path, migrated_url: str, nats_server_url: str
) -> None:
    budgets = [{"nodes": "1", "reasons": ["Drifted"]}, {"nodes": "100%"}]
    v2 = pool(budgets=budgets, **{"disruption.consolidationPolicy": "WhenEmpty"})
    v2["spec"]["template"]["metadata"]["labels"] = {"team": "b"}  # both nodes drift, one at a time
    document = scenario(
        [pool(budgets=budgets, **{"disruption.consolidationPolicy": "WhenEmpty"})],
        [web(2)],
        [{"at": APPLIED_AT, "applyNodePool": v2}],
    )
    # A replacement takes two minutes of the clock to come up (2 s at 60x): a command waits for
    # it long enough to kill its leader in the middle of the wait.
    document["spec"]["cloud"] |= {"launchLatency": "1m", "registrationLatency": "1m"}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(document))
    env = environment(tmp_path, migrated_url, nats_server_url, f"disr{os.getpid()}", document["spec"]["start"])
    system = System(tmp_path, env)
    store = EventStore.connect(migrated_url, pool_size=2)
    killed: list[Service] = []
    try:
        system.start("sim", "--scenario", str(path))
        for name in ("relay", "watcher", "scheduler", "termination"):
            system.start(name)
        replicas = [system.start("disruption") for _ in range(3)]

        async def pool_applied() -> bool:
            return bool(await of_type(store, "NodePoolApplied"))

        await wait_for(pool_applied, 60, "the NodePool")
        first = (await of_type(store, "NodePoolApplied"))[0]["nodepool_object"]
        assert first["spec"]["template"]["metadata"]["labels"] == {"team": "a"}, (
            f"the services took longer than {APPLIED_AT} of the clock to start: no drift to see"
        )

        async def kill_the_leader_when(ready: Callable[[dict[str, bool]], list[str]], what: str) -> str:
            """SIGKILL the one leading replica once `ready` picks a decision under way from
            {decision: validated}; a standby leads next, and the decision ends."""
            chosen: list[tuple[Service, str]] = []

            async def found() -> bool:
                leading = leaders(replicas)
                picked = ready(await under_way(store)) if len(leading) == 1 else []
                chosen[:] = [(leading[0], picked[0])] if picked else []
                return bool(chosen)

            await wait_for(found, 90, what)
            ((leader, decision),) = chosen
            leader.kill()  # SIGKILL, by pid: its session, and with it the leader lock, goes
            assert gone(leader.process.pid)
            killed.append(leader)
            assert decision in await under_way(store), f"{decision} ended before its leader was killed"

            async def another_leads() -> bool:
                return len(leaders(replicas)) == 1

            await wait_for(another_leads, 20, "a standby to lead")

            async def ended() -> bool:
                return bool((await ends(store, [decision]))[decision])

            await wait_for(ended, 30, f"the new leader to finish or cancel {decision}")
            return decision

        await kill_the_leader_when(lambda going: list(going), "a decision in the log")
        waiting = await kill_the_leader_when(
            lambda going: [d for d, validated in going.items() if validated], "a command waiting for its replacement"
        )
        assert (await ends(store, [waiting]))[waiting] == ["DisruptionCompleted"]  # the standby finished it

        async def settled() -> bool:
            """Both drifted nodes handed over and gone, every pod running, no command under way."""
            completed = await of_type(store, "DisruptionCompleted")
            terminated = await of_type(store, "NodeClaimTerminated")
            return (
                len(completed) >= 2
                and len(terminated) >= 2
                and not await under_way(store)
                and await bound_pods(store) == 2
            )

        await wait_for(settled, 90, "both drifted nodes replaced")
        (last,) = leaders(replicas)
        assert last not in killed
    finally:
        system.stop()
    try:
        decided = await of_type(store, "DisruptionDecided")
        decisions = [d["decision_id"] for d in decided]
        assert len(decisions) == len(set(decisions)) >= 2
        ended = await ends(store, decisions)
        for decision in decisions:  # finished xor cancelled, and once
            assert len(ended[decision]) == 1, (decision, ended[decision])
        validated = Counter(d["decision_id"] for d in await of_type(store, "DisruptionValidated"))
        assert all(n == 1 for n in validated.values()), validated
        # The event has a fixed id, so it is recorded once however often a command is validated:
        # the replicas' own account of their attempts shows whether one was validated twice.
        attempts = validation_attempts(replicas)
        for decision in decisions:
            tries = attempts.get(decision, [])
            done = [result for _, result in tries if result is not None]
            assert len(done) <= 1, (decision, tries)  # carried out once, by one leader
            assert len({id(r) for r, _ in tries}) == len(tries), (decision, tries)  # a replica tries once
            assert all(r in killed for r, result in tries if result is None), (decision, tries)  # cut short by a kill
            if validated[decision]:
                assert tries, f"{decision} was validated, and no replica says it tried"
            if done == ["validated"]:
                assert validated[decision] == 1 and ended[decision] != ["DisruptionCancelled"], (decision, tries)
            if done == ["cancelled"]:
                assert ended[decision] == ["DisruptionCancelled"], (decision, tries)
        assert sum(len(t) for t in attempts.values()) >= 2  # the two drifted nodes' commands at least
        wanted = {d["decision_id"]: len(d["replacements"]) for d in decided}
        launched = Counter(d.get("replacement_for") for d in await of_type(store, "NodeClaimCreated"))
        assert all(launched[d] <= wanted[d] for d in decisions), launched
        deletions = Counter(d["nodeclaim"] for d in await of_type(store, "NodeClaimDeletionRequested"))
        assert len(deletions) >= 2 and all(n == 1 for n in deletions.values()), deletions
        result = await audit_database(migrated_url)
        assert result.replay.violations == [] and result.counters_match, (result.replay.violations, result.mismatches)
        for service in system.services:
            if service not in killed:
                assert "Traceback" not in service.log.read_text(), service.log.read_text()[-3000:]
    finally:
        await store.close()


def validation_attempts(replicas: list[Service]) -> dict[str, list[tuple[Service, str | None]]]:
    """Each replica's validation attempts, read from its log, by decision: the attempt's result,
    or None when the log ends before it (the replica was killed in the middle)."""
    found: dict[str, list[tuple[Service, str | None]]] = {}
    for replica in replicas:
        mine: dict[str, list[str | None]] = {}
        for line in replica.log.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if not isinstance(entry, dict) or "command-id" not in entry:
                continue
            if entry.get("message") == "validating disruption command":
                mine.setdefault(entry["command-id"], []).append(None)
            elif entry.get("message") == "validated disruption command":
                mine[entry["command-id"]][-1] = entry["result"]
        for decision, results in mine.items():
            found.setdefault(decision, []).extend((replica, result) for result in results)
    return found


def leaders(replicas: list[Service]) -> list[Service]:
    """The live replicas that say they lead."""
    return [r for r in replicas if r.process.poll() is None and r.metric("nodewright_disruption_leader") == 1]


async def of_type(store: EventStore, kind: str) -> list[dict]:
    return [d async for page in store.read_types([kind]) for _, d in page]


async def under_way(store: EventStore) -> dict[str, bool]:
    """Decisions whose stream has no end yet, oldest first: whether each is validated."""
    async with store.driver_connection() as raw:
        rows = await raw.fetch(
            "SELECT d.data->>'decision_id', EXISTS (SELECT 1 FROM events v WHERE v.stream_id = d.stream_id"
            " AND v.type = 'DisruptionValidated') FROM events d WHERE d.type = 'DisruptionDecided' AND NOT EXISTS"
            " (SELECT 1 FROM events t WHERE t.stream_id = d.stream_id AND t.type = ANY($1::text[]))"
            " ORDER BY d.position",
            list(TERMINAL),
        )
    return {r[0]: r[1] for r in rows}


async def ends(store: EventStore, decisions: list[str]) -> dict[str, list[str]]:
    """The end events on each decision's own stream, in log order."""
    async with store.driver_connection() as raw:
        rows = await raw.fetch(
            "SELECT d.data->>'decision_id', t.type FROM events d JOIN events t ON t.stream_id = d.stream_id"
            " WHERE d.type = 'DisruptionDecided' AND d.data->>'decision_id' = ANY($1::text[])"
            " AND t.type = ANY($2::text[]) ORDER BY t.position",
            decisions,
            list(TERMINAL),
        )
    found: dict[str, list[str]] = {d: [] for d in decisions}
    for decision, kind in rows:
        found[decision].append(kind)
    return found
