"""Static drift (upstream's `StaticDrift` method, `pkg/controllers/disruption/staticdrift.go`): a
drifted node of a static pool is replaced one-for-one by a claim of the pool's template, made and
initialized before the node goes, so the pool keeps its replicas. Its pods are not simulated (the
replacement is the pool's, whatever they need); the pool's Drifted budget and its node hard limit
(`limits.nodes`, counted with the replacement) hold it back, and nothing is replaced while the pool
is over its replicas (its scale-down comes first). One command a pass, as `Drift`'s. The graceful
pass asks it after Emptiness and before `Drift`, which leaves static pools to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from shared.disruption.candidates import Candidate
from shared.disruption.command import Command
from shared.disruption.drift import REASON, DriftedClaim, drift_order
from shared.disruption.method import EVENTUAL, Found, Outcome, Round
from shared.disruption.world import World
from shared.scheduling.packing import option_table
from shared.scheduling.static import static_claim
from shared.scheduling.values import PlannedClaim


def is_static(round_: Round, candidate: Candidate) -> bool:
    rules = round_.world.pools.get(candidate.nodepool)
    return rules is not None and rules.replicas is not None


class StaticDrift:
    reason = REASON
    disruption_class = EVENTUAL
    consolidation_type = ""

    def should_disrupt(self, round_: Round, candidate: Candidate) -> bool:
        return is_static(round_, candidate) and bool(round_.node(candidate).drift)

    def compute_commands(
        self, round_: Round, budgets: Mapping[str, int | None], chosen: Sequence[Candidate]
    ) -> Outcome:
        world, now = round_.world, round_.world.now
        ordered = drift_order([DriftedClaim(c.nodeclaim, c.empty, round_.node(c).drifted_since or now) for c in chosen])
        limited: list[str] = []
        for name in ordered:
            pool = round_.nodes[name].state.nodepool
            rules = world.pools[pool]
            budget = budgets.get(pool, 0)
            if (budget is not None and budget <= 0) or rules.replicas is None:
                continue
            live = sum(1 for n in world.nodes if n.state.nodepool == pool and not n.state.deleting)
            if live > rules.replicas:
                continue  # its scale-down first (upstream waits for it too)
            if not round_.replaceable(pool, 1):
                if pool not in limited:
                    limited.append(pool)
                continue
            claim = static_replacement(world, pool)
            if claim is None:
                continue
            command = Command(REASON, (name,), replacements=1)
            return Outcome((Found(command, pool, self.consolidation_type, None, (claim,)),), (), tuple(limited))
        return Outcome((), (), tuple(limited))


def static_replacement(world: World, pool: str) -> PlannedClaim | None:
    """The pool's claim, from its template and the options the cluster view gives it; its re-check
    makes it again (`passes.recheck`)."""
    cluster = world.cluster
    template = next((t for t in cluster.static_pools if t.name == pool), None)
    if template is None:
        return None  # its class is not Ready: no replacement can launch
    table = option_table(
        [template],
        cluster.catalog,
        daemonsets=cluster.daemonsets,
        unavailable=cluster.unavailable,
        now=cluster.now,
        pool_catalogs=cluster.pool_catalogs,
    )
    return static_claim(template, table.get(pool, []), cluster.pool_catalogs.get(pool, cluster.catalog))
