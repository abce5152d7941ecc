"""What holds disruption back, end to end over a real NATS and PostgreSQL: the do-not-disrupt
annotation (on the pool's nodes, or on a pod), a PodDisruptionBudget allowing nothing, a budget
of one per pool across ten drifting pools (B25), a pod bound to a candidate during the 15 s
re-check, and a budget window in a local time zone across the fall-back of daylight saving.

The unit tests judge each rule alone; these check that the services carry them through: that a
block is said (`DisruptionBlocked` with its cause) while the nodes beside it still go."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from services.sim.cluster import Pod, PodTemplate
from shared.api.labels import DO_NOT_DISRUPT_ANNOTATION, HOSTNAME_LABEL
from shared.clock import AcceleratedClock
from shared.ports.cluster import NODE
from tests.factories import scenario_doc
from tests.integration.test_disruption import disruption_story, events_of, pool
from tests.integration.world import START, World

pytestmark = pytest.mark.timeout(300)
DO_NOT_DISRUPT = {DO_NOT_DISRUPT_ANNOTATION: "true"}
HELD, FREE = "held", "free"


def apart(app: str) -> dict:
    """Required anti-affinity: one pod of `app` per node."""
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOSTNAME_LABEL}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def side(name: str, *, labels: dict, annotations: dict | None = None, **spec) -> dict:
    doc = pool(name, **spec)
    doc["spec"]["template"]["metadata"] = {"labels": labels} | ({"annotations": annotations} if annotations else {})
    return doc


def document(pools: list[dict], workloads: list[dict], timeline: list[dict], **spec) -> dict:
    return scenario_doc(
        "blocks",
        duration="3h",
        cloud={"instanceTypes": 60, "launchLatency": "10s", "registrationLatency": "10s"},
        nodePools=pools,
        workloads=workloads,
        timeline=timeline,
        **spec,
    )


async def rows_of(store, types: list[str]) -> list[tuple[str, dict, datetime, int]]:
    """Events of these types in log order, with when they happened and their position."""
    async with store.driver_connection() as raw:
        rows = await raw.fetch(
            "SELECT type, data, occurred_at, position FROM events WHERE type = ANY($1::text[]) ORDER BY position",
            types,
        )
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def node_of(sim, pod_prefix: str) -> str | None:
    """The node of the one pod whose name starts with `pod_prefix` (a sim node is named after its
    claim); None while it is not there or not bound."""
    pods = [p for p in sim.world.cluster.pods.values() if p.name.startswith(pod_prefix)]
    if not pods:
        return None
    (pod,) = pods
    return pod.node_name


# --- 1 and 2: do-not-disrupt and a PodDisruptionBudget ----------------------------------------------


def held_and_free(*, node_annotations: dict | None = None, pod: dict | None = None) -> dict:
    """Two pools alike, each packing twelve 1-cpu pods on 16-cpu nodes, eleven of which go at 5m:
    the lone pod left is then on far too big a node, which consolidation replaces with a 2-cpu
    one (or deletes, its pod moving to another node of the pool). Only the `held` side carries
    the block (`node_annotations` on its pool's template, `pod` fields on its lone pod's
    workload)."""
    pools = [
        side(HELD, labels={"side": HELD}, annotations=node_annotations, cpus=("2", "16")),
        side(FREE, labels={"side": FREE}, cpus=("2", "16")),
    ]
    workloads = []
    for name in (HELD, FREE):
        selector = {"side": name}
        lone = {"name": f"lone-{name}", "replicas": 1, "requests": {"cpu": "1", "memory": "1Gi"}}
        workloads += [
            lone | {"nodeSelector": selector} | ((pod or {}) if name == HELD else {}),
            {
                "name": f"fill-{name}",
                "replicas": 11,
                "requests": {"cpu": "1", "memory": "1Gi"},
                "nodeSelector": selector,
            },
        ]
    timeline = [{"at": "5m", "scale": {"workload": f"fill-{name}", "replicas": 0}} for name in (HELD, FREE)]
    return document(pools, workloads, timeline)


async def play_held_and_free(doc: dict, bus, store) -> tuple[str, str, str]:
    """The nodes of the held and the free lone pods before the fill goes, and the held lone pod's
    key; the held one is checked to stay put to the end."""
    async with World(doc, bus, store) as world:
        world.start_schedulers()
        world.start_termination()
        world.start_disruption()

        def bound(sim) -> bool:  # and both lone pods bound: a loaded machine lags the simulated clock
            lone = (node_of(sim, f"lone-{HELD}-"), node_of(sim, f"lone-{FREE}-"))
            return sim.world.now > START + timedelta(minutes=4, seconds=30) and all(lone)

        await world.until(bound, seconds=90)
        held, free = node_of(world.sim, f"lone-{HELD}-"), node_of(world.sim, f"lone-{FREE}-")
        (key,) = [k for k, p in world.sim.world.cluster.pods.items() if p.name.startswith(f"lone-{HELD}-")]

        async def settled(sim) -> bool:  # a loaded machine lags the simulated clock: wait for the outcome too
            if sim.world.now <= START + timedelta(minutes=16):
                return False
            seen = {
                (t, d.get("nodeclaim")) for t, d in await events_of(store, ["DisruptionBlocked", "NodeClaimTerminated"])
            }
            return ("DisruptionBlocked", held) in seen and ("NodeClaimTerminated", free) in seen

        await world.until(settled, seconds=200)
        assert node_of(world.sim, f"lone-{HELD}-") == held  # never moved
        assert held in world.sim.world.cluster.nodes
    assert held and free
    return held, free, key


async def assert_held_and_free_went(store, held: str, free: str, cause: str, message: str) -> None:
    decisions, _, blocked = await disruption_story(store)
    # an empty node may be decided on before its lone pod binds on a loaded machine: the re-check
    # cancels that; no decision on it may stand
    cancelled = {d["decision_id"] for _, d in await events_of(store, ["DisruptionCancelled"])}
    assert all(held not in d["candidates"] for d in decisions if d["decision_id"] not in cancelled)
    said = [d for _, d in await events_of(store, ["DisruptionBlocked"]) if d.get("nodeclaim") == held]
    assert said and {d["cause"] for d in said} == {cause}
    assert all(d["node"] == held and d["nodepool"] == HELD and d["reason"] == "" for d in said)
    assert {d["message"] for d in said} == {message}
    assert blocked[cause] >= 1
    # the same situation without the block is consolidated: the free lone pod's node goes
    consolidated = [d for d in decisions if d["reason"] == "Underutilized" and free in d["candidates"]]
    assert consolidated and all(d["nodepool"] == FREE for d in consolidated)
    ended = {d["nodeclaim"] for _, d in await events_of(store, ["NodeClaimTerminated"])}
    assert free in ended and held not in ended


@pytest.mark.parametrize("where", ["node", "pod"])
async def test_do_not_disrupt_keeps_its_node_says_why_and_the_others_still_go(store, bus, where):
    if where == "node":  # every node of the held pool, through its template
        doc = held_and_free(node_annotations=DO_NOT_DISRUPT)
    else:  # only the node of the held lone pod
        doc = held_and_free(pod={"annotations": DO_NOT_DISRUPT})
    held, free, key = await play_held_and_free(doc, bus, store)
    if where == "node":
        message = 'Disruption is blocked through the "karpenter.sh/do-not-disrupt" annotation'
    else:
        message = f'Pod has "karpenter.sh/do-not-disrupt" annotation (Pod={key})'
    await assert_held_and_free_went(store, held, free, "DoNotDisrupt", message)
    if where == "node":  # no node of the annotated pool was ever a candidate
        decisions, _, _ = await disruption_story(store)
        assert all(d["nodepool"] != HELD for d in decisions)


@pytest.mark.parametrize("pdb", [{"maxUnavailable": 0}, {"minAvailable": 1}], ids=["maxUnavailable0", "minAvailable1"])
async def test_a_pdb_allowing_no_disruption_keeps_its_node_while_the_other_is_consolidated(store, bus, pdb):
    held, free, _ = await play_held_and_free(held_and_free(pod={"pdb": pdb}), bus, store)
    message = f"Pdb prevents pod evictions (PodDisruptionBudget=[default/lone-{HELD}])"
    await assert_held_and_free_went(store, held, free, "PodDisruptionBudget", message)


async def test_do_not_disrupt_holds_on_a_pod_that_bound_at_once_to_room_already_there(store, bus):
    """The lone pod comes at 2m, when the node of its eleven neighbours has room: it binds on the
    cluster scheduler's first try, so it is never Unschedulable and no PodPending carries its
    annotations; PodBound must."""
    doc = held_and_free(pod={"annotations": DO_NOT_DISRUPT})
    for workload in doc["spec"]["workloads"]:
        if workload["name"].startswith("lone-"):
            workload["replicas"] = 0
    doc["spec"]["timeline"] += [
        {"at": "2m", "scale": {"workload": f"lone-{name}", "replicas": 1}} for name in (HELD, FREE)
    ]
    held, free, key = await play_held_and_free(doc, bus, store)
    message = f'Pod has "karpenter.sh/do-not-disrupt" annotation (Pod={key})'
    await assert_held_and_free_went(store, held, free, "DoNotDisrupt", message)


# --- 3: B25, a budget of one in each of ten pools -----------------------------------------------------

POOLS = tuple(f"p{i}" for i in range(10))


def drifting(name: str, rev: str) -> dict:
    return side(
        name,
        labels={"pool": name, "rev": rev},
        budgets=[{"nodes": "1"}],
        cpus=("2",),
        **{"disruption.consolidationPolicy": "WhenEmpty"},
    )


async def test_b25_a_budget_of_one_in_each_of_ten_pools_drifts_one_node_per_pool_at_a_time(store, bus):
    doc = document(
        [drifting(name, "1") for name in POOLS],
        [
            {
                "name": f"w-{name}",
                "replicas": 3,
                "requests": {"cpu": "500m", "memory": "512Mi"},
                "nodeSelector": {"pool": name},
                "affinity": apart(f"w-{name}"),
            }
            for name in POOLS
        ],
        # late enough that a loaded machine has launched all thirty first (the premise)
        [{"at": "10m", "applyNodePool": drifting(name, "2")} for name in POOLS],
    )

    async def replaced() -> bool:
        return len(await events_of(store, ["DisruptionCompleted"])) >= 30

    async with World(doc, bus, store, speed=60) as world:  # thirty replacements: real time counts here
        world.start_schedulers()
        world.start_termination()
        world.start_disruption()
        await world.until(lambda sim: len(sim.world.cluster.nodes) == 30, seconds=90)
        first = set(world.sim.world.cluster.nodes)
        assert world.sim.world.now < START + timedelta(minutes=10), "launched after the drift: no premise"
        await world.until(lambda sim: replaced(), seconds=180)
        await world.until(lambda sim: not first & set(sim.world.cluster.nodes), seconds=60)
    rows = await events_of(store, ["DisruptionDecided", "DisruptionCancelled", "NodeClaimTerminated"])
    decided = [d for kind, d in rows if kind == "DisruptionDecided"]
    assert {d["reason"] for d in decided} == {"Drifted"}
    # A pass may decide on a moment's view (a pod's destination that is gone by the re-check, as
    # an over-provisioned empty node of the pool being removed); the re-check after the
    # validation delay (upstream's validation.go) then cancels it before it acts, and a later
    # pass decides again. Such a command never acts: it launches nothing and ends no node.
    cancelled = {d["decision_id"]: d["why"] for kind, d in rows if kind == "DisruptionCancelled"}
    assert all(why.endswith(": scheduling") for why in cancelled.values()), cancelled
    launched_for = {d.get("replacement_for") for _, d in await events_of(store, ["NodeClaimCreated"])}
    assert not launched_for & set(cancelled)
    decisions = [d for d in decided if d["decision_id"] not in cancelled]
    assert Counter(d["nodepool"] for d in decisions) == dict.fromkeys(POOLS, 3)
    assert all(d["decision"] == "replace" and len(d["replacements"]) == 1 for d in decisions)
    assert {c for d in decisions for c in d["candidates"]} == first
    # the first ten commands take one node of each pool, each with the pool's whole budget free
    assert sorted(d["nodepool"] for d in decided[:10]) == list(POOLS)
    assert all(d["budget_check"]["allowed"] == 1 and d["budget_check"]["remaining"] == 1 for d in decided)
    going: dict[str, set[str]] = defaultdict(set)
    most: Counter = Counter()
    for kind, d in rows:
        if kind == "DisruptionDecided" and d["decision_id"] not in cancelled:
            going[d["nodepool"]].update(d["candidates"])
        elif kind == "NodeClaimTerminated":
            going[d["nodepool"]].discard(d["nodeclaim"])
        most[d["nodepool"]] = max(most[d["nodepool"]], len(going[d["nodepool"]]))
    assert {most[name] for name in POOLS} == {1}


# --- 4: a pod bound to a candidate before the re-check --------------------------------------------------


def rebase(clock: AcceleratedClock, speed: float) -> None:
    """Change the shared clock's speed from now on, without a jump: every service reads it."""
    now = time.time()
    clock.start += timedelta(seconds=(now - clock.origin) * clock.speed)
    clock.origin, clock.speed = now, speed


