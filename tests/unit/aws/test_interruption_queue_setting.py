"""NODEWRIGHT_INTERRUPTION_QUEUE: a queue's name, or empty (interruptions are not handled)."""

from __future__ import annotations

import pytest

from shared.adapters.aws.queue import SqsQueue, queue_name

QUEUE = "nodewright-interruptions"


@pytest.mark.parametrize(
    ("env", "name"),
    [({}, None), ({"NODEWRIGHT_INTERRUPTION_QUEUE": "  "}, None), ({"NODEWRIGHT_INTERRUPTION_QUEUE": QUEUE}, QUEUE)],
)
def test_the_setting_names_the_queue(env, name):
    assert queue_name(env) == name


@pytest.mark.parametrize("value", [f"https://sqs.us-east-1.amazonaws.com/123456789012/{QUEUE}", "q" * 81])
def test_a_setting_that_is_not_a_queue_name_is_refused_naming_it(value):
    with pytest.raises(ValueError, match="NODEWRIGHT_INTERRUPTION_QUEUE must be the queue's name"):
        queue_name({"NODEWRIGHT_INTERRUPTION_QUEUE": value})


def test_a_named_queue_needs_a_region():
    with pytest.raises(ValueError, match="AWS_REGION"):
        SqsQueue.from_env({"NODEWRIGHT_INTERRUPTION_QUEUE": QUEUE})
    assert SqsQueue.from_env({}) is None
