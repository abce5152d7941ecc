"""The answer about one claim of a world: each method's verdict (`methods`), the budgets they
read, what the whole pass decides there, and the causes in order, with one sentence to say it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from shared.api.nodepool import NodePool
from shared.disruption.world import World
from shared.events.contracts import FORCEFUL_REASONS
from shared.explain import model as m
from shared.explain.methods import Asked, passed, verdicts
from shared.policy.budgets import REASONS


@dataclass(frozen=True, slots=True)
class Answer:
    state: str
    methods: list[m.Verdict]
    budgets: dict[str, m.Budget]
    passed: list[m.Command]
    causes: list[str]
    verdict: str
    taken: bool
    """Whether the replayed pass takes the claim at this instant."""
    price: float | None = None
    instance_type: str | None = None
    capacity_type: str | None = None


def answer(world: World, name: str, pool: NodePool | None, disrupting: int) -> Answer | None:
    """None when the world holds no such claim (not created yet, or ended)."""
    node = next((n for n in world.nodes if n.state.nodeclaim == name), None)
    if node is None:
        return None
    # each pool's launchable options, computed once for every simulation below (the pass's own
    # methods prepare them per method; `with_waiting` keeps them, `prepared` then returns as is)
    world = replace(world, cluster=world.cluster.prepared())
    asked = Asked(world, node, pool, disrupting)
    told = verdicts(asked)
    for reason in REASONS:  # every graceful reason's budget, whether or not a verdict read it
        asked.budget(reason)
    commands = passed(world)
    taken = [c for c in commands if name in c.candidates]
    state = "running"
    if not node.state.initialized:
        state = "not-initialized"
    elif node.state.deleting:
        state = "deleting"
    causes = list(dict.fromkeys(v.cause for v in told if v.applies and not v.disrupts and v.cause))
    if taken:
        causes = []
        verdict = f"the pass at {_at(world.now)} takes it: {_command(taken[0])}"
    elif world.validating and any(v.disrupts for v in told if v.reason not in FORCEFUL_REASONS):
        causes.insert(0, m.AWAITING_RECHECK)
        first = next(v for v in told if v.disrupts)
        verdict = (
            f"{first.method} alone would take it ({first.message}), but at {_at(world.now)} a graceful "
            "command awaits its re-check, and the pass asks no graceful method until it is carried out "
            "or cancelled"
        )
    elif any(v.disrupts for v in told):
        causes.insert(0, m.ANOTHER_COMMAND)
        first = next(v for v in told if v.disrupts)
        took = "; ".join(_command(c) for c in commands) or "nothing"
        verdict = (
            f"{first.method} alone would take it ({first.message}), but the pass at {_at(world.now)} takes "
            f"{took} first: one graceful command per pass, cheapest to disrupt first"
        )
    else:
        first_cause = next((v for v in told if v.applies and v.cause), None)
        why = f"{first_cause.method}: {first_cause.message}" if first_cause else "no method applies to it"
        verdict = f"not disrupted at {_at(world.now)}: {why}"
    moving = node.movable
    return Answer(
        state,
        told,
        {str(k): asked.budgets[k] for k in REASONS if k in asked.budgets},
        commands,
        causes,
        verdict,
        bool(taken),
        moving.price if moving else None,
        moving.instance_type if moving else None,
        moving.capacity_type if moving else None,
    )


def _command(c: m.Command) -> str:
    replaced = f" -> {c.replacements} replacement(s)" if c.replacements else ""
    kind = f" ({c.consolidation_type})" if c.consolidation_type else ""
    return f"{c.reason}{kind} of [{', '.join(c.candidates)}] in nodepool {c.nodepool}{replaced}"


def _at(at: datetime) -> str:
    return at.isoformat()


def summary(commands: Sequence[m.Command]) -> list[str]:
    return [_command(c) for c in commands]
