"""Drift detection (upstream's `pkg/controllers/disruption/drift.go`): whether a launched claim no
longer matches its pool.

`NodePoolDrifted`: the pool's template hash changed since the claim was made (both hashes known
and of the same version: a new hashing scheme never drifts a whole fleet). `RequirementsDrifted`:
the claim's labels no longer satisfy the pool's requirements (a new required key, narrowed
values, DoesNotExist on a key it has); broadening values or loosening to Exists does not drift.
Then, from the cloud (`cloud_drift`): `InstanceTypeNotFound` (upstream's core reason), `AMIDrift`,
`SecurityGroupDrift`, `SubnetDrift` (aws/karpenter-provider-aws `pkg/cloudprovider/drift.go`).
The first that holds is the reason. Drifted claims go empty ones first, then oldest drift first,
one per pass, replaced first by as many claims as their pods need (`drift_command`). `Drift` is
the method (`method.Method`) the graceful pass asks after Emptiness.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from shared.api.nodepool import DisruptionReason
from shared.disruption.candidates import UNSCHEDULABLE, Blocked, Candidate
from shared.disruption.cloud_drift import Launch, cloud_drift
from shared.disruption.command import Command
from shared.disruption.consolidation import Replaceable, any_replacement, refused
from shared.disruption.method import EVENTUAL, Found, Outcome, Round
from shared.disruption.simulation import ClusterView, Movable, simulate
from shared.scheduling.nodeclasses import NodeClassState
from shared.scheduling.offerings import InstanceOption
from shared.scheduling.requirements import Requirements
from shared.scheduling.values import PlannedClaim

REASON = DisruptionReason.DRIFTED
NODEPOOL_DRIFTED = "NodePoolDrifted"
REQUIREMENTS_DRIFTED = "RequirementsDrifted"


@dataclass(frozen=True, slots=True)
class Stamp:
    """A template hash and the version of the scheme that made it."""

    hash: str | None
    version: str | None


def drift_reason(
    *,
    launched: bool,
    claim: Stamp,
    pool: Stamp,
    claim_labels: Mapping[str, str],
    pool_requirements: Requirements,
    launch: Launch | None = None,
    nodeclass: NodeClassState | None = None,
    catalog: Sequence[InstanceOption] = (),
    now: datetime | None = None,
) -> str | None:
    """Why the claim is drifted, or None. `launch`, `nodeclass`, `catalog` and `now`: what the
    cloud's reasons need (`cloud_drift`); without them only the pool's are asked."""
    if not launched:
        return None
    if claim.hash and pool.hash and claim.version == pool.version and claim.hash != pool.hash:
        return NODEPOOL_DRIFTED
    if Requirements.from_labels(claim_labels).incompatible(pool_requirements):
        return REQUIREMENTS_DRIFTED
    if launch is not None and now is not None:
        return cloud_drift(launch, nodeclass, catalog, now)
    return None


@dataclass(frozen=True, slots=True)
class DriftedClaim:
    nodeclaim: str
    empty: bool
    drifted_since: datetime


def drift_order(claims: Sequence[DriftedClaim]) -> list[str]:
    """Empty claims first (they cost nothing to move), then the longest drifted, then by name."""
    ordered = sorted(claims, key=lambda c: (not c.empty, c.drifted_since, c.nodeclaim))
    return [c.nodeclaim for c in ordered]


@dataclass(frozen=True, slots=True)
class DriftDecision:
    command: Command | None
    blocked: Mapping[str, str] = field(default_factory=dict)
    """Drifted claims whose pods would fit nowhere: NodeClaim -> why (`DisruptionBlocked`)."""
    limited: tuple[str, ...] = ()
    """Pools whose node hard limit refused the replacements a drifted claim needs."""
    new_claims: tuple[PlannedClaim, ...] = ()


def drift_command(
    candidates: Sequence[Movable],
    cluster: ClusterView,
    remaining: Mapping[str, int | None],
    replaceable: Replaceable = any_replacement,
) -> DriftDecision:
    """The first drifted candidate (in `drift_order`) whose pool's Drifted budget allows one more
    and whose pods have somewhere to go: deleted, or replaced by as many claims as they need, in
    whichever pools the simulation puts them (upstream's). No price filter: a drifted node goes
    whatever its replacement costs."""
    blocked: dict[str, str] = {}
    limited: list[str] = []
    cluster = cluster.prepared()
    for candidate in candidates:
        budget = remaining.get(candidate.nodepool, 0)
        if budget is not None and budget <= 0:
            continue
        simulation = simulate([candidate.move], cluster)
        if not simulation.valid:
            blocked[candidate.nodeclaim] = simulation.why_not() or "its pods would not schedule"
            continue
        full = refused(simulation.new_claims, replaceable)
        if full:
            limited += [pool for pool in full if pool not in limited]
            continue
        replacements = len(simulation.new_claims)
        command = Command(REASON, (candidate.nodeclaim,), replacements=replacements)
        return DriftDecision(command, blocked, tuple(limited), simulation.new_claims)
    return DriftDecision(None, blocked, tuple(limited))


class Drift:
    """The method: the drifted candidates of the eventual class (a blocking PDB or do-not-disrupt
    pod does not stop it), one per pass, in `drift_order`."""

    reason = REASON
    disruption_class = EVENTUAL
    consolidation_type = ""

    def should_disrupt(self, round_: Round, candidate: Candidate) -> bool:
        """Not a static pool's node: `static_drift` replaces those one-for-one."""
        rules = round_.world.pools.get(candidate.nodepool)
        return bool(round_.node(candidate).drift) and (rules is None or rules.replicas is None)

    def compute_commands(
        self, round_: Round, budgets: Mapping[str, int | None], chosen: Sequence[Candidate]
    ) -> Outcome:
        nodes, now = round_.nodes, round_.world.now
        ordered = drift_order([DriftedClaim(c.nodeclaim, c.empty, round_.node(c).drifted_since or now) for c in chosen])
        movables = [m for name in ordered if (m := nodes[name].movable) is not None]
        decision = drift_command(movables, round_.cluster, budgets, replaceable=round_.replaceable)
        blocked = tuple(
            Blocked(name, nodes[name].state.node, UNSCHEDULABLE, f"Cannot disrupt NodeClaim: {why}")
            for name, why in decision.blocked.items()
        )
        if decision.command is None:
            return Outcome((), blocked, decision.limited)
        pool = nodes[decision.command.candidates[0]].state.nodepool
        found = Found(decision.command, pool, self.consolidation_type, None, decision.new_claims)
        return Outcome((found,), blocked, decision.limited)