async def first_of(store, kind: str, match, seconds: float) -> dict:
    """The first event of `kind` whose data `match` accepts, polled every 20 ms of wall time."""
    deadline = time.monotonic() + seconds
    while True:
        found = [d for _, d in await events_of(store, [kind]) if match(d)]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"no {kind} in time"
        await asyncio.sleep(0.02)


async def test_a_pod_bound_to_a_candidate_during_the_recheck_cancels_the_command(store, bus):
    doc = document(
        [pool(cpus=("2", "16"))],
        [{"name": "web", "replicas": 12, "requests": {"cpu": "1", "memory": "1Gi"}}],
        [{"at": "5m", "scale": {"workload": "web", "replicas": 1}}],
    )
    async with World(doc, bus, store) as world:
        world.start_schedulers()
        world.start_termination()
        world.start_disruption()
        decided = await first_of(store, "DisruptionDecided", lambda d: d["reason"] == "Underutilized", 60)
        # the 15 s wait is a quarter of a wall second at 60x: slowed down, the binding surely lands in it
        rebase(world.clock, 2)
        (claim,) = decided["candidates"]
        cluster = world.sim.world.cluster
        template = PodTemplate(
            labels={"app": "intruder"}, requests={"cpu": Decimal("0.1")}, node_selector={HOSTNAME_LABEL: claim}
        )
        cluster.add_pod(Pod("default", "intruder", template, "ReplicaSet", "intruder", world.sim.world.now))
        at = world.sim.world.now
        ours = decided["decision_id"]
        outcome = await first_of(store, "DisruptionCancelled", lambda d: d["decision_id"] == ours, 20)
        rebase(world.clock, 60)
        assert cluster.pods["default/intruder"].node_name == claim
        assert claim in cluster.nodes
        await world.until(lambda sim: sim.world.now > at + timedelta(minutes=2), seconds=30)
        said = [e for e in cluster.events_about(NODE, claim) if e["reason"] == "ConsolidationRejected"]
    assert outcome["candidates"] == [claim] and outcome["reason"] == "Underutilized"
    assert outcome["why"] == f"{claim}: changed since the decision: its stream moved"
    assert said and said[0]["type"] == "Warning"
    assert said[0]["message"].startswith(
        f"Consolidation rejected: Underutilized/{ours}, reason: changed since the decision: its stream moved"
    )
    rows = await rows_of(store, ["DisruptionDecided", "PodBound", "DisruptionCancelled", "DisruptionValidated"])
    positions, times = {}, {}
    for kind, d, occurred, position in rows:
        if d.get("decision_id") == ours or d.get("name") == "intruder":
            positions[(kind, d.get("name") or d["decision_id"])] = position
            times[kind] = occurred
    assert (
        positions[("DisruptionDecided", ours)]
        < positions[("PodBound", "intruder")]
        < positions[("DisruptionCancelled", ours)]
    )
    assert ("DisruptionValidated", ours) not in positions
    assert times["DisruptionCancelled"] - times["DisruptionDecided"] >= timedelta(seconds=15)  # at the re-check
    deletions = [d for _, d in await events_of(store, ["NodeClaimDeletionRequested"]) if d.get("decision_id") == ours]
    assert deletions == []
    assert not [d for _, d in await events_of(store, ["DisruptionCompleted"]) if d["decision_id"] == ours]


