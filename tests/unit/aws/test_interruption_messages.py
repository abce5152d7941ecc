"""Reading the interruption queue's EventBridge messages, as AWS documents their shapes (the EC2
spot, rebalance and state-change events, and AWS Health's scheduled changes), and what each
kind asks of the claim it names."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.aws.interruption import (
    NOTICES,
    Action,
    Kind,
    action,
    instance_id_of,
    parse,
    unavailable_offering,
)

SENT = "2026-11-27T10:15:00Z"


def envelope(detail_type: str, source: str, detail: Any, **extra: Any) -> str:
    return json.dumps(
        {
            "version": "0",
            "id": "7a4c6a7f-0b1e-4d5e-9e0c-2f1b9a0e1c11",
            "detail-type": detail_type,
            "source": source,
            "account": "123456789012",
            "time": SENT,
            "region": "us-east-1",
            "resources": ["arn:aws:ec2:us-east-1a:instance/i-0b662ef9931388ba0"],
            "detail": detail,
            **extra,
        }
    )


SPOT = envelope(
    "EC2 Spot Instance Interruption Warning",
    "aws.ec2",
    {"instance-id": "i-0b662ef9931388ba0", "instance-action": "terminate"},
)
REBALANCE = envelope("EC2 Instance Rebalance Recommendation", "aws.ec2", {"instance-id": "i-0b662ef9931388ba0"})


def health(service: str = "EC2", category: str = "scheduledChange", entities: Any = None) -> str:
    return envelope(
        "AWS Health Event",
        "aws.health",
        {
            "eventArn": "arn:aws:health:us-east-1::event/EC2/EC2_INSTANCE_RETIREMENT_SCHEDULED/abc",
            "service": service,
            "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
            "eventTypeCategory": category,
            "startTime": "Sat, 28 Nov 2026 10:00:00 GMT",
            "endTime": "Sat, 28 Nov 2026 12:00:00 GMT",
            "eventDescription": [{"language": "en_US", "latestDescription": "retirement"}],
            "affectedEntities": entities
            if entities is not None
            else [{"entityValue": "i-0aaa"}, {"entityValue": "i-0bbb"}],
        },
    )


def state(value: str) -> str:
    return envelope("EC2 Instance State-change Notification", "aws.ec2", {"instance-id": "i-0ccc", "state": value})


@pytest.mark.parametrize(
    ("body", "kind", "ids"),
    [
        (SPOT, Kind.SPOT_INTERRUPTION, ("i-0b662ef9931388ba0",)),
        (REBALANCE, Kind.REBALANCE_RECOMMENDATION, ("i-0b662ef9931388ba0",)),
        (health(), Kind.SCHEDULED_CHANGE, ("i-0aaa", "i-0bbb")),
        (state("stopping"), Kind.INSTANCE_STOPPED, ("i-0ccc",)),
        (state("stopped"), Kind.INSTANCE_STOPPED, ("i-0ccc",)),
        (state("shutting-down"), Kind.INSTANCE_TERMINATED, ("i-0ccc",)),
        (state("terminated"), Kind.INSTANCE_TERMINATED, ("i-0ccc",)),
        (state("Terminated"), Kind.INSTANCE_TERMINATED, ("i-0ccc",)),
    ],
)
def test_each_documented_message_is_read_into_its_kind_and_instances(body: str, kind: Kind, ids: tuple[str, ...]):
    message = parse(body)
    assert (message.kind, message.instance_ids, message.reason) == (kind, ids, "")
    assert message.time == datetime(2026, 11, 27, 10, 15, tzinfo=UTC)
    assert message.id == "7a4c6a7f-0b1e-4d5e-9e0c-2f1b9a0e1c11"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("", "the body is empty"),
        (None, "the body is empty"),
        ("{not json", "the body is not JSON"),
        ("[1, 2]", "the body is a JSON list, not an object"),
        (envelope("EC2 Fleet Error", "aws.ec2", {}), "'EC2 Fleet Error' from source 'aws.ec2'"),
        (SPOT.replace('"version": "0"', '"version": "1"'), "(version '1') is not an interruption"),
        (envelope("EC2 Spot Instance Interruption Warning", "aws.ec2", "x"), "detail must be an object"),
        (envelope("EC2 Spot Instance Interruption Warning", "aws.ec2", {}), "detail.instance-id must name"),
        (envelope("EC2 Instance Rebalance Recommendation", "aws.ec2", {"instance-id": 7}), "detail.instance-id"),
        (health(service="RDS"), "only EC2 scheduledChange events are acted on"),
        (health(category="issue"), "only EC2 scheduledChange events are acted on"),
        (health(entities="i-0aaa"), "detail.affectedEntities must list the instances"),
        (health(entities=[{"entityValue": 1}, "x"]), "affectedEntities names no instance"),
        (state("running"), "state 'running' is not acted on"),
        (state("pending"), "state 'pending' is not acted on"),
    ],
)
def test_anything_else_is_a_no_op_saying_why(body: str | None, why: str):
    message = parse(body)
    assert message.kind is Kind.NO_OP and message.instance_ids == ()
    assert why in message.reason


def test_an_unreadable_time_leaves_the_message_acted_on_without_one():
    body = json.loads(SPOT)
    for value in ("yesterday", 12, None):
        body["time"] = value
        message = parse(json.dumps(body))
        assert (message.kind, message.time) == (Kind.SPOT_INTERRUPTION, None)


@pytest.mark.parametrize(
    ("kind", "act", "notice"),
    [
        (Kind.SPOT_INTERRUPTION, Action.CORDON_AND_DRAIN, ("Warning", "SpotInterrupted")),
        (Kind.SCHEDULED_CHANGE, Action.CORDON_AND_DRAIN, ("Warning", "InstanceUnhealthy")),
        (Kind.INSTANCE_STOPPED, Action.CORDON_AND_DRAIN, ("Warning", "InstanceStopping")),
        (Kind.INSTANCE_TERMINATED, Action.CORDON_AND_DRAIN, ("Warning", "InstanceTerminating")),
        (Kind.REBALANCE_RECOMMENDATION, Action.NO_ACTION, ("Normal", "SpotRebalanceRecommendation")),
        (Kind.NO_OP, Action.NO_ACTION, None),
    ],
)
def test_what_each_kind_asks(kind: Kind, act: Action, notice: tuple[str, str] | None):
    assert action(kind) is act
    said = NOTICES.get(kind)
    assert (None if said is None else (said.type, said.reason)) == notice


@pytest.mark.parametrize(
    ("kind", "instance_type", "zone", "offering"),
    [
        (Kind.SPOT_INTERRUPTION, "m5.large", "us-east-1a", ("m5.large", "us-east-1a", "spot")),
        (Kind.SPOT_INTERRUPTION, None, "us-east-1a", None),
        (Kind.SPOT_INTERRUPTION, "m5.large", None, None),
        (Kind.SCHEDULED_CHANGE, "m5.large", "us-east-1a", None),
        (Kind.INSTANCE_TERMINATED, "m5.large", "us-east-1a", None),
        (Kind.REBALANCE_RECOMMENDATION, "m5.large", "us-east-1a", None),
    ],
)
def test_only_a_spot_interruption_makes_its_offering_unavailable(kind, instance_type, zone, offering):
    assert unavailable_offering(kind, instance_type, zone) == offering


@pytest.mark.parametrize(
    ("provider_id", "instance"),
    [
        ("aws:///us-east-1a/i-0b662ef9931388ba0", "i-0b662ef9931388ba0"),
        ("aws:///us-east-1a/i-0abc/", "i-0abc"),
        ("sim:///zone-a/n-1", None),
        ("aws:///us-east-1a/", None),
        ("", None),
        (None, None),
    ],
)
def test_the_instance_id_of_a_provider_id(provider_id: str | None, instance: str | None):
    assert instance_id_of(provider_id) == instance
