"""The sim's Kubernetes API driven by the real kubectl, over a SimService on a real NATS: apply,
get (printer columns), explain, admission, patch, a delete a finalizer holds, events, 401 and
403; then a second sim replays the journal and holds what the API wrote."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest
import yaml

from services.sim.api.rbac import Users
from services.sim.api.server import ApiOptions
from services.sim.journal import Journal
from services.sim.service import SimService
from shared.api.scenario import parse_scenario
from shared.bus.connection import BusSettings
from shared.clock import ManualClock
from tests.conftest import nodepool_doc
from tests.factories import scenario_doc
from tests.sim_callers import provisioned

pytestmark = pytest.mark.timeout(90)
KUBECTL = str(Path(sys.executable).parent / "kubectl")
START = datetime(2026, 11, 23, 9, tzinfo=UTC)
SCENARIO = scenario_doc(
    "api",
    cloud={"instanceTypes": 20},
    nodePools=[nodepool_doc(**{"metadata.name": "general"})],
    workloads=[{"name": "web", "replicas": 2, "requests": {"cpu": "1"}}],
)
USERS = Users.parse(
    {
        "users": [
            {"name": "admin", "token": "admin-token"},
            {
                "name": "nodewright:watcher",
                "token": "watcher-token",
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
            },
        ]
    }
)
NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: batch}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]
  limits: {cpu: "100"}
---
apiVersion: v1
kind: Pod
metadata: {name: mine, labels: {app: mine}}
spec:
  containers:
  - {name: app, image: nginx, resources: {requests: {cpu: 250m, memory: 64Mi}}}
  - {name: side, image: busybox, resources: {requests: {cpu: 250m}}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: mine}
spec: {minAvailable: 1, selector: {matchLabels: {app: mine}}}
"""
INVALID = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: bad}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: []}]
"""
NODECLAIM = """
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: general-x1
  finalizers: [karpenter.sh/termination]
  labels:
    karpenter.sh/nodepool: general
    node.kubernetes.io/instance-type: m5.large
    karpenter.sh/capacity-type: spot
    topology.kubernetes.io/zone: zone-a
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements: []
"""
EVENT = """
apiVersion: v1
kind: Event
metadata: {name: mine.1}
involvedObject: {kind: Pod, name: mine, namespace: default}
reason: Nominated
message: Pod should schedule on nodeclaim general-x1
type: Normal
"""


class Kubectl:
    def __init__(self, folder: Path, url: str, certificate: bytes) -> None:
        self.folder, self.url, self.ca = folder, url, base64.b64encode(certificate).decode()

    def config(self, token: str) -> Path:
        path = self.folder / f"kubeconfig-{token}"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {"name": "sim", "cluster": {"server": self.url, "certificate-authority-data": self.ca}}
                    ],
                    "users": [{"name": "u", "user": {"token": token}}],
                    "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "u"}}],
                    "current-context": "sim",
                }
            )
        )
        return path

    def start(self, *args: str, token: str = "admin-token", stdin: str | None = None) -> Any:
        return asyncio.create_subprocess_exec(
            KUBECTL,
            f"--kubeconfig={self.config(token)}",
            f"--cache-dir={self.folder / 'cache'}",
            *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else None,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )

    async def __call__(self, *args: str, token: str = "admin-token", stdin: str | None = None) -> tuple[int, str, str]:
        process = await self.start(*args, token=token, stdin=stdin)
        out, err = await process.communicate(stdin.encode() if stdin is not None else None)
        return process.returncode, out.decode(), err.decode()


async def eventually(check, timeout: float = 20.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not (result := check()):
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)
    return result


def header(table: str) -> list[str]:
    return table.splitlines()[0].split()


async def test_kubectl_drives_the_sim_and_a_restarted_sim_resumes_what_it_wrote(nats_server_url: str, tmp_path: Path):
    await provisioned(nats_server_url)
    clock = ManualClock(START)
    world = f"api-{tmp_path.name}"[-90:]
    sim = SimService(parse_scenario(SCENARIO), clock, nats_server_url, world=world, api=ApiOptions(USERS))
    stopping = asyncio.Event()
    running = asyncio.create_task(sim.run(stopping, tick=0.05))
    try:
        await eventually(lambda: sim.api_url)
        kubectl = Kubectl(tmp_path, sim.api_url, sim.api.certificate)
        cluster = sim.world.cluster

        assert (await kubectl("apply", "-f", "-", stdin=NODEPOOL))[0] == 0
        assert (await kubectl("apply", "-f", "-", stdin=NODECLAIM))[0] == 0
        assert "batch" in cluster.nodepools and "default/mine" in cluster.pods and "default/mine" in cluster.pdbs
        clock.advance(timedelta(seconds=5))  # the sim's kube-scheduler finds no node for the user's pod
        await eventually(lambda: cluster.pods["default/mine"].unschedulable)

        rc, out, _ = await kubectl("get", "nodeclaims")
        assert rc == 0 and header(out) == ["NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"]
        assert out.splitlines()[1].split()[:4] == ["general-x1", "m5.large", "spot", "zone-a"]
        rc, out, _ = await kubectl("get", "nodepools")
        assert rc == 0 and header(out) == ["NAME", "NODECLASS", "NODES", "READY", "AGE"]
        assert [line.split()[0] for line in out.splitlines()[1:]] == ["batch", "general"]
        rc, out, _ = await kubectl("get", "pods")
        assert rc == 0 and header(out) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
        assert "mine 0/2 Pending" in " ".join(out.split())
        rc, out, _ = await kubectl("get", "pod", "mine", "-o", "json")
        pod = json.loads(out)
        assert [c["name"] for c in pod["spec"]["containers"]] == ["app", "side"]  # as the user sent it
        assert (pod["status"]["conditions"][0]["type"], pod["status"]["conditions"][0]["reason"]) == (
            "PodScheduled",
            "Unschedulable",
        )
        rc, out, _ = await kubectl("get", "nodes")
        assert rc == 0  # no node has registered: an empty list, said on stderr

        rc, out, _ = await kubectl("explain", "nodepool.spec.limits")
        assert rc == 0 and "FIELD: limits" in out and "KIND:       NodePool" in out

        version = cluster.resource_version
        rc, _, err = await kubectl("apply", "-f", "-", stdin=INVALID)
        assert rc != 0 and "spec.template.spec.requirements[0]" in err
        assert "requirements with operator 'In' must have a value defined" in err
        assert "bad" not in cluster.nodepools and cluster.resource_version == version  # nothing changed

        rc, _, _ = await kubectl(
            "patch", "nodepool", "batch", "--type", "merge", "-p", '{"spec":{"limits":{"cpu":"200"}}}'
        )
        assert rc == 0 and cluster.nodepools["batch"]["spec"]["limits"] == {"cpu": "200"}
        assert cluster.nodepools["batch"]["metadata"]["generation"] == 2

        deleting = await kubectl.start("delete", "nodeclaim", "general-x1", "--timeout=30s")
        await eventually(lambda: cluster.nodeclaim_deleting("general-x1"))
        await asyncio.sleep(0.3)
        assert deleting.returncode is None  # held by its finalizer
        rc, _, _ = await kubectl(
            "patch",
            "nodeclaim",
            "general-x1",
            "--type",
            "json",
            "-p",
            '[{"op":"remove","path":"/metadata/finalizers"}]',
        )
        assert rc == 0
        await asyncio.wait_for(deleting.wait(), 20)
        assert deleting.returncode == 0 and "general-x1" not in cluster.nodeclaims

        assert (await kubectl("create", "-f", "-", stdin=EVENT))[0] == 0
        rc, out, _ = await kubectl("get", "events")
        assert header(out) == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
        assert "Nominated pod/mine Pod should schedule on nodeclaim general-x1" in " ".join(out.split())

        rc, _, err = await kubectl("get", "pods", token="not-a-token")
        assert rc != 0 and "You must be logged in to the server (Unauthorized)" in err  # 401
        async with aiohttp.ClientSession() as http:  # anonymous: 401, a Status as JSON
            context = ssl.create_default_context(cadata=sim.api.certificate.decode())
            async with http.get(f"{sim.api_url}/api/v1/pods", ssl=context) as answer:
                assert (answer.status, answer.content_type) == (401, "application/json")
                assert (await answer.json())["reason"] == "Unauthorized"
            version = cluster.resource_version  # a watch of nodes hears pods move on as bookmarks, ends on time
            query = f"watch=1&resourceVersion={version}&allowWatchBookmarks=true&timeoutSeconds=2"
            headers = {"Authorization": "Bearer admin-token"}
            async with http.get(f"{sim.api_url}/api/v1/nodes?{query}", ssl=context, headers=headers) as answer:
                assert (await kubectl("label", "pod", "mine", "tier=web"))[0] == 0
                heard = [json.loads(line) async for line in answer.content]
            assert cluster.pods["default/mine"].labels == {"app": "mine", "tier": "web"}
            assert heard and {e["type"] for e in heard} == {"BOOKMARK"}
            assert set(heard[-1]["object"]) == {"kind", "apiVersion", "metadata"}
            assert int(heard[-1]["object"]["metadata"]["resourceVersion"]) > version
        rc, out, _ = await kubectl("get", "pods", token="watcher-token")
        assert rc == 0 and "mine" in out
        rc, _, err = await kubectl("get", "nodes", token="watcher-token")
        assert rc != 0 and 'User "nodewright:watcher" cannot list resource "nodes"' in err  # 403
        rc, _, err = await kubectl("delete", "pod", "mine", token="watcher-token")
        assert rc != 0 and "forbidden" in err and "default/mine" in cluster.pods
        seen = {
            "nodepools": dict(cluster.nodepools),
            "pods": sorted(cluster.pods),
            "pdbs": sorted(cluster.pdbs),
            "nodeclaims": dict(cluster.nodeclaims),
            "version": cluster.resource_version,
        }
    finally:
        stopping.set()
        await asyncio.wait_for(running, 15)

    again = SimService(parse_scenario(SCENARIO), ManualClock(START), nats_server_url, world=world)
    nc = await nats.connect(BusSettings.of(nats_server_url).url)
    try:
        again.replay(await Journal(nc.jetstream(), again.shell.names, world).read())
    finally:
        await nc.close()
    replayed = again.world.cluster
    assert {
        "nodepools": replayed.nodepools,
        "pods": sorted(replayed.pods),
        "pdbs": sorted(replayed.pdbs),
        "nodeclaims": replayed.nodeclaims,
        "version": replayed.resource_version,
    } == seen
    assert [c["name"] for c in replayed.pod_specs[replayed.pods["default/mine"].uid]["containers"]] == ["app", "side"]
