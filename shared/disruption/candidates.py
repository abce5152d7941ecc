"""Which nodes disruption may consider, and why the others are blocked (upstream's `NewCandidate`,
`pkg/controllers/disruption/types.go`).

A node is a candidate when its claim is initialized, not being deleted and not nominated for a
pending pod; its pool exists; neither the node nor any active pod on it is
`karpenter.sh/do-not-disrupt`; and no PodDisruptionBudget over a pod that would be evicted
allows zero disruptions, nor do two budgets cover one such pod. Blocks that a user can act on
come back as `Blocked`, with upstream's `DisruptionBlocked` message and a cause for the
counts `nodewright run` reports; a node that is simply not ready to be judged (not initialized,
already going) is left out without a word, as upstream does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from shared.disruption.pdbs import Pdb
from shared.policy.pods import PodFacts, do_not_disrupt_active

DO_NOT_DISRUPT = "DoNotDisrupt"
PDB = "PodDisruptionBudget"
NOMINATED = "Nominated"
NODEPOOL = "NodePoolNotFound"
NODE_BLOCKED = 'Disruption is blocked through the "karpenter.sh/do-not-disrupt" annotation'
NOMINATED_MESSAGE = "Node is nominated for a pending pod"


@dataclass(frozen=True, slots=True)
class CandidatePod:
    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    owner_kind: str | None = None
    do_not_disrupt: str | None = None
    """The pod's `karpenter.sh/do-not-disrupt` annotation, as written."""
    started_at: datetime | None = None
    terminal: bool = False
    terminating: bool = False
    tolerates_disrupted: bool = False
    """Tolerates `karpenter.sh/disrupted:NoSchedule`: a drain leaves it be."""
    ready: bool = True

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def mirror(self) -> bool:
        return self.owner_kind == "Node"

    @property
    def daemonset(self) -> bool:
        return self.owner_kind == "DaemonSet"

    @property
    def active(self) -> bool:
        return not self.terminal and not self.terminating

    @property
    def evicted(self) -> bool:
        """Whether a drain would evict it: the only pods a PodDisruptionBudget is checked for."""
        return self.active and not self.mirror and not self.tolerates_disrupted

    @property
    def reschedulable(self) -> bool:
        """Pods that need a place elsewhere if the node goes (DaemonSet and mirror pods do not)."""
        return self.active and not self.mirror and not self.daemonset


@dataclass(frozen=True, slots=True)
class NodeState:
    """A claim and its node as the disruption projection knows them."""

    nodeclaim: str
    nodepool: str
    node: str | None = None
    initialized: bool = False
    deleting: bool = False
    nominated: bool = False
    do_not_disrupt: str | None = None
    """The node's `karpenter.sh/do-not-disrupt` annotation (the claim's before registration)."""
    pods: tuple[CandidatePod, ...] = ()
    grace_period: bool = False
    """The claim has a terminationGracePeriod: drift then disregards the pods' blocks."""


@dataclass(frozen=True, slots=True)
class Candidate:
    state: NodeState

    @property
    def nodeclaim(self) -> str:
        return self.state.nodeclaim

    @property
    def nodepool(self) -> str:
        return self.state.nodepool

    @property
    def reschedulable(self) -> tuple[CandidatePod, ...]:
        return tuple(p for p in self.state.pods if p.reschedulable)

    @property
    def empty(self) -> bool:
        return not self.reschedulable


UNSCHEDULABLE = "Unschedulable"
"""The cause of a block whose candidate's pods would not schedule elsewhere (drift's)."""


@dataclass(frozen=True, slots=True)
class Blocked:
    """Upstream's `DisruptionBlocked` on the node and its claim."""

    nodeclaim: str
    node: str | None
    cause: str
    message: str


def candidate(
    state: NodeState,
    *,
    pools: Collection[str],
    pdbs: Sequence[Pdb],
    allowed: Mapping[str, int],
    now: datetime,
    eventual: bool = False,
) -> Candidate | Blocked | None:
    """`allowed`: each budget's disruptions allowed now, by key (`pdbs.disruptions_allowed`).
    `eventual`: drift, whose pod blocks do not hold for a claim with a grace period."""
    if not state.initialized or state.deleting:
        return None

    def blocked(cause: str, message: str) -> Blocked:
        return Blocked(state.nodeclaim, state.node, cause, message)

    if state.nominated:
        return blocked(NOMINATED, NOMINATED_MESSAGE)
    if state.do_not_disrupt == "true":
        return blocked(DO_NOT_DISRUPT, NODE_BLOCKED)
    if state.nodepool not in pools:
        return blocked(NODEPOOL, f"NodePool not found (NodePool={state.nodepool})")
    if eventual and state.grace_period:
        return Candidate(state)
    for pod in state.pods:  # mirror and DaemonSet pods too: they may hold their node
        facts = PodFacts(pod.key, do_not_disrupt=pod.do_not_disrupt, start_time=pod.started_at)
        if pod.active and do_not_disrupt_active(facts, now):
            return blocked(DO_NOT_DISRUPT, f'Pod has "karpenter.sh/do-not-disrupt" annotation (Pod={pod.key})')
    for pod in state.pods:
        if not pod.evicted:
            continue
        over = [b for b in pdbs if b.selects(pod.namespace, pod.labels)]
        if len(over) > 1:
            keys = " ".join(sorted(b.key for b in over))
            return blocked(PDB, f"Eviction does not support multiple PDBs (PodDisruptionBudget(s)=[{keys}])")
        if over and allowed.get(over[0].key, 0) == 0 and not (over[0].unhealthy_always_allow and not pod.ready):
            return blocked(PDB, f"Pdb prevents pod evictions (PodDisruptionBudget=[{over[0].key}])")
    return Candidate(state)
