"""Scheduling benchmark in the shape of Karpenter's own (scheduling_benchmark_test.go).

400 instance types, type i with i+1 vCPU, 2(i+1) GiB and 10(i+1) pods, each offered in 2 zones
as spot and on-demand; one NodePool without limits; pods with cpu from {100m, 250m, 500m, 1,
1.5} and memory from {100Mi, 256Mi, 512Mi, 1Gi, 2Gi, 4Gi} (fixed seed), in fifths: no
constraint, zone spread, hostname spread, zone self-affinity, hostname anti-affinity. One pass
(`shared.scheduling.packing.schedule`) at 1k, 5k, 20k, 50k and 100k pods, each size in a process
of its own so its peak memory is its own. Per size: seconds (wall and CPU), pods/s, the CPU time
per pod and its ratio to the 5k size's (the growth: 1.0 is linear; CPU time, as the cores are
shared and wall time is noisy), and the peak resident memory.
Upstream publishes 680-780 pods/s (Go) and 35.7 s for 20k pods: printed as the baseline ratio.
The last line is JSON for the largest size, with `per_pod_growth` (its time per pod over 5k's).
`--baseline` runs the pass as it was before its claim index (the tests' oracle) instead.

Run: `python -m benchmarks.scheduling [--sizes 1000,5000,20000,50000,100000] [--baseline]`.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import subprocess
import sys
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


def run(count: int, types: list[InstanceOption], baseline: bool = False) -> dict:
    batch = pods(count)
    pool = PoolTemplate("default", Requirements())
    if baseline:
        from tests.unit.scheduling.baseline_pass import schedule as old_schedule

        plan_with = old_schedule
    else:
        plan_with = schedule
    gc.collect()
    before = _peak_mib()
    start, cpu = time.perf_counter(), time.process_time()
    plan = plan_with(batch, [], [pool], types)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {
        "pods": count,
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "pods_per_second": round(count / seconds, 1),
        "us_per_pod": round(cpu / count * 1e6, 1),
        "nodeclaims": len(plan.claims),
        "unscheduled": len(plan.unplaced),
        "peak_mib": round(_peak_mib(), 1),
        "before_pass_mib": round(before, 1),
    }


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _in_own_process(size: int, baseline: bool) -> dict:
    command = [sys.executable, "-m", "benchmarks.scheduling", "--one", str(size)] + (["--baseline"] if baseline else [])
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,5000,20000,50000,100000")
    parser.add_argument("--baseline", action="store_true", help="the pass before its claim index (the oracle)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one size, in this process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run(args.one, catalog(), args.baseline)))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    results = [_in_own_process(size, args.baseline) for size in sizes]
    reference = next((r for r in results if r["pods"] == 5000), results[0])
    print(
        f"{'pods':>7} {'seconds':>8} {'cpu s':>7} {'pods/s':>8} {'us/pod':>7} "
        f"{'vs ' + str(reference['pods']):>8} {'peak MiB':>9}"
    )
    for r in results:
        r["per_pod_ratio"] = round(r["us_per_pod"] / reference["us_per_pod"], 2)
        print(
            f"{r['pods']:>7} {r['seconds']:>8.2f} {r['cpu_seconds']:>7.2f} {r['pods_per_second']:>8,.0f} "
            f"{r['us_per_pod']:>7.1f} "
            f"{r['per_pod_ratio']:>7.2f}x {r['peak_mib']:>9.0f}  "
            f"({r['pods_per_second'] / UPSTREAM_PODS_PER_SECOND:.2f}x Karpenter's published rate, "
            f"{r['nodeclaims']} nodeclaims, {r['unscheduled']} unscheduled)"
        )
    last = dict(results[-1])
    last["per_pod_growth"] = last.pop("per_pod_ratio")
    last["growth_against"] = reference["pods"]
    print(json.dumps(last))


if __name__ == "__main__":
    main()
