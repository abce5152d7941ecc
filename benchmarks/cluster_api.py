"""Cluster API benchmark: the Kubernetes API adapter's informer beside a bare aiohttp client.

A server of the benchmark's own (a process of its own, serving pre-rendered bytes, so the
figures are the clients') holds 100,000 pods in the API's shape. Each client lists them in pages
of 500 and then follows a watch on which the server sends 10,000 pod changes per second for 10
seconds: `KubeCluster` (`snapshot()`, then `watch()`: every kind listed and watched, each object
flattened as docs/cluster-api.md says) and a bare aiohttp client that only reads the same pages
and lines and parses them with orjson. The figures are each client's CPU seconds (this process's,
steadier than wall time on shared cores) and the ratio adapter / bare. Goal: within 2x.

Run: `python -m benchmarks.cluster_api [--pods 100000] [--rate 10000] [--seconds 10] [--rounds 2]`.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from benchmarks._cpu import measured
from shared.adapters.kube import KubeCluster, kubeconfig_document, write_kubeconfig
from shared.runtime.servers import free_tcp_port

PAGE = 500
TICK = 0.01
"""The server sends a rate's worth of changes in batches this often."""
KINDS = (
    "/api/v1/nodes",
    "/apis/policy/v1/poddisruptionbudgets",
    "/apis/apps/v1/daemonsets",
    "/apis/karpenter.sh/v1/nodepools",
    "/apis/karpenter.sh/v1/nodeclaims",
)
PODS = "/api/v1/pods"


def pod(i: int, version: int) -> dict[str, Any]:
    """A Deployment's pod as the API serves it, bound and Running (managedFields left out)."""
    name = f"web-{i // 1000:03d}-{i:06d}"
    return {
        "metadata": {
            "name": name,
            "generateName": f"web-{i // 1000:03d}-",
            "namespace": f"team-{i % 20}",
            "uid": f"00000000-0000-4000-8000-{i:012d}",
            "resourceVersion": str(version),
            "creationTimestamp": "2026-11-23T09:00:00Z",
            "labels": {"app": f"web-{i // 1000:03d}", "pod-template-hash": "7d9f8b6c5d"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"web-{i // 1000:03d}-7d9f8b6c5d",
                    "uid": "11111111-2222-4333-8444-555555555555",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example/web:1.2.3",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "nodeName": f"node-{i // 50:05d}",
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "priority": 0,
            "enableServiceLinks": True,
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-23T09:00:01Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-23T09:00:09Z"},
            ],
            "hostIP": "10.0.0.1",
            "podIP": f"10.1.{i // 250 % 256}.{i % 250}",
            "startTime": "2026-11-23T09:00:01Z",
            "qosClass": "Burstable",
        },
    }


# --- the server (a process of its own) --------------------------------------------------------


def serve(port: int, pods: int, rate: int, seconds: float) -> None:
    items = [orjson.dumps(pod(i, i + 1)) for i in range(pods)]
    head = pods
    changes = int(rate * seconds)

    async def handle(request: web.Request) -> web.StreamResponse:
        watching = request.query.get("watch") == "true"
        if not watching:
            if request.path != PODS:
                return web.Response(body=b'{"kind":"List","metadata":{"resourceVersion":"%d"},"items":[]}' % head)
            start = int(request.query.get("continue") or 0)
            limit = int(request.query.get("limit") or pods)
            end = min(start + limit, pods)
            more = f',"continue":"{end}"' if end < pods else ""
            body = b'{"kind":"PodList","metadata":{"resourceVersion":"%d"%s},"items":[%s]}' % (
                head,
                more.encode(),
                b",".join(items[start:end]),
            )
            return web.Response(body=body, content_type="application/json")
        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)
        after = int(request.query.get("resourceVersion") or head)
        if request.path == PODS and after < head + changes:
            per_tick = max(int(rate * TICK), 1)
            started = time.monotonic()
            sent = after - head
            while sent < changes:
                batch = []
                for n in range(sent, min(sent + per_tick, changes)):
                    obj = pod(n % pods, head + n + 1)
                    obj["status"]["conditions"][1]["status"] = "True" if n % 2 else "False"
                    batch.append(orjson.dumps({"type": "MODIFIED", "object": obj}) + b"\n")
                sent += len(batch)
                await response.write(b"".join(batch))
                await asyncio.sleep(max(started + sent / rate - time.monotonic(), 0))
        await asyncio.sleep(float(request.query.get("timeoutSeconds") or 300))  # nothing more: held open
        return response

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    web.run_app(app, host="127.0.0.1", port=port, print=None, shutdown_timeout=0.1)