# --- 5: a budget window in America/Chicago across the fall-back of daylight saving ----------------------

CHICAGO = ZoneInfo("America/Chicago")
BEGIN = datetime(2026, 11, 1, 6, 40, tzinfo=UTC)  # 01:40 CDT; clocks go back at 07:00 UTC (02:00 CDT)
OPENS = datetime(2026, 11, 1, 1, 50, tzinfo=CHICAGO).astimezone(UTC)  # the first 01:50, CDT: 06:50 UTC
CLOSES = OPENS + timedelta(minutes=20)  # 07:10 UTC: 01:10 CST, after the change (in UTC: no wall-clock sum)


async def test_a_budget_in_a_local_time_zone_blocks_exactly_its_window_across_the_dst_change(store, bus):
    assert OPENS.astimezone(CHICAGO).utcoffset() != CLOSES.astimezone(CHICAGO).utcoffset()  # spans the change
    window = {"nodes": "0", "schedule": "50 1 * * *", "duration": "20m", "timeZone": "America/Chicago"}
    doc = document(
        [pool(budgets=[window], **{"disruption.consolidationPolicy": "WhenEmpty"})],
        [
            {"name": "base", "replicas": 1, "requests": {"cpu": "1", "memory": "1Gi"}},
            {"name": "web", "replicas": 2, "requests": {"cpu": "1", "memory": "1Gi"}, "affinity": apart("web")},
        ],
        [
            {"at": at, "scale": {"workload": "web", "replicas": replicas}}
            for at, replicas in (("3m", 0), ("8m", 2), ("12m", 0), ("32m", 2), ("36m", 0))
        ],
        start=BEGIN.isoformat(),
    )
    world = World(doc, bus, store)
    world.clock.start = BEGIN  # the harness starts at START; this scenario starts at BEGIN
    async with world:
        world.start_schedulers()
        world.start_termination()
        world.start_disruption()
        await world.until(lambda sim: sim.world.now > BEGIN + timedelta(minutes=39), seconds=90)
    rows = await rows_of(store, ["DisruptionDecided", "DisruptionBlocked"])
    decided = [(at, d) for kind, d, at, _ in rows if kind == "DisruptionDecided"]
    assert {d["reason"] for _, d in decided} == {"Empty"}
    times = [at for at, _ in decided]
    assert not [at for at in times if OPENS <= at < CLOSES]
    assert [at for at in times if at < OPENS]  # emptied at 3m
    # held since 12m, let go at once: within a few passes of the window's end (a second or so of
    # real time at 120x, for a loaded machine), long before web comes back at 32m
    soon = timedelta(minutes=3)
    assert [at for at in times if CLOSES <= at < CLOSES + soon]
    assert [at for at in times if at >= BEGIN + timedelta(minutes=36)]  # emptied at 36m
    assert all(d["budget_check"]["active_budgets"] == [] for _, d in decided)
    said = [
        at
        for kind, d, at, _ in rows
        if kind == "DisruptionBlocked" and d["cause"] == "Budget" and d["reason"] == "Empty"
    ]
    # said once as the window opened (in the log once per change, not every pass), not after it
    assert len(said) == 1 and OPENS <= said[0] < OPENS + soon
