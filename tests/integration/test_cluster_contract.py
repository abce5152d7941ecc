"""The `Cluster` port's contract (tests/cluster_contract.py) held against every implementation:
`KubeCluster` over the sim's API server (HTTPS, a bearer token), and the in-process double, each
over a world of its own built alike."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from services.sim.api import core
from services.sim.api.rbac import User, Users
from services.sim.api.request import Request
from services.sim.api.server import ApiOptions, ApiServer
from services.sim.inprocess import InProcessCluster
from services.sim.world import World
from services.watcher.nodeclasses import TERMINATION_FINALIZER as NODECLASS_FINALIZER
from shared.adapters.kube import KubeCluster, informer, kubeconfig_document, write_kubeconfig
from shared.adapters.kube.rbac import METHOD_RULES, SERVICE_CALLS, rules_for
from shared.api.core import Taint, TaintEffect
from shared.api.labels import TERMINATION_FINALIZER
from shared.ports.cluster import EC2NODECLASS, NODE, NODECLAIM, ClusterError, KubeEvent
from shared.runtime import tls
from tests.cluster_contract import CASES, Harness, new_world

pytestmark = pytest.mark.timeout(60)
WATCH_SECONDS = 2
"""Watches the server ends this soon, so every case also crosses their reopening (bookmarks)."""


class WorldHost:
    """What the sim service is to its API server, over a bare world: requests answered under one
    lock, every write waking the watches."""

    def __init__(self, world: World) -> None:
        self.world, self.lock = world, asyncio.Lock()
        self.server: ApiServer | None = None
        self.asked: set[tuple[str, str, str]] = set()
        """(apiGroup, resource[/subresource], verb) of every request, as RBAC judges it."""

    async def api_request(self, request: Request) -> core.Response:
        asked = core.attributes(request)
        resource = f"{asked.resource}/{asked.subresource}" if asked.subresource else asked.resource
        self.asked.add((asked.api_group, resource, asked.verb))
        async with self.lock:
            response = core.handle(self.world.cluster, request, self.world.now)
        if request.writes and self.server is not None:
            self.server.notify()
        return response

    def api_lock(self) -> asyncio.Lock:
        return self.lock

    def api_state(self) -> tuple[object, datetime]:
        return self.world.cluster, self.world.now


async def served_world(world: World, users: list[User]) -> tuple[ApiServer, WorldHost]:
    host = WorldHost(world)
    server = host.server = ApiServer(host, ApiOptions(Users(users)))
    await server.start()
    return server, host


async def connect(server: ApiServer, folder: Path, name: str, token: str, *, overlays: bool = False) -> KubeCluster:
    """`overlays`: the adapter informs NodeOverlays too (the `NodeOverlay` gate on)."""
    assert server.url is not None
    document = kubeconfig_document(server.url, {name: token}, certificate_authority=server.certificate)
    path = str(write_kubeconfig(folder / f"{name}.kubeconfig", document))
    return await KubeCluster.connect(path, overlays=overlays)


@pytest.fixture
async def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Harness]:
    monkeypatch.setattr(informer, "WATCH_SECONDS", WATCH_SECONDS)
    world = new_world()
    server, _ = await served_world(world, [User(name="contract", token="t-contract")])
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


async def _a_nodeclass_finalizer_holds_its_deletion(h: Harness) -> None:
    """Upstream's `karpenter.k8s.aws/termination` on an EC2NodeClass: a delete marks it, no new
    finalizer is taken then, and removing the last one lets it go."""
    h.world.cluster.create_custom(EC2NODECLASS, {**NODECLASS, "metadata": {"name": "default"}}, h.world.now)
    await h.changed()
    await h.cluster.add_finalizer(EC2NODECLASS, "default", NODECLASS_FINALIZER)
    await h.cluster.add_finalizer(EC2NODECLASS, "default", NODECLASS_FINALIZER)  # once is enough
    assert h.world.cluster.ec2nodeclasses["default"]["metadata"]["finalizers"] == [NODECLASS_FINALIZER]
    h.world.cluster.delete_custom(EC2NODECLASS, "default", h.world.now)  # kubectl delete
    await h.changed()
    await h.cluster.add_finalizer(EC2NODECLASS, "default", "example.com/f")  # refused while deleting: left
    marked = h.world.cluster.ec2nodeclasses["default"]["metadata"]
    assert marked["deletionTimestamp"] and marked["finalizers"] == [NODECLASS_FINALIZER]
    await h.cluster.remove_finalizer(EC2NODECLASS, "default", NODECLASS_FINALIZER)
    assert "default" not in h.world.cluster.ec2nodeclasses
    await h.cluster.remove_finalizer(EC2NODECLASS, "default", NODECLASS_FINALIZER)  # gone: done


async def test_kubecluster_holds_a_nodeclass_with_its_finalizer(kube: Harness) -> None:
    await _a_nodeclass_finalizer_holds_its_deletion(kube)


async def test_the_in_process_double_holds_a_nodeclass_with_its_finalizer(double: Harness) -> None:
    await _a_nodeclass_finalizer_holds_its_deletion(double)


# --- RBAC: what each method asks of the API, and what a service may ask ----------------------------

CLAIM = {"metadata": {"name": "general-x", "finalizers": [TERMINATION_FINALIZER]}, "spec": {}}
CONDITION = {
    "type": "Ready",
    "status": "True",
    "reason": "Ready",
    "message": "",
    "lastTransitionTime": "2026-11-23T09:00:00Z",
}
TAINT = Taint(key="example.com/t", effect=TaintEffect.NO_SCHEDULE)


async def _watching(cluster: KubeCluster, host: WorldHost) -> None:
    """A change followed, and every kind's watch opened (a kind's may open after another's
    first change came)."""
    after = (await cluster.snapshot()).resource_version
    stream = cluster.watch(after)
    await cluster.label_node("n-1", {"example.com/seen": "yes"})
    await asyncio.wait_for(anext(stream), 10)
    for _ in range(500):
        if len({a for a in host.asked if a[2] == "watch"}) >= len(METHOD_RULES["watch"]):
            break
        await asyncio.sleep(0.01)
    await stream.aclose()  # type: ignore[attr-defined]


CALLS: dict[str, Callable[[KubeCluster, World], Awaitable[object]]] = {
    "snapshot": lambda c, w: c.snapshot(),
    "taint": lambda c, w: c.taint("n-2", TAINT),
    "untaint": lambda c, w: c.untaint("n-1", "example.com/t"),
    "label_node": lambda c, w: c.label_node("n-2", {"example.com/l": "x"}),
    "annotate_nodeclaim": lambda c, w: c.annotate_nodeclaim("general-x", "general", {"example.com/a": "x"}),
    "evict": lambda c, w: c.evict(min(k for k in w.cluster.pods if "web" in k)),
    "delete_pod": lambda c, w: c.delete_pod(min(w.cluster.pods), grace_seconds=0),
    "delete_node": lambda c, w: c.delete_node("n-2"),
    "set_nodepool_condition": lambda c, w: c.set_nodepool_condition("general", CONDITION),
    "patch_nodepool_status": lambda c, w: c.patch_nodepool_status("general", {"nodes": 2}),
    "patch_nodeclass_status": lambda c, w: c.patch_nodeclass_status("default", {"instanceProfile": "p"}),
    "patch_nodeoverlay_status": lambda c, w: c.patch_nodeoverlay_status("half", {"conditions": []}),
    "get_nodeclass": lambda c, w: _nodeclass_read(c),
    "record_event": lambda c, w: _twice(c.record_event, KubeEvent(NODE, "n-1", "Normal", "Reason", "message")),
    "create_nodeclaim": lambda c, w: c.create_nodeclaim({**CLAIM, "metadata": {"name": "general-y"}}),
    "patch_nodeclaim_status": lambda c, w: c.patch_nodeclaim_status("general-x", {"nodeName": "n-1"}),
    "delete_nodeclaim": lambda c, w: c.delete_nodeclaim("general-x"),
    "add_finalizer": lambda c, w: _every(c.add_finalizer, "example.com/f"),
    "remove_finalizer": lambda c, w: _every(c.remove_finalizer, TERMINATION_FINALIZER),
}


OVERLAY = {
    "apiVersion": "karpenter.sh/v1alpha1",
    "kind": "NodeOverlay",
    "metadata": {"name": "half"},
    "spec": {"requirements": [{"key": "example.com/family", "operator": "Exists"}], "priceAdjustment": "-50%"},
}
NODECLASS = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": "default", "finalizers": [TERMINATION_FINALIZER]},
    "spec": {
        "role": "NodeRole",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
    },
}


async def _nodeclass_read(cluster: KubeCluster) -> None:
    found, missing = await cluster.get_nodeclass("default"), await cluster.get_nodeclass("absent")
    assert found is not None and found["spec"]["role"] == "NodeRole" and missing is None


async def _twice(record: Callable[[KubeEvent], Awaitable[None]], event: KubeEvent) -> None:
    await record(event)
    await record(event)  # the repeat: a PATCH of its count


async def _every(change: Callable[[str, str, str], Awaitable[None]], finalizer: str) -> None:
    """On each kind that takes a finalizer through the port: a Node, a NodeClaim, an EC2NodeClass."""
    await change(NODE, "n-1", finalizer)
    await change(NODECLAIM, "general-x", finalizer)
    await change(EC2NODECLASS, "default", finalizer)


def _expected(method: str) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for group, resource, verbs in METHOD_RULES[method] for verb in verbs}


@pytest.mark.parametrize("method", sorted(METHOD_RULES))
async def test_each_method_asks_exactly_what_its_rules_grant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """METHOD_RULES is what the adapter really requests: every rule used, and no request beyond."""
    monkeypatch.setattr(informer, "WATCH_SECONDS", WATCH_SECONDS)
    world = new_world()
    world.cluster.nodes["n-1"].finalizers.append(TERMINATION_FINALIZER)
    world.cluster.nodes["n-1"].taints.append(TAINT)
    world.cluster.create_custom(NODECLAIM, {"apiVersion": "karpenter.sh/v1", "kind": NODECLAIM, **CLAIM}, world.now)
    world.cluster.create_custom("EC2NodeClass", NODECLASS, world.now)
    world.cluster.create_custom("NodeOverlay", OVERLAY, world.now)
    server, host = await served_world(world, [User(name="all", token="t-all")])
    cluster = await connect(server, tmp_path, "all", "t-all", overlays=True)
    try:
        if method == "watch":
            await _watching(cluster, host)
            host.asked = {a for a in host.asked if a[2] == "watch"}  # its list and label are other methods'
        else:
            await CALLS[method](cluster, world)
        assert host.asked == _expected(method)
    finally:
        await cluster.close()
        await server.stop()


async def test_the_sim_refuses_a_service_what_its_rules_do_not_grant(tmp_path: Path) -> None:
    users = [User(name=s, token=f"t-{s}", rules=rules_for(s)) for s in SERVICE_CALLS]  # type: ignore[arg-type]
    server, _ = await served_world(new_world(), users)
    disruption = await connect(server, tmp_path, "disruption", "t-disruption")
    termination = await connect(server, tmp_path, "termination", "t-termination")
    try:
        with pytest.raises(ClusterError, match="403"):
            await disruption.taint("n-1", TAINT)
        with pytest.raises(ClusterError, match="403"):
            await termination.snapshot()
        await termination.taint("n-1", TAINT)  # granted
    finally:
        await disruption.close()
        await termination.close()
        await server.stop()


async def test_a_watch_outlives_a_restart_of_its_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The connection drops and the watches are opened again, with backoff, from where each was."""
    monkeypatch.setattr(informer, "WATCH_SECONDS", WATCH_SECONDS)
    world, users = new_world(), Users([User(name="all", token="t-all")])
    certificate = tls.self_signed("127.0.0.1", datetime.now(UTC))
    first = ApiServer(WorldHost(world), ApiOptions(users, tls=certificate))
    await first.start()
    assert first.url is not None
    port = int(first.url.rsplit(":", 1)[1])
    cluster = await connect(first, tmp_path, "all", "t-all")
    second: ApiServer | None = None
    try:
        stream = cluster.watch((await cluster.snapshot()).resource_version)
        await cluster.label_node("n-1", {"example.com/before": "yes"})
        assert (await asyncio.wait_for(anext(stream), 10)).key == "n-1"
        await first.stop()
        host = WorldHost(world)
        second = host.server = ApiServer(host, ApiOptions(users, port=port, tls=certificate))
        await second.start()
        await cluster.label_node("n-2", {"example.com/after": "yes"})
        change = await asyncio.wait_for(anext(stream), 10)
        assert (change.key, change.object["labels"]["example.com/after"]) == ("n-2", "yes")
        await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await cluster.close()
        for server in (first, second):
            if server is not None:
                await server.stop()


async def test_a_watch_whose_server_stays_away_ends_as_an_outage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After its reconnects a watch raises the connection's error (an OSError, which every
    service rides out as an outage), rather than waiting for ever."""
    monkeypatch.setattr(informer, "WATCH_SECONDS", WATCH_SECONDS)
    monkeypatch.setattr(informer, "FIRST_BACKOFF", 0.01)
    server, _ = await served_world(new_world(), [User(name="all", token="t-all")])
    cluster = await connect(server, tmp_path, "all", "t-all")
    try:
        stream = cluster.watch((await cluster.snapshot()).resource_version)
        waiting = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.2)  # the watches are open
        await server.stop()
        with pytest.raises(OSError):
            await asyncio.wait_for(waiting, 10)
    finally:
        await cluster.close()
