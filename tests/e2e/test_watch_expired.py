"""The watcher killed with SIGKILL and restarted while the sim keeps only a few changes for its
watches (NODEWRIGHT_SIM_WATCH_HISTORY): each burst leaves the watch behind the kept history, the
API answers 410, and the watcher lists again (its `nodewright_watcher_lists_total` says why).
Through all that the log holds every fact once: each pod bound once, on the node the API shows,
seen pending at most once; each node registered once; the audit is clean."""

from __future__ import annotations

import os
import re
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import yaml

from cli.audit import audit_database
from shared.adapters.kube import KubeCluster
from shared.store.eventstore import EventStore
from tests.e2e.processes import Service, System, bound_pods, environment, wait_for
from tests.integration.world import burst

pytestmark = pytest.mark.timeout(240)
HISTORY = 5
"""Changes the sim keeps for watches (between this and twice this): a burst of 30 pods outruns it."""


def lists(service: Service, reason: str) -> float:
    """The watcher's lists of the cluster for one reason, from its /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{service.port}/metrics", timeout=2) as response:
        text = response.read().decode()
    found = re.search(rf'^nodewright_watcher_lists_total{{reason="{reason}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


async def test_a_watcher_killed_and_answered_410_lists_again_and_loses_nothing(
    tmp_path: Path, migrated_url: str, nats_server_url: str
):
    document = burst(40)
    document["spec"]["timeline"] += [
        {"at": "15m", "scale": {"workload": "web", "replicas": 70}},
        {"at": "20m", "scale": {"workload": "web", "replicas": 100}},
    ]
    scenario = tmp_path / "burst.yaml"
    scenario.write_text(yaml.safe_dump(document))
    env = environment(tmp_path, migrated_url, nats_server_url, f"gone{os.getpid()}", document["spec"]["start"])
    system = System(tmp_path, env | {"NODEWRIGHT_SIM_WATCH_HISTORY": str(HISTORY)})
    store = EventStore.connect(migrated_url, pool_size=2)
    try:
        system.start("sim", "--scenario", str(scenario))
        system.start("relay")
        first = system.start("watcher")
        system.start("scheduler")

        async def some_bound() -> bool:
            return await bound_pods(store) >= 10

        await wait_for(some_bound, 90, "the first pods bound")
        first.kill()  # SIGKILL, mid-burst: the sim goes on binding pods and registering nodes
        time.sleep(2)
        again = system.start("watcher")

        async def all_bound() -> bool:
            return await bound_pods(store) == 100

        await wait_for(all_bound, 180, "every pod bound")
        assert lists(again, "start") == 1
        assert lists(again, "expired") >= 1  # the bursts at 15m and 20m outran the kept history

        cluster = await KubeCluster.connect(str(system.cluster.user_kubeconfig), context=system.cluster.context)
        try:
            seen = await cluster.snapshot()
        finally:
            await cluster.close()
        pods = {o.key: o.object.get("nodeName") for o in seen.objects if o.kind == "Pod"}
        nodes = {o.key for o in seen.objects if o.kind == "Node"}
        assert len(pods) == 100 and all(pods.values())

        facts: Counter[tuple[str, str]] = Counter()
        bound_on: dict[str, str] = {}
        async for page in store.read_types(["PodPending", "PodBound", "NodeRegistered"]):
            for kind, data in page:
                key = data["node"] if kind == "NodeRegistered" else f"{data['namespace']}/{data['name']}"
                facts[kind, key] += 1
                if kind == "PodBound":
                    bound_on[key] = data["node"]
        assert {pod for (kind, pod), n in facts.items() if kind == "PodBound" and n > 1} == set()  # none twice
        assert {pod for (kind, pod), n in facts.items() if kind == "PodPending" and n > 1} == set()
        assert {key: bound_on.get(key) for key in pods} == pods  # none lost: each bound where it runs
        registered = {node for (kind, node), n in facts.items() if kind == "NodeRegistered"}
        assert registered == nodes and all(facts["NodeRegistered", n] == 1 for n in nodes)

        result = await audit_database(migrated_url)
        assert result.replay.violations == [] and result.counters_match, result.mismatches
        for service in system.services:
            if service is not first:
                assert "Traceback" not in service.log.read_text(), service.log.read_text()[-3000:]
    finally:
        system.stop()
        await store.close()
