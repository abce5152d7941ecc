"""NodeClaim objects built from the log: the object a launch creates (labels, annotations,
finalizer, owner reference, spec from the template and the decision) and its status, condition
by condition, as each step of the log arrives; and disruption's judgments laid over it."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from shared.events import contracts as c
from shared.events.envelope import Metadata, RecordedEvent
from shared.kube.nodeclaims import READS, Judgment, NodeClaimRecords, nodeclaim_object, nodeclaim_status
from tests.conftest import nodepool_doc
from tests.factories import T0

POOL = "general"
CLAIM = "general-a1"
NODE = "ip-10-0-0-1"


def pool_applied(uid: str | None = "pool-uid") -> c.NodePoolApplied:
    doc = nodepool_doc(**{"metadata.name": POOL})
    if uid:
        doc["metadata"]["uid"] = uid
    template = doc["spec"]["template"]
    template["metadata"]["annotations"] = {"example.com/owner": "team-a"}
    template["spec"]["taints"] = [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}]
    template["spec"]["startupTaints"] = [{"key": "init", "effect": "NoSchedule"}]
    template["spec"]["terminationGracePeriod"] = "1h"
    return c.NodePoolApplied(nodepool=POOL, nodepool_object=doc, drift_hash="1234", drift_hash_version="nw1")


REQUIREMENTS = [
    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
    {"key": "example.com/rack", "operator": "In", "values": ["r1"]},
    {"key": "example.com/row", "operator": "In", "values": ["a", "b"]},  # not fixed: no label
    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["h1"]},  # restricted: no label
    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "m5.xlarge"]},
]
CREATED = c.NodeClaimCreated(
    nodeclaim=CLAIM,
    nodepool=POOL,
    instance_types=[c.InstanceTypeOption(name="m5.large", capacity={"cpu": "2"})],
    requirements=REQUIREMENTS,
    requests={"cpu": "1500m", "memory": "1Gi"},
)
LAUNCHED = c.NodeClaimLaunched(
    nodeclaim=CLAIM,
    nodepool=POOL,
    instance_type="m5.large",
    capacity={"cpu": "2", "memory": "8Gi", "pods": "110"},
    allocatable={"cpu": "1930m", "memory": "7Gi", "pods": "110"},
    provider_id="sim:///i-1",
    capacity_type="spot",
    zone="zone-a",
    labels={"kubernetes.io/arch": "amd64", "team": "cloud-says-b"},
)
REGISTERED = c.NodeClaimRegistered(nodeclaim=CLAIM, nodepool=POOL, node=NODE)
INITIALIZED = c.NodeClaimInitialized(nodeclaim=CLAIM, nodepool=POOL)


def fold(*events: c.Event, records: NodeClaimRecords | None = None) -> NodeClaimRecords:
    """The events one minute apart from T0 (the first at T0)."""
    records = records or NodeClaimRecords()
    for i, event in enumerate(events):
        at = T0 + timedelta(minutes=i)
        data = event.payload()
        records.apply(
            RecordedEvent(i + 1, uuid.uuid4(), event.stream_id, 1, event.TYPE, 1, data, Metadata("t"), at, at)
        )
    return records


def at(minutes: int) -> str:
    return (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_the_object_a_launch_creates_carries_upstreams_metadata_and_the_templates_spec():
    record = fold(pool_applied(), CREATED, LAUNCHED).claims[CLAIM]
    made = nodeclaim_object(record)
    assert made["apiVersion"] == "karpenter.sh/v1" and made["kind"] == "NodeClaim"
    meta = made["metadata"]
    assert meta["name"] == CLAIM
    assert meta["labels"] == {
        "karpenter.sh/nodepool": POOL,
        "team": "a",  # the template's own label wins over the cloud's
        "example.com/rack": "r1",  # a custom requirement fixed to one value
        "karpenter.k8s.aws/ec2nodeclass": "default",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "m5.large",
        "topology.kubernetes.io/zone": "zone-a",
        "karpenter.sh/capacity-type": "spot",
    }
    assert meta["annotations"] == {
        "example.com/owner": "team-a",
        "karpenter.sh/nodepool-hash": "1234",
        "karpenter.sh/nodepool-hash-version": "nw1",
    }
    assert meta["finalizers"] == ["karpenter.sh/termination"]
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "name": POOL,
            "uid": "pool-uid",
            "blockOwnerDeletion": True,
        }
    ]
    assert made["spec"] == {
        "requirements": REQUIREMENTS,
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "expireAfter": "720h",
        "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}},
        "taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}],
        "startupTaints": [{"key": "init", "effect": "NoSchedule"}],
        "terminationGracePeriod": "1h",
    }
    assert "status" not in made


def test_a_pool_without_a_uid_gives_no_owner_reference_the_api_would_refuse():
    record = fold(pool_applied(uid=None), CREATED, LAUNCHED).claims[CLAIM]
    assert "ownerReferences" not in nodeclaim_object(record)["metadata"]


def test_a_claim_keeps_the_template_it_was_made_from():
    changed = c.NodePoolApplied(nodepool=POOL, nodepool_object=nodepool_doc(**{"metadata.name": POOL}))
    record = fold(pool_applied(), CREATED, changed, LAUNCHED).claims[CLAIM]
    assert nodeclaim_object(record)["spec"]["terminationGracePeriod"] == "1h"


def summary(status: dict) -> list[tuple[str, str, str, str, str]]:
    return [(c["type"], c["status"], c["reason"], c["message"], c["lastTransitionTime"]) for c in status["conditions"]]


AWAITING = "object is awaiting reconciliation"


@pytest.mark.parametrize(
    ("events", "conditions"),
    [
        (
            [CREATED, LAUNCHED],
            [
                ("Registered", "Unknown", "NodeNotFound", "Node not registered with cluster", at(1)),
                ("Initialized", "Unknown", "AwaitingReconciliation", AWAITING, at(1)),
                ("Launched", "True", "Launched", "", at(2)),
                ("Ready", "Unknown", "ReconcilingDependents", "Registered=Unknown, Initialized=Unknown", at(1)),
            ],
        ),
        (
            [CREATED, LAUNCHED, REGISTERED],
            [
                ("Initialized", "Unknown", "NodeNotReady", "Node status is NotReady", at(1)),
                ("Launched", "True", "Launched", "", at(2)),
                ("Registered", "True", "Registered", "", at(3)),
                ("Ready", "Unknown", "ReconcilingDependents", "Initialized=Unknown", at(1)),
            ],
        ),
        (
            [CREATED, LAUNCHED, REGISTERED, INITIALIZED],
            [
                ("Launched", "True", "Launched", "", at(2)),
                ("Registered", "True", "Registered", "", at(3)),
                ("Initialized", "True", "Initialized", "", at(4)),
                ("Ready", "True", "Ready", "", at(4)),
            ],
        ),
        (  # a node NotReady later changes no condition upstream: Initialized, once True, stays
            [
                CREATED,
                LAUNCHED,
                REGISTERED,
                INITIALIZED,
                c.NodeClaimNotReady(nodeclaim=CLAIM, nodepool=POOL, node=NODE),
            ],
            [
                ("Launched", "True", "Launched", "", at(2)),
                ("Registered", "True", "Registered", "", at(3)),
                ("Initialized", "True", "Initialized", "", at(4)),
                ("Ready", "True", "Ready", "", at(4)),
            ],
        ),
        (
            [
                CREATED,
                LAUNCHED,
                REGISTERED,
                INITIALIZED,
                c.DisruptionDecided(decision_id="d1", nodepool=POOL, reason="Underutilized", candidates=[CLAIM]),
            ],
            [
                ("Launched", "True", "Launched", "", at(2)),
                ("Registered", "True", "Registered", "", at(3)),
                ("Initialized", "True", "Initialized", "", at(4)),
                ("DisruptionReason", "True", "Underutilized", "Underutilized", at(5)),
                ("Ready", "True", "Ready", "", at(4)),
            ],
        ),
    ],
)
def test_the_status_follows_the_log(events, conditions):
    record = fold(pool_applied(), *events).claims[CLAIM]
    assert summary(nodeclaim_status(record)) == conditions
    assert all(c["observedGeneration"] == 1 for c in nodeclaim_status(record)["conditions"])


def test_the_status_carries_what_the_launch_and_the_registration_found():
    record = fold(pool_applied(), CREATED, LAUNCHED, REGISTERED).claims[CLAIM]
    status = nodeclaim_status(record)
    assert status["providerID"] == "sim:///i-1"
    assert status["capacity"] == {"cpu": "2", "memory": "8Gi", "pods": "110"}
    assert status["allocatable"] == {"cpu": "1930m", "memory": "7Gi", "pods": "110"}
    assert status["nodeName"] == NODE
    assert "imageID" not in status  # the log's launch records none


DECIDED = c.DisruptionDecided(decision_id="d1", nodepool=POOL, reason="Drifted", candidates=[CLAIM, "other"])


@pytest.mark.parametrize(
    ("after", "marked"),
    [
        ([], True),
        ([c.DisruptionCancelled(decision_id="d1", nodepool=POOL, reason="Drifted", candidates=[CLAIM])], False),
        (
            [
                c.DisruptionValidated(
                    decision_id="d1", nodepool=POOL, reason="Drifted", kept=["other"], dropped={CLAIM: "x"}
                )
            ],
            False,
        ),
        (
            [
                c.DisruptionValidated(
                    decision_id="d1", nodepool=POOL, reason="Drifted", kept=[CLAIM], dropped={"other": "x"}
                )
            ],
            True,
        ),
        ([c.DisruptionCancelled(decision_id="d2", nodepool=POOL, reason="Empty", candidates=[CLAIM])], True),
    ],
)
def test_disruption_reason_lasts_while_its_command_holds_the_claim(after, marked):
    record = fold(pool_applied(), CREATED, LAUNCHED, REGISTERED, INITIALIZED, DECIDED, *after).claims[CLAIM]
    types = [c["type"] for c in nodeclaim_status(record)["conditions"]]
    assert ("DisruptionReason" in types) is marked


@pytest.mark.parametrize(
    ("events", "judgment", "added"),
    [
        (
            [CREATED, LAUNCHED],
            Judgment(drifted="NodePoolDrifted", drifted_since=T0 + timedelta(minutes=9)),
            [("Drifted", "True", "NodePoolDrifted", "NodePoolDrifted", at(9))],
        ),
        ([CREATED], Judgment(drifted="NodePoolDrifted", drifted_since=T0), []),  # not launched: never drifted
        (
            [CREATED, LAUNCHED, REGISTERED, INITIALIZED],
            Judgment(consolidatable_since=T0 + timedelta(minutes=30)),
            [("Consolidatable", "True", "Consolidatable", "", at(30))],
        ),
        ([CREATED, LAUNCHED, REGISTERED], Judgment(consolidatable_since=T0), []),  # not initialized
        ([CREATED, LAUNCHED, REGISTERED, INITIALIZED], Judgment(), []),
    ],
)
def test_disruptions_judgments_are_conditions_of_their_own(events, judgment, added):
    record = fold(pool_applied(), *events).claims[CLAIM]
    plain = summary(nodeclaim_status(record))
    judged = summary(nodeclaim_status(record, judgment))
    assert [c for c in judged if c not in plain] == added
    assert judged[-1] == plain[-1]  # Ready stands for the lifecycle alone, and comes last


def test_the_last_pod_event_is_said_when_disruption_knows_it():
    record = fold(pool_applied(), CREATED, LAUNCHED).claims[CLAIM]
    assert nodeclaim_status(record, Judgment(last_pod_event=T0))["lastPodEventTime"] == at(0)


@pytest.mark.parametrize(
    "end",
    [
        c.NodeClaimTerminated(nodeclaim=CLAIM, nodepool=POOL, reason="Drifted"),
        c.NodeClaimLaunchFailed(nodeclaim=CLAIM, nodepool=POOL, reason="InsufficientCapacity"),
    ],
)
def test_a_claim_that_ends_is_forgotten_and_said_ended(end):
    records = fold(pool_applied(), CREATED)
    assert records.take_changed() == ({CLAIM}, set())
    fold(end, records=records)
    assert CLAIM not in records.claims
    assert records.take_changed() == (set(), {CLAIM})


def test_every_event_the_fold_reads_is_a_contract():
    assert {contract.TYPE for contract in c.CONTRACTS} >= READS
