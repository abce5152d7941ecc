"""The scheduler with the sim and the watcher over a real NATS and PostgreSQL: a burst of pods
ends with every pod running and the audit clean; a pool's node limit holds exactly; a pass that
reaches its time bound launches what it planned and leaves the rest to the next."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from itertools import count

import pytest

from cli.audit import audit_database
from services.scheduler.service import SchedulerService
from services.sim.service import SimService
from shared.events import contracts as c
from tests.integration.world import World, burst, play, pods_running

pytestmark = pytest.mark.timeout(180)


async def test_a_200_pod_burst_ends_with_every_pod_running_and_the_audit_clean(store, migrated_url, bus):
    sim = await play(burst(200), bus, store, lambda s: pods_running(s, 200))
    nodes = sim.world.cluster.nodes.values()
    assert nodes and all(n.labels["karpenter.sh/nodepool"] == "burst" and n.labels["team"] == "a" for n in nodes)
    result = await audit_database(migrated_url)
    assert result.replay.violations == [] and result.counters_match, result.mismatches
    assert result.replay.launches == len(sim.world.cloud.instances)
    counters = (await store.counters())["burst"]
    assert counters.nodes == len(sim.world.cloud.running()) and counters.in_flight == 0


async def test_a_nodes_limit_holds_exactly_under_a_burst(store, migrated_url, bus):
    def limited(s: SimService) -> bool:
        return len(s.world.cloud.running()) >= 3 and all(
            s.world.cluster.nodes.get(i.request.nodeclaim) for i in s.world.cloud.running()
        )

    async with World(burst(200, {"nodes": "3"}), bus, store) as world:
        world.start_schedulers()
        await world.until(limited)
        (scheduler,) = world.schedulers
        passes = _passes(scheduler)
        # the world goes on: more passes, each with the pool full and pods waiting
        await world.until(lambda _: _passes(scheduler) >= passes + 3 and _sample(scheduler, UNPLACED) > 0)
        assert len(world.sim.world.cloud.instances) == 3  # never a fourth, however many pods wait
    sim = world.sim
    events = sim.world.cluster.events_about("Pod")
    failed = [e for e in events if e["reason"] == "FailedScheduling"]
    assert failed and all(e["type"] == "Warning" for e in failed)
    assert failed[0]["message"] == (
        'Failed to schedule pod, incompatible with nodepool "burst", node limits have been exhausted for nodepool'
    )
    nominated = {e["message"] for e in events if e["reason"] == "Nominated"}
    assert {f"Pod should schedule on: nodeclaim/{i.request.nodeclaim}" for i in sim.world.cloud.running()} <= nominated
    result = await audit_database(migrated_url)
    assert result.replay.violations == [] and result.counters_match


async def test_two_scheduler_replicas_never_give_a_pod_two_claims(store, migrated_url, bus):
    sim = await play(burst(120), bus, store, lambda s: pods_running(s, 120), replicas=2)
    created = [data async for page in store.read_types(["NodeClaimCreated"]) for _, data in page]
    pods = [pod for data in created for pod in data["pods"]]
    assert len(pods) == len(set(pods)) and len(created) == len(sim.world.cloud.instances)
    result = await audit_database(migrated_url)
    assert result.replay.violations == [] and result.counters_match


def cpu_type(sim: SimService, cpu: int = 4):
    return next(it for it in sim.world.cloud.catalog if it.cpu == cpu)


def claim_for(sim: SimService, name: str, cpu: int = 4, **fields) -> c.NodeClaimCreated:
    """A NodeClaim of the burst pool that only a `cpu`-core type of the catalog satisfies."""
    it = cpu_type(sim, cpu)
    return c.NodeClaimCreated(
        nodeclaim=name,
        nodepool="burst",
        instance_types=[c.InstanceTypeOption(name=it.name, capacity=it.capacity_strings())],
        requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [it.name]}],
        requests={"cpu": "1"},
        **fields,
    )


def ready(name: str):
    return lambda s: (node := s.world.cluster.nodes.get(name)) is not None and node.ready


async def types_of(store, stream: str) -> list[str]:
    return [e.type for e in await store.read_stream(stream)]


async def test_the_replacements_a_disruption_orders_are_launched(store, migrated_url, bus):
    async with World(burst(4), bus, store) as world:
        world.start_schedulers()
        await world.until(lambda s: pods_running(s, 4))

        async def counted_initialized(s: SimService) -> bool:  # what budgets count (docs/budgets.md)
            pool = (await store.counters()).get("burst")
            return pool is not None and pool.initialized == pool.nodes == len(s.world.cloud.running())

        await world.until(counted_initialized)
        candidate = world.sim.world.cloud.running()[0].request.nodeclaim
        decision = c.DisruptionDecided(
            decision_id="d1", nodepool="burst", reason="Drifted", candidates=[candidate], replacements=["burst-r1"]
        )
        replacement = claim_for(world.sim, "burst-r1", replacement_for="d1")
        await store.reserve_disruption(decision, [replacement], occurred_at=world.clock.now(), producer="test")

        async def replacement_initialized(s: SimService) -> bool:  # the node is ready before it is recorded
            return ready("burst-r1")(s) and "NodeClaimInitialized" in await types_of(store, "nodeclaim-burst-r1")

        await world.until(replacement_initialized)
    assert await types_of(store, "nodeclaim-burst-r1") == [
        "NodeClaimCreated",
        "NodeClaimLaunched",
        "NodeClaimRegistered",
        "NodeClaimInitialized",
    ]
    assert world.sim.world.cloud.running()[-1].instance_type.name == cpu_type(world.sim).name
    result = await audit_database(migrated_url)
    assert result.replay.violations == [] and result.counters_match, result.mismatches


async def test_claims_a_dead_leader_reserved_are_launched_once_or_adopted(store, migrated_url, bus):
    """One claim was reserved and never launched; the other was launched by the cloud, but the
    leader died before recording it. A new leader launches the first and adopts the second."""

    async def pool_applied(_: SimService) -> bool:
        return "burst" in await store.counters()

    async with World(burst(0), bus, store) as world:
        await world.until(pool_applied)
        orphan, adopted = claim_for(world.sim, "burst-orphan"), claim_for(world.sim, "burst-adopted")
        await store.reserve_launch([orphan, adopted], occurred_at=world.clock.now(), producer="scheduler")
        spec = {"nodeclaim": "burst-adopted", "nodepool": "burst", "requirements": adopted.requirements}
        instance = await world.client.create(spec)
        world.start_schedulers()
        await world.until(lambda s: ready("burst-orphan")(s) and ready("burst-adopted")(s))
        await asyncio.sleep(0.5)
    per_claim = [i.request.nodeclaim for i in world.sim.world.cloud.instances.values()]
    assert sorted(per_claim) == ["burst-adopted", "burst-orphan"]
    (launch,) = [e for e in await store.read_stream("nodeclaim-burst-adopted") if e.type == "NodeClaimLaunched"]
    assert launch.data["provider_id"] == instance["providerID"]
    result = await audit_database(migrated_url)
    assert result.replay.violations == [] and result.counters_match, result.mismatches


async def test_nodes_are_sized_for_their_daemonset_pods(store, migrated_url, bus):
    """A 1-cpu pod fits a 2-cpu type's allocatable, but not beside the agent's 1-cpu DaemonSet
    pod: the pass counts the overhead the watcher reported, so every pod and agent runs."""
    document = burst(6)
    requirement = document["spec"]["nodePools"][0]["spec"]["template"]["spec"]["requirements"][0]
    requirement["values"] = ["2", "4"]
    document["spec"]["daemonSets"] = [{"name": "agent", "requests": {"cpu": "1", "memory": "128Mi"}}]

    def all_running(s: SimService) -> bool:
        agents = [p for p in s.world.cluster.pods.values() if p.owner_name == "agent"]
        return pods_running(s, 6) and len(agents) == len(s.world.cluster.nodes) and all(p.node_name for p in agents)

    sim = await play(document, bus, store, all_running)
    assert {i.instance_type.cpu for i in sim.world.cloud.instances.values()} == {4}


async def test_a_leader_that_loses_its_lock_steps_down_and_leadership_is_taken_anew(store, migrated_url, bus):
    """The leader's lock connection is killed in the middle of a burst: a replica (either one)
    leads again on a new session, the burst completes, and no pod gets two claims."""
    async with World(burst(60), bus, store) as world:
        world.start_schedulers(2)

        async def some_claims(_: SimService) -> bool:
            return len([1 async for page in store.read_types(["NodeClaimCreated"]) for _ in page]) >= 1

        await world.until(some_claims)
        (leader,) = [s for s in world.schedulers if s.leading]
        killed = leader.lock.fence.pid
        async with store.driver_connection() as raw:
            assert await raw.fetchval("SELECT pg_terminate_backend($1)", killed)

        def led_anew(s: SimService) -> bool:
            return any(r.leading and r.lock.fence.pid != killed for r in world.schedulers)

        await world.until(lambda s: led_anew(s) and pods_running(s, 60))
    created = [data async for page in store.read_types(["NodeClaimCreated"]) for _, data in page]
    pods = [pod for data in created for pod in data["pods"]]
    assert len(pods) == len(set(pods)) and len(created) == len(world.sim.world.cloud.instances)
    result = await audit_database(migrated_url)
    assert result.replay.violations == [] and result.counters_match, result.mismatches


async def test_a_reclaimed_spot_instance_stops_counting_and_its_pods_get_a_new_node(store, migrated_url, bus):
    """The cloud reclaims a node's instance; the cloud's node controller deletes its Node, which
    termination (the finalizer's owner) finishes, or the garbage collection ends a claim whose
    Node went outright: either way its claim is recorded terminated, so a pool at its node limit
    can replace it and every pod runs again."""
    document = burst(6, {"nodes": "2"})
    requirement = document["spec"]["nodePools"][0]["spec"]["template"]["spec"]["requirements"][0]
    requirement["values"] = ["4"]  # 3 pods a node: the 6 need both nodes the limit allows
    document["spec"]["cloud"]["interruptions"] = [{"at": "10m", "capacityType": "spot", "count": 1}]

    async def replaced(s: SimService) -> bool:
        ended = [d async for page in store.read_types(["NodeClaimTerminated"]) for _, d in page]
        return bool(ended) and pods_running(s, 6) and len(s.world.cloud.running()) == 2

    async with World(document, bus, store) as world:
        world.start_schedulers()
        world.start_termination()
        await world.until(replaced)
    sim = world.sim
    (ended,) = [d async for page in store.read_types(["NodeClaimTerminated"]) for _, d in page]
    assert ended["reason"] in ("InstanceTerminated", "Manual")
    assert len(sim.world.cloud.instances) == 3  # the reclaimed one, the survivor, its replacement
    result = await audit_database(migrated_url)
    assert result.replay.violations == [] and result.counters_match, result.mismatches


async def test_a_pass_that_reaches_its_bound_launches_what_it_planned_and_the_rest_follow(store, migrated_url, bus):
    ticks = count()  # a clock that moves one second per look: each pass reaches its bound after 40 pods
    async with World(burst(200), bus, store) as world:
        world.start_schedulers(timeout=timedelta(seconds=40), monotonic=lambda: float(next(ticks)))
        await world.until(lambda s: pods_running(s, 200))
    (scheduler,) = world.schedulers
    assert scheduler.shell.registry.get_sample_value("nodewright_scheduler_pass_timeouts_total") >= 1
    result = await audit_database(migrated_url)
    assert result.replay.violations == [] and result.counters_match


async def test_a_burst_after_a_quiet_spell_is_planned_once_no_pod_came_for_the_idle_window(store, bus):
    """A scheduler idle for longer than its longest batch used to mark the projection changed on
    every tick while pods waited, so a burst never saw an idle window and always waited the
    longest one (10 s by default) instead of 1 s after its last pod."""
    idle, longest = timedelta(seconds=5), timedelta(minutes=2)
    document = burst(30)
    document["spec"]["timeline"][0]["at"] = "5m"  # after more than `longest` of nothing to do

    async def created(_: SimService) -> bool:
        return await _first_occurred(store, "NodeClaimCreated") is not None

    async with World(document, bus, store) as world:
        world.start_schedulers(idle=idle, longest=longest)
        await world.until(created)
    planned = await _first_occurred(store, "NodeClaimCreated")
    async with store.driver_connection() as raw:
        last_pod = await raw.fetchval("SELECT max(occurred_at) FROM events WHERE type = 'PodPending'")
    assert idle <= planned - last_pod < longest / 2, (planned, last_pod)


UNPLACED = "karpenter_scheduler_unschedulable_pods_count"


def _passes(scheduler: SchedulerService) -> float:
    return _sample(scheduler, "karpenter_scheduler_scheduling_duration_seconds_count")


def _sample(scheduler: SchedulerService, name: str) -> float:
    """The provisioner's series (upstream's `controller` label)."""
    return scheduler.shell.registry.get_sample_value(name, {"controller": "provisioner"}) or 0.0


async def _first_occurred(store, kind: str):
    async with store.driver_connection() as raw:
        return await raw.fetchval("SELECT min(occurred_at) FROM events WHERE type = $1", kind)
