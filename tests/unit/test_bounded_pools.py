"""Every NodePool validation accepts can be computed with: generated NodePools with values at,
near and past the bounds of `shared.api.bounds` go through `validate_nodepool`, and each
accepted one through every pure core a service runs it in: its budgets at instants and over a
calendar, its limits, one scheduling pass, every disruption method and a drain. Nothing may
raise (the issue: `expireAfter: 876000000h` and `limits.nodes: "1e1000000"` were accepted and
then crash-looped the disruption service and the scheduler)."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shared.api.bounds import MAX_DURATION, MAX_INT32, MAX_INT64, MAX_QUANTITY, MAX_QUANTITY_MILLI
from shared.api.instants import EARLIEST, LATEST
from shared.api.labels import NODEPOOL_LABEL
from shared.api.nodepool import ConsolidationPolicy, DisruptionReason, NodePool
from shared.api.quantity import format_quantity, parse
from shared.api.validation import validate_nodepool
from shared.disruption.candidates import CandidatePod, NodeState
from shared.disruption.consolidatable import consolidatable_at
from shared.disruption.expiration import Expiring, expiration, next_expiry
from shared.disruption.overlimit import over_limit
from shared.disruption.passes import forceful, graceful
from shared.disruption.simulation import ClusterView
from shared.disruption.world import Node, PoolRules, World
from shared.policy.budgets import REASONS, DisruptionBudgets
from shared.policy.calendar import CalendarTooLarge, budget_calendar
from shared.policy.limits import NodeLimit, exceeded_limits, remaining_resources
from shared.policy.overlimit import ClaimFacts, lifetime_remaining
from shared.policy.pods import PodFacts
from shared.scheduling.packing import schedule
from shared.scheduling.requirements import Requirements, ValueSet
from shared.scheduling.values import NodeCapacity, PendingPod, PoolTemplate
from shared.termination.pods import DrainPod
from shared.termination.steps import Termination, drain
from tests.conftest import nodepool_doc
from tests.unit.disruption.fixtures import CATALOG, GI, movable

POOL = "a"
MAX_SECONDS = int(MAX_DURATION.total_seconds())  # 2562047h47m16s: the CRD's patterns have no fractions


def _go(seconds: int, *, with_seconds: bool = True) -> str:
    hours, rest = divmod(seconds, 3600)
    text = f"{hours}h{rest // 60}m"
    return f"{text}{rest % 60}s" if with_seconds else text


# Accepted values: ordinary ones, the bounds themselves, and anything between.
durations = st.sampled_from(["0s", "30s", "5m", "720h", "2562047h47m16s"]) | st.integers(0, MAX_SECONDS).map(_go)
nillable = durations | st.just("Never")
budget_durations = st.sampled_from(["1m", "9h", "2562047h47m"]) | st.integers(0, MAX_SECONDS // 60).map(
    lambda minutes: _go(minutes * 60, with_seconds=False)
)
_AT_BOUND = ["9223372036854775807m", "-9223372036854775807m", "9223372036854775.807", "8Pi", "1e15", "1e-1000000"]
quantities = (
    st.sampled_from(["0", "1", "100m", "1n", "16Gi", "-1", *_AT_BOUND])
    | st.integers(-MAX_QUANTITY_MILLI, MAX_QUANTITY_MILLI).map(lambda n: f"{n}m")
    | st.builds(
        lambda mantissa, suffix: f"{mantissa}{suffix}",
        st.integers(0, 9999),
        st.sampled_from(["", "n", "u", "m", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi", "e3", "e9", "e-3"]),
    ).filter(lambda text: parse(text).copy_abs() <= MAX_QUANTITY)
)
budget_nodes = st.sampled_from(["0", "1", "10%", "100%", str(MAX_INT32)]) | st.integers(0, MAX_INT32).map(str)
crons = st.sampled_from(["@daily", "@hourly", "*/2 * * * *", "0 9 * * mon-fri", "0 0 29 2 *", "30 1 1 1 *"])
zones = st.sampled_from([None, "UTC", "America/Chicago", "Australia/Lord_Howe", "US/Central", "Etc/GMT+12"])
bound_values = st.sampled_from(["0", "1", str(MAX_INT64)]) | st.integers(0, MAX_INT64).map(str)

# Past a bound: one field spoiled, and the error that must name it.
BUDGET0 = "spec.disruption.budgets[0]"
SPOILED = [
    (("spec", "template", "spec", "expireAfter"), "2562047h47m17s", "spec.template.spec.expireAfter"),
    (("spec", "template", "spec", "expireAfter"), "876000000h", "spec.template.spec.expireAfter"),
    (("spec", "template", "spec", "terminationGracePeriod"), "2562048h", "spec.template.spec.terminationGracePeriod"),
    (("spec", "disruption", "consolidateAfter"), "99999999999999999h", "spec.disruption.consolidateAfter"),
    (("spec", "disruption", "budgets", 0, "duration"), "99999999999999999h", f"{BUDGET0}.duration"),
    (("spec", "disruption", "budgets", 0, "duration"), "2562047h48m", f"{BUDGET0}.duration"),
    (("spec", "disruption", "budgets", 0, "nodes"), str(MAX_INT32 + 1), f"{BUDGET0}.nodes"),
    (("spec", "disruption", "budgets", 0, "timeZone"), "localtime", f"{BUDGET0}.timeZone"),
    (("spec", "disruption", "budgets", 0, "timeZone"), "Factory", f"{BUDGET0}.timeZone"),
    (("spec", "disruption", "budgets", 0, "timeZone"), "posix/America/Chicago", f"{BUDGET0}.timeZone"),
    (("spec", "limits", "nodes"), "1e1000000", "spec.limits[nodes]"),
    (("spec", "limits", "cpu"), "9223372036854775808m", "spec.limits[cpu]"),
    (("spec", "limits", "memory"), "-1E+2147483648", "spec.limits[memory]"),
    (("spec", "limits", "memory"), "9Pi", "spec.limits[memory]"),
    (
        ("spec", "template", "spec", "requirements", 0, "values", 0),
        str(MAX_INT64 + 1),
        "spec.template.spec.requirements[0].values",
    ),
    (("spec", "weight"), 101, "spec.weight"),
    (("metadata", "labels", "team"), "x" * 64, "metadata.labels"),
    (("metadata", "labels", "a/b/c"), "x", "metadata.labels"),
    (("metadata", "annotations", "example.com/blob"), "x" * (256 * 1024), "metadata.annotations"),
    (("spec", "template", "metadata", "annotations", "bad key"), "x", "spec.template.metadata.annotations"),
]


@st.composite
def budgets(draw: Any) -> dict[str, Any]:
    budget: dict[str, Any] = {"nodes": draw(budget_nodes)}
    if draw(st.booleans()):
        budget["schedule"] = draw(crons)
        budget["duration"] = draw(budget_durations)
        if (zone := draw(zones)) is not None:
            budget["timeZone"] = zone
    if draw(st.booleans()):
        budget["reasons"] = draw(
            st.lists(st.sampled_from([r.value for r in DisruptionReason]), max_size=3, unique=True)
        )
    return budget


@st.composite
def nodepools(draw: Any) -> dict[str, Any]:
    doc = nodepool_doc(**{"metadata.name": POOL})
    spec = doc["spec"]
    template = spec["template"]["spec"]
    template["expireAfter"] = draw(nillable)
    if draw(st.booleans()):
        template["terminationGracePeriod"] = draw(durations)
    template["requirements"] = [
        {"key": "example.com/generation", "operator": draw(st.sampled_from(["Gt", "Lt", "Gte", "Lte"])), "values": [v]}
        for v in draw(st.lists(bound_values, min_size=1, max_size=2))
    ]
    spec["disruption"] = {
        "consolidationPolicy": draw(st.sampled_from([p.value for p in ConsolidationPolicy])),
        "consolidateAfter": draw(nillable),
        "budgets": draw(st.lists(budgets(), min_size=1, max_size=4)),
        "nodeLimitMode": draw(st.sampled_from(["Hard", "Soft"])),
    }
    limits = draw(st.dictionaries(st.sampled_from(["cpu", "memory", "nodes"]), quantities, max_size=3))
    if limits:
        spec["limits"] = limits
    if draw(st.booleans()):
        spec["weight"] = draw(st.integers(1, 100))
    return doc


def _spoil(doc: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    node: Any = doc
    for part in path[:-1]:
        node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
    if path[-1] == "timeZone":
        node.setdefault("schedule", "@daily")
        node.setdefault("duration", "1h")
    node[path[-1]] = value


instants = st.sampled_from([EARLIEST, datetime(2026, 11, 23, 12, tzinfo=UTC), LATEST - timedelta(seconds=1)])
node_counts = st.sampled_from([0, 1, 7, 2**31 - 1])


def _template(pool: NodePool, remaining: dict[str, Decimal] | None) -> PoolTemplate:
    """The pool as the scheduler's view makes it (`shared.scheduling.view.SchedulingView.templates`)."""
    spec = pool.spec.template.spec
    requirements = Requirements.of(spec.requirements)
    for key, value in pool.spec.template.labels.items():
        requirements.add(ValueSet.exactly(key, value))
    return PoolTemplate(pool.name, requirements, pool.spec.weight or 0, tuple(spec.taints or ()), remaining)


