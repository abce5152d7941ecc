"""`DisruptionBlocked` as the disruption service says it: in the log once per change (a block
begins, its message changes, or it returns after it was lifted), as a Normal Kubernetes Event
while it lasts (on a NodePool once a minute, on a node once every two minutes)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from shared.disruption.candidates import UNSCHEDULABLE, Blocked
from shared.disruption.passes import BUDGET, NODE_HARD_LIMIT, PoolBlocked
from shared.ports.cluster import KubeEvent
from tests.factories import T0, applied
from tests.unit.test_nodeclaim_services import disruption_with, lifecycle


class Events:
    def __init__(self) -> None:
        self.sent: list[KubeEvent] = []

    async def record_event(self, event: KubeEvent) -> None:
        self.sent.append(event)


EMPTY = PoolBlocked("p", "Empty", BUDGET, "No allowed disruptions for disruption reason Empty due to blocking budget")
LIMIT = PoolBlocked("p", "Drifted", NODE_HARD_LIMIT, "a replacement would exceed the node hard limit")
PDB = Blocked("p-1", "p-1-node", "PDB", 'pdb "default/web" prevents pod evictions')
OTHER_PDB = Blocked("p-1", "p-1-node", "PDB", 'pdb "default/api" prevents pod evictions')
STUCK = Blocked("p-1", "p-1-node", UNSCHEDULABLE, "Cannot disrupt NodeClaim: pod default/x would not schedule")


def harness() -> tuple[Any, list[Any], Events]:
    service, _ = disruption_with([applied("p"), *lifecycle("p-1")])
    events = Events()
    service.recorder.cluster = events
    return service, service.store.appended, events


def recorded(appended: list[Any]) -> list[tuple[str, str, str]]:
    return [(e.data["cause"], e.data["reason"], e.data["message"]) for u in appended for a in u for e in a.events]


async def say(service: Any, at: timedelta, pools: list[PoolBlocked], nodes: list[Blocked], every: bool = True) -> None:
    await service._say(pools, nodes, T0 + at, every_pass=every)


async def test_a_block_is_recorded_once_while_it_lasts_and_again_when_its_message_changes():
    service, appended, _ = harness()
    for minute in range(10):
        await say(service, timedelta(minutes=minute), [EMPTY], [PDB])
    assert recorded(appended) == [(BUDGET, "Empty", EMPTY.message), ("PDB", "", PDB.message)]
    await say(service, timedelta(minutes=10), [EMPTY], [OTHER_PDB])
    assert recorded(appended)[-1] == ("PDB", "", OTHER_PDB.message)
    assert len(appended) == 3


async def test_a_block_lifted_and_back_is_a_change():
    service, appended, _ = harness()
    await say(service, timedelta(0), [EMPTY], [PDB])
    await say(service, timedelta(minutes=1), [], [])  # a pass that found neither: both lifted
    await say(service, timedelta(minutes=2), [EMPTY], [PDB])
    assert [cause for cause, _, _ in recorded(appended)] == [BUDGET, "PDB", BUDGET, "PDB"]


async def test_blocks_only_some_passes_look_for_are_not_taken_for_lifted():
    """A node limit a method met and a drift whose pods would not schedule are found only when
    that method runs, and a reservation's refusal only then: their absence says nothing."""
    service, appended, _ = harness()
    await say(service, timedelta(0), [LIMIT], [STUCK])
    await say(service, timedelta(minutes=1), [], [])
    await say(service, timedelta(minutes=2), [LIMIT], [STUCK])
    await say(service, timedelta(minutes=3), [EMPTY], [], every=False)  # a refused reservation's
    await say(service, timedelta(minutes=4), [EMPTY], [], every=False)
    assert [cause for cause, _, _ in recorded(appended)] == [NODE_HARD_LIMIT, UNSCHEDULABLE, BUDGET]


async def test_the_kubernetes_event_is_normal_and_repeats_at_upstreams_cadence():
    service, _, events = harness()
    for seconds in range(0, 241, 10):  # a pass every 10 s for four minutes
        await say(service, timedelta(seconds=seconds), [EMPTY], [PDB])
    on_pool = [e for e in events.sent if e.kind == "NodePool"]
    on_node = [e for e in events.sent if e.kind == "Node"]
    assert {e.type for e in events.sent} == {"Normal"} and {e.reason for e in events.sent} == {"DisruptionBlocked"}
    assert len(on_pool) == 5 and len(on_node) == 3  # at 0, 1, 2, 3, 4 minutes; at 0, 2, 4
    assert on_node[0].key == "p-1-node"


async def test_unconsolidatable_is_recorded_once_per_reason_and_told_every_15_minutes():
    service, appended, events = harness()
    for minute in range(0, 31, 1):
        await service._tell_unconsolidatable(
            {"p-1": "Can't replace with a cheaper node"}, [], T0 + timedelta(minutes=minute)
        )
    await service._tell_unconsolidatable(
        {"p-1": "Can't remove without creating 2 candidates"}, [], T0 + timedelta(minutes=31)
    )
    told = [(e.data["nodeclaim"], e.data["message"]) for u in appended for a in u for e in a.events]
    assert told == [("p-1", "Can't replace with a cheaper node"), ("p-1", "Can't remove without creating 2 candidates")]
    kinds = [(e.kind, e.type, e.reason) for e in events.sent]
    assert kinds.count(("NodeClaim", "Normal", "Unconsolidatable")) == 4  # at 0, 15, 30 and the change at 31
    assert kinds.count(("Node", "Normal", "Unconsolidatable")) == 4


async def test_a_node_a_command_takes_is_no_longer_unconsolidatable():
    service, appended, _ = harness()
    reason = {"p-1": "Can't replace with a cheaper node"}
    await service._tell_unconsolidatable(reason, [], T0)
    await service._tell_unconsolidatable({}, ["p-1"], T0 + timedelta(minutes=1))  # decided, then cancelled
    await service._tell_unconsolidatable(reason, [], T0 + timedelta(minutes=2))
    assert len(appended) == 2
