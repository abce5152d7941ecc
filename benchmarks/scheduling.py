"""Scheduling benchmark in the shape of Karpenter's own (scheduling_benchmark_test.go), its
inputs built in `benchmarks.scheduling_shapes`; one NodePool without limits. One pass
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
import resource
import subprocess
import sys
import time

from benchmarks.scheduling_shapes import catalog, pods
from shared.scheduling.offerings import InstanceOption
from shared.scheduling.packing import PoolTemplate, schedule
from shared.scheduling.requirements import Requirements

UPSTREAM_PODS_PER_SECOND = 730.0  # the middle of Karpenter's published 680-780


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
