"""Termination benchmark: many NodeClaims deleted at once, each drained as upstream drains.

500 NodeClaims with about 20 pods each (the sim's latencies zero, the clock at real speed, so
the 5 s minimum drain time is kept) are deleted in one request; the time until every one is
terminated, and the evictions per second, with 1 and with 3 termination replicas (each service
its own process, as `nodewright up` runs them; the scheduler is stopped first, so the evicted
pods do not start a scale-up that would compete). The baseline is the bound upstream's own
minimum drain time sets at its default concurrency: 100 NodeClaims reconciled at once, at least
5 s each, so ceil(500 / 100) x 5 s = 25 s. Goal: all 500 terminated within 60 s with one replica.

Run: `python -m benchmarks.termination [--claims 500] [--replicas 1,3]`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import yaml

from benchmarks._db import bench_database
from cli.delete import delete_nodeclaims
from cli.local_cluster import LocalCluster
from shared.clock import AcceleratedClock
from shared.config import settings
from shared.runtime import loop
from shared.runtime.servers import EmbeddedNats, free_tcp_port
from shared.store.eventstore import EventStore

PODS_PER_CLAIM = 20
UPSTREAM_CONCURRENCY = 100
MIN_DRAIN_SECONDS = 5.0


def scenario(claims: int, start: datetime) -> dict:
    pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "bench"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "sim.nodewright.dev", "kind": "SimNodeClass", "name": "default"},
                    "requirements": [{"key": "sim.nodewright.dev/instance-cpu", "operator": "In", "values": ["32"]}],
                }
            },
            "disruption": {"budgets": [{"nodes": "100%"}]},
        },
    }
    return {
        "apiVersion": "nodewright.dev/v1alpha1",
        "kind": "Scenario",
        "metadata": {"name": "termination-bench"},
        "spec": {
            "start": start.isoformat(),
            "duration": "3h",
            "cloud": {"instanceTypes": 80, "launchLatency": "0s", "registrationLatency": "0s"},
            "nodePools": [pool],
            "workloads": [{"name": "web", "replicas": claims * PODS_PER_CLAIM, "requests": {"cpu": "1550m"}}],
        },
    }


async def column(url: str, sql: str) -> list:
    """The first column of a query's rows."""
    store = EventStore.connect(url, pool_size=1)
    try:
        async with store.driver_connection() as raw:
            return [row[0] for row in await raw.fetch(sql)]
    finally:
        await store.close()


async def count(url: str, sql: str) -> int:
    return int((await column(url, sql))[0])


CLAIMS = "SELECT data ->> 'nodeclaim' FROM events WHERE type = 'NodeClaimInitialized'"
DURATIONS = (
    "SELECT extract(epoch FROM t.occurred_at - r.occurred_at)::float FROM events r JOIN events t"
    " ON t.stream_id = r.stream_id AND t.type = 'NodeClaimTerminated'"
    " WHERE r.type = 'NodeClaimDeletionRequested' ORDER BY 1"
)
"""Each claim's seconds from its deletion request to its termination, sorted."""


def wait(condition, seconds: float, what: str) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > seconds:
            raise SystemExit(f"timed out after {seconds:.0f} s waiting for {what}")
        time.sleep(0.5)
    return time.monotonic() - started