def _budget_cores(pool: NodePool, now: datetime, nodes: int) -> DisruptionBudgets:
    budgets = DisruptionBudgets.of(pool)
    for at in (EARLIEST, now, LATEST - timedelta(seconds=1)):
        status = budgets.status(at, nodes, disrupting=min(nodes, 3))
        assert all(status.remaining(r) is None or status.remaining(r) >= 0 for r in REASONS)
    start = min(now, LATEST - timedelta(days=1))
    with contextlib.suppress(CalendarTooLarge):  # refused with its own error (exit 2 in the CLI), never a crash
        budget_calendar(budgets, start, start + timedelta(days=1), nodes, max_windows=25_000)
    return budgets


def _limit_cores(pool: NodePool, nodes: int) -> dict[str, Decimal] | None:
    limit = NodeLimit.of(pool, nodes)
    assert limit.headroom is None or limit.headroom >= 0
    assert limit.excess >= 0 and limit.can_provision(3) in (True, False) and not limit.blocks_replacements(0)
    limits = {name: q.value for name, q in (pool.spec.limits or {}).items()}
    usage = {"cpu": Decimal(nodes) * 64, "memory": Decimal(nodes) * 512 * GI, "nodes": Decimal(nodes)}
    for value in limits.values():  # what the scheduler's metrics and the summaries do with them
        assert float(value) == float(value) and 0 < len(format_quantity(value)) < 40
    exceeded_limits(limits, usage, {"cpu": Decimal(64), "memory": 512 * GI})
    return remaining_resources(limits, usage) if limits else None


