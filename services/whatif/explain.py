"""`explain(log, claim, at)`: why a NodeClaim was or was not disrupted at an instant, from a
recorded log, offline.

The log is folded to the instant (`instant`: the disruption service's projection, the store's
counters, the what-if's catalog), the `World` the service would have built is made, and the pure
core is asked about the claim (`shared.explain`). For a claim a recorded decision disrupted, the
instant is that decision's and the fold stops at the log position the decision observed: the
methods are asked about the world the deciding pass saw, and the decision is told with the
budget snapshot the store checked it on, as `audit --explain` tells it.

The world is built under the feature gates the disruption service ran with, as the log recorded
them in force at the instant (`FeatureGatesObserved`); a log older than that record falls back to
`NODEWRIGHT_FEATURE_GATES`, read as every process reads it, and the answer says which: a static
pool's Overprovisioned scale-down, node repair and spot-to-spot consolidation are weighed only with
theirs on.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from services.whatif import gates as g
from services.whatif.instant import Gates, instant, recorded_catalog
from shared.config import NODE_REPAIR, STATIC_CAPACITY
from shared.disruption.repair import UNHEALTHY
from shared.disruption.static import REASON as OVERPROVISIONED
from shared.events.envelope import RecordedEvent
from shared.explain import model as m
from shared.explain.answer import answer
from shared.explain.log import STREAM_PREFIX, chapters, claim_of_node, decisions_of, life_of, story_of
from shared.runtime.catalogs import Loaded
from shared.whatif.sim import UNKNOWN, SimSettings


class ExplainError(ValueError):
    """Input that names nothing the log holds (the command exits 2 and says why)."""


def explain(
    log: Sequence[RecordedEvent],
    nodeclaim: str | None = None,
    *,
    node: str | None = None,
    at: datetime | None = None,
    loaded: Loaded | None = None,
    sim: SimSettings = UNKNOWN,
    gates: Gates | None = None,
    environment: Gates | None = None,
) -> m.Explanation:
    """The answer for the claim (or the claim the node was) at `at`: by default the time of the
    decision that disrupted it, else the end of the log. `loaded`: the catalog to price with
    (default: the what-if's, `instant.recorded_catalog`, at `sim`'s seed: the recorded run's
    when its source says it, the answer tells which and whence). `gates`: the feature gates the
    world is built under (default: those the log recorded in force at the instant, else
    `environment`, by default `Gates.now`: a bad value is a ValueError)."""
    if not log:
        raise ExplainError("the log holds no events")
    first, last = log[0].occurred_at, max(e.occurred_at for e in log)
    if at is not None and not first <= at <= last:
        raise ExplainError(
            f"--at {at.isoformat()}: outside the log, which runs from {first.isoformat()} to {last.isoformat()}"
        )
    name = _claim(log, nodeclaim, node)
    life = life_of(log, name)
    if life is None:
        raise ExplainError(f"nodeclaim {name!r}: the log never created a NodeClaim of that name")
    story = story_of(log, name)
    decisions = decisions_of(log, name, story)
    carried = [d for d in decisions if d.cancelled is None]
    if at is None:
        at = carried[0].at if carried else last
    if at < life.created_at:
        raise ExplainError(
            f"--at {at.isoformat()}: nodeclaim {name} was created later, at {life.created_at.isoformat()}"
        )
    decision = next((d for d in carried if d.at <= at), None)
    told = chapters(c for c in story if c.at <= at)
    used = _gates(log, decision.at if decision is not None else at, gates, environment)
    gates = Gates.of(used.gates)
    whence = _WHENCE[used.source]
    common = {
        "nodeclaim": name,
        "node": life.node,
        "nodepool": life.nodepool,
        "decision": decision,
        "decisions": decisions,
        "story": told,
        "seed": sim.seed,
        "seed_from": sim.source if loaded is None else "the catalog given",
        "gates": gates.on(),
        "gates_source": used.source,
        "gates_from": used.told,
    }
    if decision is None and life.terminated_at is not None and life.terminated_at <= at:
        return m.Explanation(
            **common,
            at=at,
            position=0,
            state="terminated",
            disrupted=False,
            verdict=f"terminated at {life.terminated_at.isoformat()} ({life.ended or 'no reason recorded'}), "
            "no disruption decision named it: nothing to explain of the methods then",
            causes=[],
        )
    catalog = loaded if loaded is not None else recorded_catalog(log, sim)
    if decision is not None:
        folded = instant(log, decision.at, catalog, through=decision.observed_position)
    else:
        folded = instant(log, at, catalog)
    pool = folded.projection.pools.get(life.nodepool)
    row = folded.counters.get(life.nodepool)
    said = answer(folded.world(gates), name, pool, len(row.disrupting) if row is not None else 0)
    if said is None:  # not in the disruption projection: its creation was not folded
        raise ExplainError(f"nodeclaim {name}: not alive at {folded.at.isoformat()} in the log's fold")
    notes = []
    if pool is not None and pool.spec.replicas is not None and not gates.static_capacity:
        notes.append(
            f"nodepool {life.nodepool} is static (replicas {pool.spec.replicas}), but the {STATIC_CAPACITY} gate "
            f"is off here ({whence}): the Overprovisioned scale-down is not weighed, "
            "as the disruption service with the gate off does not weigh it"
        )
    gated = _GATED.get(decision.reason) if decision is not None else None
    if decision is not None:
        verdict = f"disrupted: {decision.text or decision.command}"
        if gated is not None and gated not in gates.on():
            notes.append(
                f"the decision's reason {decision.reason} is behind the {gated} gate, off here "
                f"({whence}): the pass replayed does not weigh it"
            )
        elif not said.taken:
            notes.append(
                "the pass replayed on the world that decision observed does not take it again: "
                f"the catalog here is the what-if's at {sim.told()} (docs/explain.md), "
                "the record's may have priced it otherwise"
            )
    else:
        verdict = said.verdict
    return m.Explanation(
        **common,
        at=folded.at,
        position=folded.position,
        state=said.state,
        disrupted=decision is not None,
        verdict=verdict,
        causes=[] if decision is not None else said.causes,
        instance_type=said.instance_type,
        capacity_type=said.capacity_type,
        price=said.price,
        methods=said.methods,
        budgets=said.budgets,
        passed=said.passed,
        notes=notes,
    )


_GATED = {OVERPROVISIONED: STATIC_CAPACITY, UNHEALTHY: NODE_REPAIR}
"""The forceful reasons a gate turns on: with it off, the replayed pass cannot take the claim again."""
_WHENCE = {
    g.LOG: "as the log recorded the gates",
    g.ENVIRONMENT: "NODEWRIGHT_FEATURE_GATES, the log records no gates",
    g.GIVEN: "the gates given",
}
"""A note's word on where the gate it names is off."""


def _gates(log: Sequence[RecordedEvent], at: datetime, gates: Gates | None, environment: Gates | None) -> g.Used:
    """The gates given; else those the log recorded in force at `at`; else the environment's."""
    if gates is not None:
        return g.given(gates.named())
    return g.used(log, at, lambda: (environment if environment is not None else Gates.now()).named())


def _claim(log: Sequence[RecordedEvent], nodeclaim: str | None, node: str | None) -> str:
    if node is not None:
        found = claim_of_node(log, node)
        if found is None:
            raise ExplainError(f"node {node!r}: no NodeClaim of the log registered a node of that name")
        return found
    if nodeclaim is None:
        raise ExplainError("name a nodeclaim or a node")
    return nodeclaim.removeprefix(STREAM_PREFIX)
