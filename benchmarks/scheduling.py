"""Scheduling benchmark in the shape of Karpenter's own (scheduling_benchmark_test.go).

400 instance types, type i with i+1 vCPU, 2(i+1) GiB and 10(i+1) pods, each offered in 2 zones
as spot and on-demand; one NodePool without limits; pods with cpu from {100m, 250m, 500m, 1,
1.5} and memory from {100Mi, 256Mi, 512Mi, 1Gi, 2Gi, 4Gi} (fixed seed), in fifths: no
constraint, zone spread, hostname spread, zone self-affinity, hostname anti-affinity. One pass
(`shared.scheduling.packing.schedule`) at 1k, 5k and 20k pods; pods/s and claims per size.
Upstream publishes 680-780 pods/s (Go) and 35.7 s for 20k pods: printed as the baseline ratio.
The last line is JSON for the largest size.

Run: `python -m benchmarks.scheduling [--sizes 1000,5000,20000]`.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import time
from decimal import Decimal

from shared.api.pod import PodAffinityTerm, TopologySpreadConstraint
from shared.api.quantity import parse
from shared.scheduling.offerings import InstanceOption, Offer
from shared.scheduling.packing import PendingPod, PoolTemplate, schedule
from shared.scheduling.requirements import Requirements
from shared.scheduling.topology import PodTopology

UPSTREAM_PODS_PER_SECOND = 730.0  # the middle of Karpenter's published 680-780
ZONE, HOST = "topology.kubernetes.io/zone", "kubernetes.io/hostname"
CPUS = ["100m", "250m", "500m", "1", "1.5"]
MEMORIES = ["100Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi"]


def catalog() -> list[InstanceOption]:
    out = []
    for i in range(400):
        n = i + 1
        resources = {"cpu": Decimal(n), "memory": Decimal(2 * n * 2**30), "pods": Decimal(10 * n)}
        offers = tuple(
            Offer(zone, capacity, round(0.05 * n * (0.6 if capacity == "spot" else 1.0), 5))
            for zone in ("test-zone-1", "test-zone-2")
            for capacity in ("spot", "on-demand")
        )
        labels = {"node.kubernetes.io/instance-type": f"type-{n}", "kubernetes.io/arch": "amd64"}
        out.append(InstanceOption(f"type-{n}", resources, resources, labels, offers))
    return out


def _selector(app: str) -> dict:
    return {"labelSelector": {"matchLabels": {"app": app}}}


def pods(count: int, seed: int = 42) -> list[PendingPod]:
    rng = random.Random(seed)
    fifth = count // 5
    out = []
    rules: list[dict] = [
        {},
        {
            "spread": (
                TopologySpreadConstraint.model_validate(
                    {
                        "maxSkew": 1,
                        "topologyKey": ZONE,
                        "whenUnsatisfiable": "DoNotSchedule",
                        **_selector("zone-spread"),
                    }
                ),
            )
        },
        {
            "spread": (
                TopologySpreadConstraint.model_validate(
                    {
                        "maxSkew": 1,
                        "topologyKey": HOST,
                        "whenUnsatisfiable": "DoNotSchedule",
                        **_selector("host-spread"),
                    }
                ),
            )
        },
        {"affinity": (PodAffinityTerm.model_validate({"topologyKey": ZONE, **_selector("zone-affinity")}),)},
        {"anti_affinity": (PodAffinityTerm.model_validate({"topologyKey": HOST, **_selector("host-anti")}),)},
    ]
    apps = ["plain", "zone-spread", "host-spread", "zone-affinity", "host-anti"]
    for i in range(count):
        kind = min(i // max(fifth, 1), 4)
        requests = {"cpu": parse(rng.choice(CPUS)), "memory": parse(rng.choice(MEMORIES))}
        topology = PodTopology(labels={"app": apps[kind]}, **rules[kind])
        out.append(PendingPod(f"default/pod-{i}", requests, Requirements(), uid=f"{i:08d}", topology=topology))
    return out


def run(count: int, types: list[InstanceOption]) -> dict:
    batch = pods(count)
    pool = PoolTemplate("default", Requirements())
    gc.collect()
    start = time.perf_counter()
    plan = schedule(batch, [], [pool], types)
    seconds = time.perf_counter() - start
    return {
        "pods": count,
        "seconds": round(seconds, 3),
        "pods_per_second": round(count / seconds, 1),
        "nodeclaims": len(plan.claims),
        "unscheduled": len(plan.unplaced),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,5000,20000")
    args = parser.parse_args()
    types = catalog()
    result = {}
    for size in (int(s) for s in args.sizes.split(",")):
        result = run(size, types)
        print(
            f"{size:>6} pods: {result['seconds']:.2f} s, {result['pods_per_second']:,.0f} pods/s "
            f"({result['pods_per_second'] / UPSTREAM_PODS_PER_SECOND:.2f}x Karpenter's published rate), "
            f"{result['nodeclaims']} nodeclaims, {result['unscheduled']} unscheduled"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