def _world(pool: NodePool, now: datetime, budgets: DisruptionBudgets, template: PoolTemplate) -> World:
    nodes_counted = 3
    status = budgets.status(now, nodes_counted, 1)
    rules = PoolRules(
        name=POOL,
        consolidate_after=pool.spec.disruption.consolidate_after_timedelta,
        when_empty=pool.spec.disruption.consolidation_policy == ConsolidationPolicy.WHEN_EMPTY,
        nodes=nodes_counted,
        allowed={r: status.allowed(r) for r in REASONS},
        remaining={r: status.remaining(r) for r in REASONS},
        node_limit=NodeLimit.of(pool, nodes_counted),
    )
    expire_after = pool.spec.template.spec.expire_after_timedelta
    old = max(now - timedelta(days=1000), EARLIEST)
    pods = (PendingPod("default/web", {"cpu": Decimal(1), "memory": GI}),)
    world_nodes = []
    for name, created, busy, drift in (
        ("empty", old, False, None),
        ("busy", now, True, None),
        ("drift", old, True, "Drifted"),
    ):
        state = NodeState(
            name,
            POOL,
            node=name,
            initialized=True,
            pods=(CandidatePod("default", f"web-{name}", owner_kind="ReplicaSet", started_at=old),) if busy else (),
            grace_period=pool.spec.template.spec.termination_grace_period is not None,
        )
        facts = ClaimFacts(
            name,
            launched=True,
            created_at=created,
            expire_after=expire_after,
            pods=(PodFacts(f"default/web-{name}", do_not_disrupt="2562047h47m16s", start_time=old),) if busy else (),
        )
        world_nodes.append(
            Node(
                state,
                facts,
                initialized_at=created,
                last_pod_event=created if busy else None,
                movable=movable(name, pods if busy else (), 8.0),
                drift=drift,
                drifted_since=old if drift else None,
            )
        )
    capacity = tuple(
        NodeCapacity(
            n.state.nodeclaim, {NODEPOOL_LABEL: POOL}, [], {"cpu": Decimal(7), "memory": 28 * GI, "pods": Decimal(100)}
        )
        for n in world_nodes
    )
    cluster = ClusterView(capacity, (template,), CATALOG, now=now)
    return World(now, {POOL: rules}, world_nodes, cluster)


