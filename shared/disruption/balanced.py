"""Balanced consolidation (upstream's `consolidationPolicy: Balanced`, designs/balanced-consolidation.md):
a consolidation move goes ahead only when what it saves is worth what it disrupts.

Both sides are shares of the candidates' pool: the move's savings over what the pool's nodes cost
an hour, against its disruption cost over the pool's. A node's disruption cost is 1 (draining a
node costs something even when it is empty) plus each reschedulable pod's eviction cost, negative
ones counted as 0. The score is the savings share over the disruption share; the move passes at
score >= 1/k, with k = 2 (the smallest k at which a replace within an instance family, half the
price, passes in a uniform pool). That k also bounds churn: a chain of replaces each approved at
k = 2 ends within four steps over upstream's price table (its design's "Bounded churn"); larger k
would let replaces zigzag across families for nine.

A move of several pools is scored per Balanced pool, each on its share of the net savings (in
proportion to its candidates' prices) and its own candidates' disruption; every Balanced pool must
pass. Pools of other policies are not scored. Only consolidation (single- and multi-node) is
scored: emptiness, drift and expiration are not. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from shared.disruption.simulation import Movable

BALANCED_K = 2
"""Upstream's fixed k for `Balanced`: approved at score >= 1/2."""
NODE_DISRUPTION_COST = 1.0
"""What disrupting a node costs before its pods: upstream's per-node base cost."""
ROUNDING = 1e-9
"""The relative slack a score at the threshold is given for the rounding of its shares."""


def node_disruption_cost(eviction_costs: Iterable[float]) -> float:
    """A node's disruption cost from its reschedulable pods' eviction costs (`shared.policy.pods`):
    negative costs say a pod is free to disrupt, so they count as 0, never as a credit."""
    return NODE_DISRUPTION_COST + sum(max(0.0, cost) for cost in eviction_costs)


@dataclass(frozen=True, slots=True)
class PoolTotals:
    """What a Balanced pool's nodes, candidates or not, cost an hour and to disrupt: a pass's
    snapshot, against which every move of the pass is scored."""

    cost: float
    disruption: float


@dataclass(frozen=True, slots=True)
class Score:
    """A move's score in one pool: its savings and disruption as shares of the pool's totals."""

    savings_share: float
    disruption_share: float
    k: int = BALANCED_K

    @property
    def value(self) -> float:
        """Savings share over disruption share; 0 when nothing is saved. The disruption share is
        never 0 for a real move (each node costs at least 1), but a zero is read as unbounded."""
        if self.savings_share <= 0:
            return 0.0
        if self.disruption_share <= 0:
            return float("inf")
        return self.savings_share / self.disruption_share

    @property
    def threshold(self) -> float:
        return 1.0 / self.k

    @property
    def approved(self) -> bool:
        """At the threshold or above. A move exactly at it passes (the design's uniform-pool
        replace at half the price): the float rounding of two shares may not refuse it."""
        return self.value >= self.threshold * (1 - ROUNDING)

    def describe(self) -> str:
        """The score as the decision and `Unconsolidatable` say it."""
        sign = ">=" if self.approved else "<"
        return (
            f"score {self.value:.2f} {sign} threshold {self.threshold:.2f} (k {self.k}; saves "
            f"{self.savings_share * 100:.1f}% of the pool's cost, disrupts {self.disruption_share * 100:.1f}%)"
        )


def score(savings: float, disruption: float, totals: PoolTotals, k: int = BALANCED_K) -> Score:
    """One pool's score for a move saving `savings` an hour and disrupting `disruption`. A pool
    whose totals are not positive gives nothing to weigh against: the move scores 0."""
    if totals.cost <= 0 or totals.disruption <= 0:
        return Score(0.0, 0.0, k)
    return Score(savings / totals.cost, disruption / totals.disruption, k)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What Balanced makes of a move: a score per Balanced pool among its candidates' pools."""

    scores: Mapping[str, Score] = field(default_factory=dict)

    @property
    def approved(self) -> bool:
        return all(s.approved for s in self.scores.values())

    def why_not(self, decision: str) -> str:
        """The refusal in words (`Unconsolidatable`): the first refusing pool's score."""
        for pool, refusing in sorted(self.scores.items()):
            if not refusing.approved:
                return f'NodePool "{pool}" is Balanced and refuses this {decision}: {refusing.describe()}'
        return ""


def judge(moves: Sequence[Movable], savings: float, balanced: Mapping[str, PoolTotals]) -> Verdict:
    """Score a move of `moves` saving `savings` an hour (net of its replacement) in each of its
    Balanced pools (`balanced`: those pools' totals). Net savings are shared out by each pool's
    part of the candidates' prices when the move spans pools."""
    pools: dict[str, list[Movable]] = {}
    for move in moves:
        pools.setdefault(move.nodepool, []).append(move)
    if not any(pool in balanced for pool in pools):
        return Verdict()
    source = sum(m.price for m in moves)
    scores = {}
    for pool, own in pools.items():
        totals = balanced.get(pool)
        if totals is None:
            continue
        share = savings
        if len(pools) > 1 and source > 0:
            share = savings * sum(m.price for m in own) / source
        scores[pool] = score(share, sum(m.disruption for m in own), totals)
    return Verdict(scores)


def best_case(move: Movable, balanced: Mapping[str, PoolTotals]) -> Score | None:
    """The best a single candidate can score: deleting it outright, its whole price saved (a
    replace saves less). None when its pool is not Balanced. Single-node consolidation skips a
    candidate whose best case fails without simulating it, as upstream does."""
    totals = balanced.get(move.nodepool)
    if totals is None:
        return None
    return score(move.price, move.disruption, totals)