# --- the clients ------------------------------------------------------------------------------


async def bare(base: str, changes: int) -> tuple[float, float]:
    """CPU seconds to list every pod, then to follow `changes` pod changes: pages and lines
    parsed, nothing more."""
    async with aiohttp.ClientSession() as session:
        with measured() as listing:
            query: dict[str, str] = {"limit": str(PAGE)}
            while True:
                async with session.get(base + PODS, params=query) as answer:
                    body = orjson.loads(await answer.read())
                token = body["metadata"].get("continue")
                if not token:
                    break
                query = {"limit": str(PAGE), "continue": token}
            version = body["metadata"]["resourceVersion"]
        with measured() as following:
            params = {"watch": "true", "resourceVersion": version, "allowWatchBookmarks": "true"}
            seen = 0
            async with session.get(base + PODS, params=params, timeout=aiohttp.ClientTimeout()) as answer:
                async for line in answer.content:
                    orjson.loads(line)
                    seen += 1
                    if seen == changes:
                        break
    return listing.client, following.client


async def adapter(kubeconfig: str, changes: int) -> tuple[float, float]:
    cluster = await KubeCluster.connect(kubeconfig)
    try:
        with measured() as listing:  # the list made and released, as the bare client drops its pages
            after = (await cluster.snapshot()).resource_version
            await asyncio.sleep(0)  # asyncio lets go of the gathered lists one turn of the loop later
        with measured() as following:
            seen = 0
            stream = cluster.watch(after)
            async for _ in stream:
                seen += 1
                if seen == changes:
                    break
            await stream.aclose()  # type: ignore[attr-defined]
    finally:
        await cluster.close()
    return listing.client, following.client


async def wait_for(base: str) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(600):
            try:
                async with session.get(base + "/api/v1/nodes"):
                    return
            except aiohttp.ClientError:
                await asyncio.sleep(0.1)
    raise SystemExit(f"the benchmark's server at {base} did not come up")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, the same code path")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.pods, args.rate, args.seconds, args.rounds = 1_000, 2_000, 0.5, 1
    if args.serve:
        serve(args.serve, args.pods, args.rate, args.seconds)
        return
    changes = int(args.rate * args.seconds)
    print(f"{args.pods:,} pods listed, then {changes:,} pod changes at {args.rate:,}/s; CPU seconds of this process")
    for round_ in range(1, args.rounds + 1):
        port = free_tcp_port()
        base = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "benchmarks.cluster_api", "--serve", str(port)]
        command += ["--pods", str(args.pods), "--rate", str(args.rate), "--seconds", str(args.seconds)]
        server = subprocess.Popen(command)
        try:
            with tempfile.TemporaryDirectory() as home:
                kubeconfig = str(write_kubeconfig(f"{home}/config", kubeconfig_document(base, {"bench": "t"})))
                asyncio.run(wait_for(base))
                bare_list, bare_watch = asyncio.run(bare(base, changes))
                kube_list, kube_watch = asyncio.run(adapter(kubeconfig, changes))
        finally:
            server.kill()
            server.wait()
        print(
            f"round {round_}: list   bare {bare_list:.2f} s  adapter {kube_list:.2f} s  "
            f"ratio {kube_list / max(bare_list, 1e-9):.2f}x"
        )
        print(
            f"round {round_}: watch  bare {bare_watch:.2f} s  adapter {kube_watch:.2f} s  "
            f"ratio {kube_watch / max(bare_watch, 1e-9):.2f}x  "
            f"({kube_watch / changes * 1e6:.0f} us per change through the adapter)"
        )


if __name__ == "__main__":
    main()
