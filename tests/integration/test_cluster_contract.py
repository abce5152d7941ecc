"""The `Cluster` port's contract (tests/cluster_contract.py) held against every implementation:
`KubeCluster` over the sim's API server (HTTPS, a bearer token), and the in-process double, each
over a world of its own built alike."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import pytest

from services.sim.api import core
from services.sim.api.rbac import User, Users
from services.sim.api.request import Request
from services.sim.api.server import ApiOptions, ApiServer
from services.sim.world import World
from shared.adapters.kube import KubeCluster, informer, kubeconfig_document, write_kubeconfig
from tests.cluster_contract import CASES, Harness, new_world
from tests.cluster_double import InProcessCluster

pytestmark = pytest.mark.timeout(60)
WATCH_SECONDS = 2
"""Watches the server ends this soon, so every case also crosses their reopening (bookmarks)."""


class WorldHost:
    """What the sim service is to its API server, over a bare world: requests answered under one
    lock, every write waking the watches."""

    def __init__(self, world: World) -> None:
        self.world, self.lock = world, asyncio.Lock()
        self.server: ApiServer | None = None

    async def api_request(self, request: Request) -> core.Response:
        async with self.lock:
            response = core.handle(self.world.cluster, request, self.world.now)
        if request.writes and self.server is not None:
            self.server.notify()
        return response

    def api_lock(self) -> asyncio.Lock:
        return self.lock

    def api_state(self) -> tuple[object, datetime]:
        return self.world.cluster, self.world.now


async def served_world(world: World, users: list[User]) -> ApiServer:
    host = WorldHost(world)
    server = host.server = ApiServer(host, ApiOptions(Users(users)))
    await server.start()
    return server


async def connect(server: ApiServer, folder: Path, name: str, token: str) -> KubeCluster:
    assert server.url is not None
    document = kubeconfig_document(server.url, {name: token}, certificate_authority=server.certificate)
    return await KubeCluster.connect(str(write_kubeconfig(folder / f"{name}.kubeconfig", document)))


@pytest.fixture
async def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    monkeypatch.setattr(informer, "WATCH_SECONDS", WATCH_SECONDS)
    world = new_world()
    server = await served_world(world, [User(name="contract", token="t-contract")])
    cluster = await connect(server, tmp_path, "contract", "t-contract")

    async def changed() -> None:
        server.notify()

    try:
        yield Harness(cluster, world, changed)
    finally:
        await cluster.close()
        await server.stop()


@pytest.fixture
async def double() -> AsyncIterator[Harness]:
    world = new_world()
    yield Harness(InProcessCluster(world), world)


@pytest.mark.parametrize("name", sorted(CASES))
async def test_kubecluster_over_the_sims_api_keeps_the_contract(kube: Harness, name: str) -> None:
    await CASES[name](kube)


@pytest.mark.parametrize("name", sorted(CASES))
async def test_the_in_process_double_keeps_the_contract(double: Harness, name: str) -> None:
    await CASES[name](double)
