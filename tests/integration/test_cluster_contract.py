"""The `Cluster` port's contract (tests/cluster_contract.py) held against every implementation:
`KubeCluster` over the sim's API server, and the in-process double over the same kind of world."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.cluster_contract import CASES, Harness, new_world
from tests.cluster_double import InProcessCluster

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def double() -> AsyncIterator[Harness]:
    world = new_world()
    yield Harness(InProcessCluster(world), world)


@pytest.mark.parametrize("name", sorted(CASES))
async def test_the_in_process_double_keeps_the_contract(double: Harness, name: str) -> None:
    await CASES[name](double)
