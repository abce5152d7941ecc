"""The inputs of the scheduling benchmarks, in one place for the benchmarks and the tests that
check the pass on the same shapes (tests import benchmarks' builders; benchmarks import no
test's builders).

- Karpenter's shape (its scheduling_benchmark_test.go): 400 instance types, type i with i+1
  vCPU, 2(i+1) GiB and 10(i+1) pods, each offered in 2 zones as spot and on-demand; pods with
  cpu from {100m, 250m, 500m, 1, 1.5} and memory from {100Mi, 256Mi, 512Mi, 1Gi, 2Gi, 4Gi}
  (fixed seed), in fifths: no constraint, zone spread, hostname spread, zone self-affinity,
  hostname anti-affinity.
- Preferred: Karpenter's shape with soft terms on every other pod (`preferred_pods`): a
  preferred zone it can have, or a heavier impossible one before it (one relaxation), and on
  every fourth of them a ScheduleAnyway zone spread.
- Thirds: one 2-vCPU type and n pods each of 1.5, 0.75 and 0.25 vCPU. Every claim keeps room
  for the batch's smallest pod but not for the pod at hand, so a search that tries the claims
  in turn tries them all for each 0.75 pod.
"""

from __future__ import annotations

import random
from decimal import Decimal

from shared.api.pod import Affinity, PodAffinityTerm, TopologySpreadConstraint
from shared.api.quantity import parse
from shared.scheduling import preferences
from shared.scheduling.offerings import InstanceOption, Offer
from shared.scheduling.requirements import Requirements
from shared.scheduling.topology import PodTopology
from shared.scheduling.values import PendingPod

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


THIRDS_CPUS = ("1.5", "0.75", "0.25")


def thirds_catalog() -> list[InstanceOption]:
    resources = {"cpu": Decimal(2), "memory": Decimal(8 * 2**30), "pods": Decimal(110)}
    labels = {"node.kubernetes.io/instance-type": "two-cpu", "kubernetes.io/arch": "amd64"}
    return [InstanceOption("two-cpu", resources, resources, labels, (Offer("test-zone-1", "on-demand", 0.1),))]


def thirds_pods(n: int) -> list[PendingPod]:
    """n pods of each size (3n), 256Mi each: memory never decides, but every pod asks for it."""
    memory = parse("256Mi")
    return [
        PendingPod(f"default/{cpu}-{i}", {"cpu": Decimal(cpu), "memory": memory}, uid=f"{cpu}-{i:08d}")
        for cpu in THIRDS_CPUS
        for i in range(n)
    ]


def preferred_pods(count: int, seed: int = 42) -> list[PendingPod]:
    """`pods(count)`, every other one with soft terms, made as the view makes them."""
    out = []
    for i, pod in enumerate(pods(count, seed)):
        if i % 2:
            out.append(pod)
            continue
        zone = ("test-zone-1", "test-zone-2")[i // 2 % 2]
        terms = [
            {"weight": 10, "preference": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}}
        ]
        if i % 4 == 2:  # a heavier preference no type offers: given up first
            impossible = {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-9"]}]}
            terms.insert(0, {"weight": 90, "preference": impossible})
        affinity = Affinity.model_validate({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}})
        spread = pod.topology.spread
        if i % 8 == 0:
            soft = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway", **_selector("soft")}
            spread += (TopologySpreadConstraint.model_validate(soft),)
        requirements, topology, soft_terms = preferences.strict(
            Requirements(), affinity, dict(pod.topology.labels), spread
        )
        topology = PodTopology(
            topology.labels,
            topology.spread,
            pod.topology.affinity,
            pod.topology.anti_affinity,
            anyway=topology.anyway,
        )
        out.append(
            PendingPod(pod.key, pod.requests, requirements, uid=pod.uid, topology=topology, preferences=soft_terms)
        )
    return out
