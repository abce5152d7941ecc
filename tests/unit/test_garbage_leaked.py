"""Leaked instances (services.scheduler.garbage): an instance the cloud lists whose NodeClaim the
log does not hold is terminated once past upstream's 30-second grace; a claim's own instance,
and a young one, are left."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from services.scheduler.garbage import LEAK_GRACE, GarbageCollection, leaked
from shared.ports.cloud import CloudError, InstanceNotFound

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


def instance(claim: str | None, age: timedelta | None, pid: str = "aws:///us-east-1a/i-1") -> dict[str, Any]:
    return {
        "providerID": pid,
        "nodeclaim": claim,
        "launchedAt": None if age is None else (NOW - age).isoformat(),
    }


@pytest.mark.parametrize(
    ("found", "is_leaked"),
    [
        (instance("held", timedelta(hours=1)), False),
        (instance("launched", timedelta(hours=1)), False),  # the instance its launch recorded
        (instance("launched", timedelta(hours=1), "aws:///us-east-1b/i-2"), True),  # a second one
        (instance("launched", LEAK_GRACE - timedelta(seconds=1), "aws:///us-east-1b/i-2"), False),
        (instance("gone", timedelta(hours=1)), True),
        (instance("gone", LEAK_GRACE), True),
        (instance("gone", LEAK_GRACE - timedelta(seconds=1)), False),
        (instance(None, timedelta(minutes=5)), True),
        (instance("gone", None), False),
        ({**instance("gone", None), "launchedAt": "yesterday"}, False),
    ],
    ids=[
        "held",
        "its-own",
        "a-second",
        "a-young-second",
        "old",
        "at-grace",
        "young",
        "untagged",
        "no-launch-time",
        "bad-launch-time",
    ],
)
def test_leaked_rule(found, is_leaked):
    held = {"held": None, "launched": "aws:///us-east-1a/i-1"}
    assert leaked([found], held, NOW) == ([found] if is_leaked else [])


class Cloud:
    def __init__(self, refuse: dict[str, Exception] | None = None) -> None:
        self.deleted: list[str] = []
        self.refuse = refuse or {}

    async def delete(self, provider_id: str) -> dict[str, Any]:
        if provider_id in self.refuse:
            raise self.refuse[provider_id]
        self.deleted.append(provider_id)
        return {}


async def test_leaked_instances_are_terminated_and_refusals_left_for_later():
    cloud = Cloud({"aws:///z/i-3": CloudError("throttled"), "aws:///z/i-4": InstanceNotFound("gone")})
    projection = SimpleNamespace(claims={"held": SimpleNamespace(provider_id="aws:///z/i-1")}, orphaned=list)
    gc = GarbageCollection(None, projection, cloud, None, NOW)  # type: ignore[arg-type]  # only these are used
    old = timedelta(minutes=5)
    found = [
        instance("held", old, "aws:///z/i-1"),
        instance("lost", old, "aws:///z/i-2"),
        instance("lost2", old, "aws:///z/i-3"),
        instance("lost3", old, "aws:///z/i-4"),
        instance("young", timedelta(seconds=5), "aws:///z/i-5"),
    ]
    assert await gc.terminate_leaked(found, NOW) == ["aws:///z/i-2"]
    assert cloud.deleted == ["aws:///z/i-2"]