def run_once(url: str, nats_url: str, claims: int, replicas: int, workdir: Path) -> dict[str, float]:
    workdir.mkdir(parents=True)
    start = datetime.now(UTC).replace(microsecond=0)
    clock = AcceleratedClock(start, 1.0, time.time())
    path = workdir / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario(claims, start)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEWRIGHT_")}
    env |= {
        "NODEWRIGHT_DATABASE_URL": url,
        "NODEWRIGHT_NATS_URL": nats_url,
        "NODEWRIGHT_DEPLOYMENT": f"{workdir.name}x{os.getpid()}",  # a stream of its own: ids repeat per run
        "NODEWRIGHT_DATA_DIR": str(workdir / "data"),
        **clock.environment(),
    }
    if not settings().nats_url:
        env["NODEWRIGHT_NATS_INSECURE"] = "true"  # its own embedded server on loopback, open: a laboratory
    setup = subprocess.run([sys.executable, "-m", "cli.main", "bus", "setup"], env=env, capture_output=True)
    if setup.returncode:
        raise SystemExit(f"nodewright bus setup failed: {setup.stderr.decode()[-2000:]}")
    processes: dict[str, list[subprocess.Popen[bytes]]] = {}
    cluster = LocalCluster.create(workdir / "data", free_tcp_port(), env["NODEWRIGHT_DEPLOYMENT"])
    environments = cluster.environments()  # the sim serves the Kubernetes API; each service its kubeconfig

    def start_service(name: str, *args: str) -> None:
        log = (workdir / f"{name}-{len(processes.get(name, []))}.log").open("wb")
        processes.setdefault(name, []).append(
            subprocess.Popen(
                [sys.executable, "-m", f"services.{name}", *args, "--port", str(free_tcp_port())],
                env={**env, **environments.get(name, {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    try:
        start_service("sim", "--scenario", str(path))
        time.sleep(1.0)
        for name in ("relay", "watcher", "scheduler"):
            start_service(name)
        for _ in range(replicas):
            start_service("termination")
        bound = "SELECT count(*) FROM events WHERE type = 'PodBound'"
        setup = wait(lambda: loop.run(count(url, bound)) >= claims * PODS_PER_CLAIM, 300, "every pod to run")
        created = "SELECT count(*) FROM events WHERE type = 'NodeClaimCreated'"
        initialized = "SELECT count(*) FROM events WHERE type = 'NodeClaimInitialized'"
        setup += wait(lambda: loop.run(count(url, initialized)) == loop.run(count(url, created)), 120, "the claims")
        for scheduler in processes["scheduler"]:
            scheduler.terminate()
            scheduler.wait(30)
        names = loop.run(column(url, CLAIMS))
        started = time.monotonic()
        loop.run(delete_nodeclaims(url, names, clock.now()))
        ended = "SELECT count(*) FROM events WHERE type = 'NodeClaimTerminated'"
        seconds = wait(lambda: loop.run(count(url, ended)) >= len(names), 600, "every NodeClaim terminated")
        seconds = time.monotonic() - started
        evicted = loop.run(count(url, "SELECT count(*) FROM events WHERE type = 'PodEvicted'"))
        spans = loop.run(column(url, DURATIONS))
        return {
            "replicas": replicas,
            "claims": len(names),
            "evictions": evicted,
            "seconds": seconds,
            "evictions_per_s": evicted / seconds,
            "setup_seconds": setup,
            "claim_p50_s": spans[len(spans) // 2],
            "claim_p99_s": spans[min(len(spans) - 1, len(spans) * 99 // 100)],
            "claim_max_s": spans[-1],
        }
    finally:
        for group in processes.values():
            for process in group:
                if process.poll() is None:
                    process.terminate()
        for group in processes.values():
            for process in group:
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--claims", type=int, default=500)
    parser.add_argument("--replicas", default="1,3", help="termination replicas per run, comma-separated")
    parser.add_argument("--logs", type=Path, help="keep the services' logs in this directory")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds: the test suite's run")
    args = parser.parse_args()
    if args.smoke:
        args.claims, args.replicas = 2, "1"
    upstream = math.ceil(args.claims / UPSTREAM_CONCURRENCY) * MIN_DRAIN_SECONDS
    results = []
    with ExitStack() as stack:
        workdir = args.logs or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        workdir.mkdir(parents=True, exist_ok=True)
        nats_url = settings().nats_url
        if not nats_url:
            nats_url = stack.enter_context(EmbeddedNats(workdir / "nats")).url
        for index, replicas in enumerate(int(r) for r in args.replicas.split(",")):
            with bench_database() as url:
                results.append(run_once(url, nats_url, args.claims, replicas, workdir / f"run{index}"))
    for r in results:
        print(
            f"{r['claims']} NodeClaims ({r['evictions']} pods evicted) terminated in {r['seconds']:.1f} s with "
            f"{r['replicas']} replica(s): {r['evictions_per_s']:,.0f} evictions/s (setup {r['setup_seconds']:.0f} s); "
            f"per claim p50 {r['claim_p50_s']:.1f} s, p99 {r['claim_p99_s']:.1f} s, max {r['claim_max_s']:.1f} s; "
            f"upstream's bound at its concurrency: {upstream:.0f} s, ratio {r['seconds'] / upstream:.2f}x; goal: 60 s"
        )
    if len(results) > 1:
        speedup = results[0]["seconds"] / results[-1]["seconds"]
        print(f"{results[-1]['replicas']} replicas against 1: {speedup:.2f}x faster")
    print(json.dumps({"upstream_bound_seconds": upstream, "runs": results}))


if __name__ == "__main__":
    main()