def _disruption_cores(pool: NodePool, now: datetime, budgets: DisruptionBudgets, template: PoolTemplate) -> None:
    world = _world(pool, now, budgets, template)
    forceful(world)
    graceful(world)
    claims = [n.facts for n in world.nodes]
    expiring = [Expiring(c.name, c.created_at, c.expire_after) for c in claims]
    expired, upcoming = expiration(expiring, now), next_expiry(expiring, now)
    assert expired is None or expired.candidates
    assert upcoming is None or upcoming > now
    over_limit(claims, world.pools[POOL].node_limit.limit, now)
    for claim in claims:
        assert 0.0 <= lifetime_remaining(claim, now) <= 1.0
    consolidatable_at(pool.spec.disruption.consolidate_after_timedelta, now, None)


def _termination_core(pool: NodePool, now: datetime) -> None:
    grace = pool.spec.template.spec.termination_grace_period_timedelta
    t = Termination("c1", POOL, requested_at=now, node="c1", grace_period=grace, draining_since=now)
    drain(t, [DrainPod("default/web", grace_seconds=30, started_at=now)], now + timedelta(seconds=1))


def _at_every_bound() -> dict[str, Any]:
    """A NodePool with every value at its bound at once."""
    at = "2562047h47m16s"
    budgets = [
        {"nodes": str(MAX_INT32), "schedule": "*/2 * * * *", "duration": "2562047h47m", "timeZone": "America/Chicago"},
        {"nodes": "100%", "schedule": "0 0 29 2 *", "duration": "2562047h47m", "reasons": ["Drifted"]},
        {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "2562047h47m", "timeZone": "Australia/Lord_Howe"},
    ]
    return nodepool_doc(
        **{
            "metadata.name": POOL,
            "spec.template.spec.expireAfter": at,
            "spec.template.spec.terminationGracePeriod": at,
            "spec.template.spec.requirements": [
                {"key": "example.com/generation", "operator": "Lt", "values": [str(MAX_INT64)]}
            ],
            "spec.disruption": {"consolidateAfter": at, "budgets": budgets},
            "spec.limits": {"nodes": "9223372036854775807m", "cpu": "-9223372036854775807m", "memory": "8Pi"},
            "spec.weight": 100,
        }
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodepools(), instants, node_counts)
@example(_at_every_bound(), EARLIEST, MAX_INT32)
@example(_at_every_bound(), LATEST - timedelta(seconds=1), MAX_INT32)
@example(_at_every_bound(), datetime(2026, 11, 23, 12, tzinfo=UTC), 0)
def test_every_accepted_nodepool_runs_through_every_core(document, now, nodes):
    result = validate_nodepool(document)
    assert result.valid, result.errors
    pool = result.nodepool
    assert pool is not None
    budgets = _budget_cores(pool, now, nodes)
    remaining = _limit_cores(pool, nodes)
    template = _template(pool, remaining)
    pending = [PendingPod(f"default/p{i}", {"cpu": Decimal(1), "memory": GI}, created_at=now) for i in range(3)]
    schedule(pending, [], [template], CATALOG, now=now)
    _disruption_cores(pool, now, budgets, template)
    _termination_core(pool, now)


@settings(max_examples=100, deadline=None)
@given(nodepools(), st.sampled_from(SPOILED))
def test_a_value_past_its_bound_is_refused_naming_its_field(document, spoiled):
    path, value, field = spoiled
    _spoil(document, path, value)
    result = validate_nodepool(document)
    assert not result.valid
    assert any(e.path == field for e in result.errors), (field, result.errors)
