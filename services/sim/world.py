"""The simulated world: a scenario played on a clock, over the sim cloud and the sim cluster.

`advance(now)` runs everything due up to `now` in time order: the scenario's timeline, nodes
registering after the launch latency and turning Ready after the registration latency (startup
taints removed, the agent's job), spot reclaims two minutes after their notice, then the
workload and DaemonSet controllers and the kube-scheduler. `launch` and `terminate` are what the
scheduler and termination reach through the `CloudProvider` port. Pure and deterministic: the
same scenario and the same calls at the same instants give the same world.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from services.sim.catalog import generate_catalog
from services.sim.cloud import CapacityWindow, Instance, InstanceNotFound, LaunchRequest, SimCloud
from services.sim.cluster import (
    DaemonSet,
    Node,
    PodDisruptionBudget,
    PodTemplate,
    SimCluster,
    Workload,
)
from services.sim.kubelet import Kubelets, SeenInstance
from shared.api.core import NODE_READY
from shared.api.duration import parse_duration
from shared.api.labels import HOSTNAME_LABEL, NODEPOOL_LABEL
from shared.api.pod import LabelSelector
from shared.api.quantity import Quantity
from shared.api.scenario import Scenario, WorkloadSpec
from shared.ports.cluster import NODEOVERLAY

SPOT_NOTICE = timedelta(minutes=2)
NAMESPACE = "default"


@dataclass(order=True)
class _Due:
    at: datetime
    seq: int
    run: Callable[[], None] = field(compare=False)


class World:
    def __init__(self, scenario: Scenario, *, nodepools: bool = True) -> None:
        """`nodepools`: start with the scenario's NodePools and NodeOverlays; False when its user
        applies them through the API (`nodewright up` does, before the clock starts)."""
        spec = scenario.spec
        self.scenario = scenario
        self.now = scenario.start
        windows = [
            CapacityWindow(scenario.instant(s.from_), scenario.instant(s.to), s.instance_type, s.zone, s.capacity_type)
            for s in spec.cloud.insufficient_capacity
        ]
        self.cloud = SimCloud(
            generate_catalog(spec.seed, spec.cloud.instance_types, spec.cloud.zones), windows, spec.seed
        )
        self.cluster = SimCluster()
        self.cluster.namespaces_made_at(self.now)
        self.interruptions: list[dict[str, str]] = []
        """Each instance a spot interruption picked: when, and whose (the sim's score reports them)."""
        self._due: list[_Due] = []
        self._seq = itertools.count()
        self._pushed = 0
        self.launch_latency = scenario.latency("launch")
        self.registration_latency = scenario.latency("registration")
        self.kubelets = Kubelets(self.cluster, self._at)
        """Nodes for the instances of another cloud (`observe_cloud`)."""
        for pool in scenario.nodepools if nodepools else ():
            self.cluster.apply_nodepool(pool.to_dict(), self.now)
        for overlay in scenario.nodeoverlays if nodepools else ():  # served whatever the gate, as upstream
            self.cluster.create_custom(NODEOVERLAY, overlay.to_dict(), self.now)
        for ds in spec.daemon_sets:
            template = PodTemplate(
                labels={"app": ds.name}, requests=_requests(ds.requests), tolerations=list(ds.tolerations)
            )
            self.cluster.apply_daemonset(DaemonSet(NAMESPACE, ds.name, template, self.now))
        for w in spec.workloads:
            self.cluster.apply_workload(Workload(NAMESPACE, w.name, w.kind, w.replicas, template_of(w)))
            if w.pdb is not None:
                selector = LabelSelector(match_labels={"app": w.name})
                pdb = PodDisruptionBudget(
                    NAMESPACE, w.name, selector, w.pdb.min_available, w.pdb.max_unavailable, self.now
                )
                self.cluster.apply_pdb(pdb)
        for index, entry in enumerate(spec.timeline):
            self._at(scenario.instant(entry.at), lambda i=index: self._timeline(i))
        for x in spec.cloud.interruptions:
            self._at(scenario.instant(x.at), lambda x=x: self._interrupt(x.capacity_type, x.count))

    # --- time ----------------------------------------------------------------------------------

    def _at(self, at: datetime, run: Callable[[], None]) -> None:
        heapq.heappush(self._due, _Due(at, next(self._seq), run))
        self._pushed += 1

    def advance(self, now: datetime) -> None:
        """Play everything due up to `now`, then let the controllers and the scheduler act."""
        while self._due and self._due[0].at <= now:
            due = heapq.heappop(self._due)
            self.now = max(self.now, due.at)
            due.run()
            self._settle()
        self.now = max(self.now, now)
        self._settle()

    def fingerprint(self) -> tuple[object, ...]:
        """Equal before and after an `advance` that changed nothing but `now`: every object change
        moves the resource version, and what else a step can change is here. The sim's journal
        keeps only the advances that change it (`services.sim.journal`)."""
        return self.cluster.resource_version, self.cluster.queue_state(), len(self._due), self._pushed

    def resume(self, at: datetime) -> None:
        """Where an advance that changed nothing left the world: at `at`, as it was."""
        self.now = max(self.now, at)

    def next_due(self) -> datetime | None:
        return self._due[0].at if self._due else None

    def _settle(self) -> None:
        self.cluster.reconcile(self.now)
        self.cluster.schedule(self.now)

    # --- the scenario's timeline -----------------------------------------------------------------

    def _timeline(self, index: int) -> None:
        entry = self.scenario.spec.timeline[index]
        if entry.scale is not None:
            self.cluster.workloads[f"{NAMESPACE}/{entry.scale.workload}"].replicas = entry.scale.replicas
        elif entry.apply_node_pool is not None:
            self.cluster.apply_nodepool(self.scenario.timeline_nodepools[index].to_dict(), self.now)
        elif entry.delete_node_pool is not None:
            self.cluster.delete_nodepool(entry.delete_node_pool)
        elif entry.delete_workload is not None:
            self.cluster.delete_workload(NAMESPACE, entry.delete_workload)
        elif entry.delete_node_claims is not None:
            self.delete_nodeclaims(entry.delete_node_claims.nodepool, entry.delete_node_claims.count)
        elif entry.nodes_not_ready is not None:
            failing = entry.nodes_not_ready
            duration = parse_duration(failing.duration) if failing.duration else None
            self.nodes_not_ready(failing.nodepool, failing.count, duration, failing.condition)

    def delete_nodeclaims(self, nodepool: str, count: int) -> list[str]:
        """A user deleting the `count` oldest live NodeClaims of a pool (those not already going)."""
        live = [
            i
            for i in self.cloud.running()
            if i.request.nodepool == nodepool and not self.cluster.nodeclaim_deleting(i.request.nodeclaim)
        ]
        chosen = [i.request.nodeclaim for i in sorted(live, key=lambda i: (i.launched_at, i.request.nodeclaim))][:count]
        for name in chosen:
            self.cluster.delete_nodeclaim(name, nodepool, self.now)
        return chosen

    def nodes_not_ready(
        self, nodepool: str, count: int, duration: timedelta | None = None, condition: str = NODE_READY
    ) -> list[str]:
        """The `count` oldest Ready nodes of a pool turn NotReady (a kubelet stops posting status),
        or, for another `condition`, have it turn False (a node monitoring agent finds a fault),
        and recover after `duration` when one is given and the node is still there."""
        ready = [
            n
            for n in self.cluster.nodes.values()
            if n.ready
            and n.conditions.get(condition, ("True",))[0] == "True"
            and n.labels.get(NODEPOOL_LABEL) == nodepool
            and not self.cluster.nodeclaim_deleting(n.name)
        ]
        chosen = [n.name for n in sorted(ready, key=lambda n: (n.created_at, n.name))][:count]
        for name in chosen:
            self._set(name, condition, False)
            if duration is not None:
                self._at(self.now + duration, lambda name=name: self._recover(name, condition))
        return chosen

    def _set(self, name: str, condition: str, healthy: bool) -> None:
        if condition == NODE_READY:
            self.cluster.set_ready(name, healthy, self.now)
        else:
            self.cluster.set_condition(name, condition, "True" if healthy else "False", self.now)

    def _recover(self, name: str, condition: str = NODE_READY) -> None:
        if name in self.cluster.nodes:
            self._set(name, condition, True)

    # --- the cloud, as the CloudProvider port reaches it -----------------------------------------

    def launch(self, request: LaunchRequest) -> Instance:
        """Launch now; the node registers after the launch latency, and is Ready after the
        registration latency. Idempotent per NodeClaim, as a cloud's client token makes a
        create: asked again for a claim it runs an instance for, it answers with that one."""
        launched = self.cloud.instance_for(request.nodeclaim)
        if launched is not None:
            return launched
        instance = self.cloud.create(request, self.now)
        registers = self.now + self.launch_latency
        self._at(registers, lambda: self._register(instance))
        self._at(registers + self.registration_latency, lambda: self._ready(instance))
        return instance

    def terminate(self, provider_id: str) -> Instance:
        """The instance goes, and its node is deleted as a cloud controller deletes the node of
        an instance that is gone: at once, or marked (and NotReady, its kubelet gone) while a
        finalizer holds it, for the finalizer's owner to finish."""
        instance = self.cloud.delete(provider_id, self.now)
        node = self.node_of(instance)
        if node is not None:
            marked = bool(node.finalizers)
            self.cluster.request_node_deletion(node.name, self.now)
            if marked:  # marked first: its NotReady is that of a node going, never a failure
                self.cluster.set_ready(node.name, False, self.now)
        self.cluster.nodeclaim_gone(instance.request.nodeclaim)
        return instance

    def observe_cloud(self, running: list[SeenInstance]) -> bool:
        """What another cloud (EC2) runs now, for the sim's kubelets; whether it changed the world."""
        return self.kubelets.observe(running, self.now, self.launch_latency, self.registration_latency)

    def node_of(self, instance: Instance) -> Node | None:
        return self.cluster.nodes.get(instance.request.nodeclaim)

    def _register(self, instance: Instance) -> None:
        if instance.state != "running":
            return
        request = instance.request
        name = request.nodeclaim
        labels = {**instance.labels, HOSTNAME_LABEL: name}
        taints = [*request.taints, *request.startup_taints]
        it = instance.instance_type
        node = Node(name, instance.provider_id, labels, taints, it.capacity, it.allocatable, self.now)
        self.cluster.add_node(node)

    def _ready(self, instance: Instance) -> None:
        node = self.node_of(instance)
        if instance.state != "running" or node is None:
            return
        self.cluster.set_ready(node.name, True, self.now)
        for taint in instance.request.startup_taints:
            self.cluster.untaint(node.name, taint.key, taint.effect)

    def _interrupt(self, capacity_type: str, count: int) -> None:
        for instance in self.cloud.interrupt(capacity_type, count, self.now):
            request = instance.request
            self.interruptions.append(
                {"at": self.now.isoformat(), "nodeclaim": request.nodeclaim, "nodepool": request.nodepool}
            )
            self._at(self.now + SPOT_NOTICE, lambda i=instance: self._reclaim(i))

    def _reclaim(self, instance: Instance) -> None:
        with contextlib.suppress(InstanceNotFound):  # nodewright may have terminated it during the notice
            self.terminate(instance.provider_id)


def template_of(workload: WorkloadSpec) -> PodTemplate:
    """What a scenario's workload stamps on each of its pods."""
    return PodTemplate(
        labels=workload.pod_labels(),
        requests=_requests(workload.requests),
        node_selector=dict(workload.node_selector),
        affinity=workload.affinity,
        spread=list(workload.topology_spread_constraints),
        tolerations=list(workload.tolerations),
        annotations=dict(workload.annotations),
        priority_class=workload.priority_class_name,
        priority=workload.priority,
        grace_seconds=workload.termination_grace_period_seconds,
    )


def _requests(raw: Mapping[str, Quantity]) -> dict[str, Decimal]:
    return {name: q.value for name, q in raw.items()}
