"""Scheduling benchmark in the shape of Karpenter's own (scheduling_benchmark_test.go), and a
second shape the claim index once handled in quadratic time; the inputs are built in
`benchmarks.scheduling_shapes`.

Karpenter's shape: one pass (`shared.scheduling.packing.schedule`) at 1k, 5k, 20k, 50k and 100k
pods, each size in a process of its own so its peak memory is its own. Per size: seconds (wall
and CPU), pods/s, the CPU time per pod and its ratio to the 5k size's (the growth: 1.0 is
linear; CPU time, as the cores are shared and wall time is noisy), and the peak resident memory.
Upstream publishes 680-780 pods/s (Go) and 35.7 s for 20k pods: printed as the baseline ratio.
`--baseline` runs the pass as it was before its claim index (the tests' oracle) instead.

Thirds: one 2-vCPU type, n pods each of 1.5, 0.75 and 0.25 vCPU, at n = 1k, 2k, 4k and 16k: the
new pass's CPU time per pod and its growth against the smallest n, beside the old pass (the
oracle, run in the same process) up to `--thirds-baseline-up-to`.

The last line is JSON: the largest Karpenter size, with `per_pod_growth` (its time per pod over
5k's), and `thirds` (per n, both passes' CPU seconds).

`--preferred`: Karpenter's shape with soft terms on every other pod
(`scheduling_shapes.preferred_pods`), to set the cost of relaxing beside the plain shape.

Run: `python -m benchmarks.scheduling [--sizes 1000,5000,20000,50000,100000] [--baseline] [--preferred]
[--thirds 1000,2000,4000,16000] [--thirds-baseline-up-to 4000]` (`--thirds ""` skips it).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable

from benchmarks.scheduling_shapes import catalog, pods, preferred_pods, thirds_catalog, thirds_pods
from shared.scheduling.offerings import InstanceOption
from shared.scheduling.packing import schedule
from shared.scheduling.requirements import Requirements
from shared.scheduling.values import PoolTemplate

UPSTREAM_PODS_PER_SECOND = 730.0  # the middle of Karpenter's published 680-780


def _old_pass() -> Callable:
    """The pass before its claim and node indexes: the tests' oracle, measured as the baseline."""
    from tests.unit.scheduling.baseline_pass import schedule as old_schedule

    return old_schedule


def run(count: int, types: list[InstanceOption], baseline: bool = False, preferred: bool = False) -> dict:
    batch = preferred_pods(count) if preferred else pods(count)
    pool = PoolTemplate("default", Requirements())
    plan_with = _old_pass() if baseline else schedule
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


def thirds(n: int, baseline: bool) -> dict:
    """Both passes over the thirds shape at n (the old one only if `baseline`): CPU seconds,
    and that they made as many claims."""
    batch, types, pool = thirds_pods(n), thirds_catalog(), PoolTemplate("default", Requirements())
    out: dict = {"n": n, "pods": len(batch)}
    for name, plan_with in (("new", schedule), ("old", _old_pass() if baseline else None)):
        if plan_with is None:
            continue
        gc.collect()
        cpu = time.process_time()
        plan = plan_with(batch, [], [pool], types)
        out[name] = round(time.process_time() - cpu, 3)
        out[name + "_nodeclaims"] = len(plan.claims)
    return out


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _in_own_process(size: int, baseline: bool, preferred: bool = False) -> dict:
    command = [sys.executable, "-m", "benchmarks.scheduling", "--one", str(size)] + (["--baseline"] if baseline else [])
    command += ["--preferred"] if preferred else []
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _karpenter_table(sizes: list[int], baseline: bool, preferred: bool = False) -> dict:
    results = [_in_own_process(size, baseline, preferred) for size in sizes]
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
    return last


def _thirds_table(sizes: list[int], baseline_up_to: int) -> list[dict]:
    results = [thirds(n, n <= baseline_up_to) for n in sizes]
    first = results[0]
    print("\nthirds (one 2-vCPU type; n pods each of 1.5, 0.75, 0.25 vCPU), CPU seconds:")
    print(f"{'n':>7} {'pods':>7} {'new s':>8} {'us/pod':>7} {'vs ' + str(first['n']):>8} {'old s':>8} {'old/new':>8}")
    for r in results:
        us = r["new"] / r["pods"] * 1e6
        growth = us / (first["new"] / first["pods"] * 1e6)
        old = f"{r['old']:>8.2f} {r['old'] / r['new']:>7.1f}x" if "old" in r else f"{'-':>8} {'-':>8}"
        claims = r["new_nodeclaims"]
        print(f"{r['n']:>7} {r['pods']:>7} {r['new']:>8.2f} {us:>7.1f} {growth:>7.2f}x {old}  ({claims} nodeclaims)")
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,5000,20000,50000,100000")
    parser.add_argument("--baseline", action="store_true", help="the pass before its claim index (the oracle)")
    parser.add_argument("--thirds", default="1000,2000,4000,16000", help="n per pod size; empty: skip")
    parser.add_argument("--thirds-baseline-up-to", type=int, default=4000, help="the old pass up to this n")
    parser.add_argument("--preferred", action="store_true", help="soft terms on every other pod (not with --baseline)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one size, in this process
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds: the test suite's run")
    args = parser.parse_args()
    if args.smoke:
        args.sizes, args.baseline, args.thirds, args.thirds_baseline_up_to = "100,200", True, "20,40", 20
    if args.one:
        print(json.dumps(run(args.one, catalog(), args.baseline, args.preferred)))
        return
    last = _karpenter_table([int(s) for s in args.sizes.split(",")], args.baseline, args.preferred)
    if args.thirds:
        last["thirds"] = _thirds_table([int(n) for n in args.thirds.split(",")], args.thirds_baseline_up_to)
    print(json.dumps(last))


if __name__ == "__main__":
    main()
