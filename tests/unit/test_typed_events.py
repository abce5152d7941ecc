"""The typed event flow: a recorded event is decoded once into its contract, the shared cluster
fold keeps pods and nodes as the three projections read them, each service's subscriptions come
from its handler tables, and docs/generated/events.md says what the code says."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from pydantic import ValidationError

from services.disruption.projection import PROJECTED as DISRUPTION
from services.scheduler.projection import PROJECTED as SCHEDULER
from services.termination.projection import PROJECTED as TERMINATION
from shared.events import contracts as c
from shared.events.decode import CLASSES, decode, dispatch, handled
from shared.events.envelope import Metadata, RecordedEvent
from shared.events.producers import PRODUCERS
from shared.events.registry import UnknownEventType
from shared.projections.cluster import STEPS, Cluster
from tests.factories import T0
from tools import events_table


def recorded(position: int, event: c.Event | tuple[str, dict]) -> RecordedEvent:
    kind, data = (event.TYPE, event.payload()) if isinstance(event, c.Event) else event
    at = T0 + timedelta(seconds=position)
    return RecordedEvent(position, uuid.uuid4(), f"x-{position}", 1, kind, 1, data, Metadata("t"), at, at)


# --- the decoder ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "attribute", "value"),
    [
        (c.PodPending(namespace="default", name="web-0", requests={"cpu": "500m"}), "requests", {"cpu": "500m"}),
        (c.PodBound(namespace="default", name="web-0", node="n1"), "node", "n1"),
        (c.NodeDeleted(node="n1", nodeclaim="c1"), "nodeclaim", "c1"),
        (c.NodeClaimTerminated(nodeclaim="c1", nodepool="a"), "reason", ""),
    ],
)
def test_a_recorded_event_decodes_into_its_contract(event: c.Event, attribute: str, value: object):
    decoded = decode(recorded(1, event))
    assert type(decoded) is type(event) and decoded == event and getattr(decoded, attribute) == value


def test_the_same_recorded_event_is_decoded_once():
    event = recorded(1, c.PodBound(namespace="default", name="web-0", node="n1"))
    assert decode(event) is decode(event)
    assert decode(recorded(1, c.PodBound(namespace="default", name="web-0", node="n1"))) is not decode(event)


@pytest.mark.parametrize(
    ("kind", "data", "error"),
    [
        ("PodBound", {"namespace": "default", "name": "web-0"}, ValidationError),  # no node
        ("PodBound", {"namespace": "default", "name": "web-0", "node": "n1", "extra": 1}, ValidationError),
        ("PodWhatever", {}, UnknownEventType),
    ],
)
def test_a_payload_that_breaks_its_contract_is_not_decoded(kind: str, data: dict, error: type[Exception]):
    with pytest.raises(error):
        decode(recorded(1, (kind, data)))


def test_dispatch_decodes_only_what_a_table_handles():
    seen: list[c.Event] = []
    steps = {c.PodBound: lambda p, e, r: seen.append(e)}
    assert dispatch(None, steps, recorded(1, ("PodWhatever", {}))) is None  # unknown and unread: not decoded
    assert dispatch(None, steps, recorded(2, c.NodeDeleted(node="n1"))) is None
    assert dispatch(None, steps, recorded(3, c.PodBound(namespace="d", name="p", node="n1"))) is not None
    assert [type(e) for e in seen] == [c.PodBound]
    assert handled(steps) == {"PodBound"} and set(CLASSES) == {k.TYPE for k in c.CONTRACTS}


# --- the shared cluster fold ---------------------------------------------------------------------

PENDING = c.PodPending(namespace="default", name="web-0", uid="u1", owner_kind="ReplicaSet")
BOUND = c.PodBound(namespace="default", name="web-0", uid="u1", node="n1")
AGAIN = c.PodBound(namespace="default", name="web-0", uid="u2", node="n2")  # a new pod of the same name


@pytest.mark.parametrize(
    ("events", "on_node", "pod"),
    [
        ([], {}, None),
        ([PENDING], {}, ("u1", None, "ReplicaSet", 0)),
        ([PENDING, BOUND], {"n1": ["default/web-0"]}, ("u1", "n1", "ReplicaSet", 1)),
        ([BOUND], {"n1": ["default/web-0"]}, ("u1", "n1", None, 1)),
        (
            [PENDING, BOUND, BOUND.model_copy(update={"node": "n3"})],
            {"n3": ["default/web-0"]},
            ("u1", "n3", "ReplicaSet", 2),
        ),
        ([PENDING, BOUND, AGAIN], {"n2": ["default/web-0"]}, ("u2", "n2", None, 1)),
        ([PENDING, BOUND, PENDING], {"n1": ["default/web-0"]}, ("u1", "n1", "ReplicaSet", 0)),
        ([PENDING, BOUND, c.PodDeleted(namespace="default", name="web-0")], {}, None),
        ([PENDING, BOUND, c.NodeDeleted(node="n1")], {}, ("u1", None, "ReplicaSet", 1)),
        ([BOUND, c.NodeDeleted(node="n2")], {"n1": ["default/web-0"]}, ("u1", "n1", None, 1)),
    ],
)
def test_the_cluster_fold_keeps_each_pod_where_it_runs(events: list[c.Event], on_node: dict, pod: tuple | None):
    """(uid, node, owner kind, PodBound facts since the last PodPending) after each history."""
    cluster = Cluster()
    for position, event in enumerate(events, 1):
        cluster.apply(recorded(position, event))
    assert {
        node: [p.key for p in cluster.pods_on(node)] for node in cluster.on_node if cluster.pods_on(node)
    } == on_node
    state = cluster.pods.get("default/web-0")
    assert (None if state is None else (state.uid, state.node, state.owner_kind, len(state.bound))) == pod


def test_the_cluster_fold_says_which_pods_an_event_removed_or_unbound():
    cluster = Cluster()
    cluster.apply(recorded(1, BOUND))
    cluster.apply(recorded(2, c.NodeRegistered(node="n1", provider_id="p", nodeclaim="c1")))
    assert cluster.nodes == {"n1": "c1"} and cluster.gone == ()
    cluster.apply(recorded(3, c.NodeDeleted(node="n1")))
    assert cluster.nodes == {} and [(p.key, p.node) for p in cluster.gone] == [("default/web-0", None)]
    cluster.apply(recorded(4, c.PodDeleted(namespace="default", name="web-0")))
    assert [p.key for p in cluster.gone] == ["default/web-0"] and cluster.pods == {}
    cluster.apply(recorded(5, c.NodeInitialized(node="n9")))
    assert cluster.gone == ()


def test_the_started_time_is_the_last_binding():
    cluster = Cluster()
    cluster.apply(recorded(1, PENDING))
    cluster.apply(recorded(7, BOUND))
    assert cluster.pods["default/web-0"].started_at == T0 + timedelta(seconds=7)


# --- subscriptions and the generated table -------------------------------------------------------


def test_each_projection_reads_the_cluster_fold_and_its_own_steps():
    assert handled(STEPS) <= SCHEDULER & DISRUPTION & TERMINATION
    assert {"DisruptionDecided", "PodDisruptionBudgetApplied"} <= DISRUPTION - SCHEDULER - TERMINATION
    assert {"NodeClaimDraining"} <= TERMINATION - SCHEDULER and "DaemonSetApplied" not in TERMINATION


def test_every_contract_has_a_producer():
    declared = {contract for appended in PRODUCERS.values() for contract in appended}
    assert declared == set(c.CONTRACTS)


def test_the_committed_events_table_is_what_the_code_says():
    assert events_table.TABLE.read_text() == events_table.render(), "run `python -m tools.events_table`"


def test_the_declared_producers_are_the_names_the_services_append_as():
    from services.disruption.service import PRODUCER as disruption
    from services.scheduler.service import PRODUCER as scheduler
    from services.termination.service import PRODUCER as termination
    from services.watcher.service import PRODUCER as watcher

    assert {watcher, scheduler, disruption, termination} | {"cli"} == set(PRODUCERS)
