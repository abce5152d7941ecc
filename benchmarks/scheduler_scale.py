"""The scheduler service at scale: its projection of 10,000 nodes and 100,000 pods (80,000
running, 20,000 pending), and one pass over it as the service makes it.

The projection is folded from the facts the service reads (NodePoolApplied, NodeRegistered,
NodeInitialized, PodBound, PodPending), as its consumer folds them; the pass is the call
`Provisioner.plan_and_launch` makes (capacity, running pods, templates, the 400-type
catalog of `benchmarks.scheduling_shapes`), without the store and the cloud around it. Nodes: 16 vCPU,
64 GiB, 8 running pods each filling all but 1 vCPU and 8 GiB, one in ten of those pods with hostname
anti-affinity to its own app. Pending pods from 50 deployments: plain, zone spread and hostname
anti-affinity, 250m-1 vCPU. Printed: the resident memory once the projection is built, the
peak after the pass, and the pass's time (wall and CPU) with its outcome; the last line is JSON.
`--check` also runs the pass as it was before its indexes (the tests' oracle) on the same input
and says whether the plans are the same, and how long that pass took.

Run: `python -m benchmarks.scheduler_scale [--nodes 10000 --running 80000 --pending 20000]`.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from benchmarks.scheduling_shapes import catalog
from services.scheduler.projection import Projection
from shared.events import contracts as c
from shared.events.envelope import Metadata, RecordedEvent
from shared.scheduling.packing import schedule

T0 = datetime(2026, 11, 25, tzinfo=UTC)
ZONES = ("test-zone-1", "test-zone-2")
POOL = "default"
HOST, ZONE = "kubernetes.io/hostname", "topology.kubernetes.io/zone"


def _pool() -> c.NodePoolApplied:
    doc = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": POOL},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                }
            },
            "disruption": {"budgets": [{"nodes": "10%"}]},
        },
    }
    return c.NodePoolApplied(nodepool=POOL, nodepool_object=doc)


def _anti(app: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOST}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def facts(nodes: int, running: int, pending: int, seed: int = 11) -> list[c.Event]:
    rng = random.Random(seed)
    out: list[c.Event] = [_pool()]
    for i in range(nodes):
        name = f"node-{i:05d}"
        labels = {
            HOST: name,
            ZONE: ZONES[i % 2],
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "type-16",
            "karpenter.sh/nodepool": POOL,
        }
        allocatable = {"cpu": "16", "memory": "64Gi", "pods": "110"}
        out.append(
            c.NodeRegistered(
                node=name,
                provider_id=f"sim://{name}",
                nodepool=POOL,
                labels=labels,
                capacity=allocatable,
                allocatable=allocatable,
            )
        )
        out.append(c.NodeInitialized(node=name, nodepool=POOL))
    for i in range(running):
        app = f"svc-{i % 50}"
        out.append(
            c.PodBound(
                namespace="default",
                name=f"run-{i:06d}",
                node=f"node-{i % nodes:05d}",
                requests={"cpu": "1875m", "memory": "7Gi"},
                labels={"app": app},
                affinity=_anti(app) if i % 10 == 0 else None,
            )
        )
    for i in range(pending):
        kind = i % 5
        app = f"dep-{i % 50}"
        spread = []
        if kind == 1:
            spread = [
                {
                    "maxSkew": 1,
                    "topologyKey": ZONE,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": app}},
                }
            ]
        out.append(
            c.PodPending(
                namespace="default",
                name=f"pend-{i:06d}",
                uid=f"{i:08d}",
                requests={
                    "cpu": rng.choice(["250m", "500m", "750m", "1"]),
                    "memory": rng.choice(["512Mi", "1Gi", "2Gi"]),
                },
                labels={"app": app},
                affinity=_anti(app) if kind == 2 else None,
                topology_spread_constraints=spread,
                owner_kind="Deployment",
                owner_name=app,
            )
        )
    return out


def _recorded(position: int, event: c.Event) -> RecordedEvent:
    data = event.model_dump(mode="json")
    return RecordedEvent(position, uuid.uuid4(), "s", 1, event.TYPE, 1, data, Metadata("bench"), T0, T0)


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--running", type=int, default=80_000)
    parser.add_argument("--pending", type=int, default=20_000)
    parser.add_argument("--check", action="store_true", help="compare with the oracle baseline's plan")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds: the test suite's run")
    args = parser.parse_args()
    if args.smoke:
        args.nodes, args.running, args.pending, args.check = 50, 400, 100, True
    projection = Projection()
    start = time.perf_counter()
    for position, event in enumerate(facts(args.nodes, args.running, args.pending), 1):
        projection.apply((_recorded(position, event),))
    folded = time.perf_counter() - start
    gc.collect()
    resident = _rss_mib()
    types = catalog()

    def one_pass(run):  # the call the service makes, with `run` the pass (new, or the oracle)
        return run(
            projection.plannable(),
            projection.capacity(),
            projection.templates({POOL: None}),
            types,
            daemonsets=list(projection.daemonsets.values()),
            now=T0,
            running=projection.running(),
        )

    start, cpu = time.perf_counter(), time.process_time()
    plan = one_pass(schedule)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.check:
        from tests.unit.scheduling.baseline_pass import schedule as old_schedule
        from tests.unit.scheduling.oracle import shape

        started = time.perf_counter()
        old = one_pass(old_schedule)
        print(f"oracle baseline: {time.perf_counter() - started:.2f} s, same plan: {shape(old) == shape(plan)}")
    result = {
        "nodes": len(projection.nodes),
        "running": len(projection.bound),
        "pending": len(projection.pending),
        "fold_seconds": round(folded, 2),
        "resident_mib": round(resident, 1),
        "peak_mib": round(peak, 1),
        "pass_seconds": round(seconds, 3),
        "pass_cpu_seconds": round(cpu, 3),
        "placed_on_nodes": len(plan.placed),
        "nodeclaims": len(plan.claims),
        "on_claims": sum(len(cl.pods) for cl in plan.claims),
        "unscheduled": len(plan.unplaced),
    }
    print(
        f"projection: {result['nodes']:,} nodes, {result['running']:,} running and {result['pending']:,} pending pods, "
        f"folded in {folded:.1f} s; resident {resident:.0f} MiB"
    )
    print(
        f"one pass: {seconds:.2f} s ({cpu:.2f} s CPU): {result['placed_on_nodes']:,} pods on nodes, "
        f"{result['on_claims']:,} on {result['nodeclaims']:,} new claims, {result['unscheduled']} unscheduled; "
        f"peak resident {peak:.0f} MiB"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
