"""What `nodewright explain` answers, as one JSON object (`--output json`, docs/explain.md).

The causes are names a script can test: the disruption core's own where it has one
(`DoNotDisrupt`, `PodDisruptionBudget`, `Nominated`, `NodePoolNotFound`, `Unschedulable`,
`Budget`, `NodeHardLimit`), and `CAUSES` below for what the core only implies (a node not yet
Consolidatable, a replacement not cheaper, ...).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

NOT_INITIALIZED = "NotInitialized"
DELETING = "Deleting"
NOT_EMPTY = "NotEmpty"
EMPTY = "Empty"
NOT_CONSOLIDATABLE = "NotConsolidatable"
CONSOLIDATION_DISABLED = "ConsolidationDisabled"
WHEN_EMPTY = "WhenEmpty"
NO_PRICE = "NoPrice"
NOT_CHEAPER = "NotCheaper"
SPOT_TO_SPOT = "SpotToSpot"
TOO_MANY_REPLACEMENTS = "TooManyReplacements"
UNINITIALIZED_TARGET = "UninitializedTarget"
NOT_DRIFTED = "NotDrifted"
NOT_EXPIRED = "NotExpired"
NEVER_EXPIRES = "NeverExpires"
WITHIN_LIMIT = "WithinNodeLimit"
NO_NODE_LIMIT = "NoNodeLimit"
NOT_CHOSEN = "NotChosen"
BUSY = "CommandUnderWay"
ANOTHER_COMMAND = "AnotherCommandFirst"
AWAITING_RECHECK = "CommandAwaitsRecheck"
BALANCED_SCORE = "BalancedScore"
STATIC_POOL = "StaticNodePool"
WITHIN_REPLICAS = "WithinReplicas"
OVER_REPLICAS = "OverReplicas"
NODE_CLASS_NOT_READY = "NodeClassNotReady"
HEALTHY = "Healthy"
WITHIN_TOLERATION = "WithinToleration"
CAUSES = {
    NOT_INITIALIZED: "the claim is not initialized yet: no method looks at it",
    DELETING: "its deletion is already asked for, or a command under way takes it",
    NOT_EMPTY: "it runs pods that would need a place elsewhere (consolidation's, not emptiness's)",
    EMPTY: "it runs no pod that needs a place elsewhere (emptiness's, not consolidation's)",
    NOT_CONSOLIDATABLE: "consolidateAfter has not passed since its last pod event",
    CONSOLIDATION_DISABLED: "its pool's consolidateAfter is Never",
    WHEN_EMPTY: "its pool's consolidationPolicy is WhenEmpty",
    NO_PRICE: "the catalog has no price for its instance type, zone and capacity type",
    NOT_CHEAPER: "no replacement strictly cheaper than it",
    SPOT_TO_SPOT: "a spot node may not be replaced by spot (or not with enough cheaper types)",
    TOO_MANY_REPLACEMENTS: "its pods need more than one new node",
    UNINITIALIZED_TARGET: "its pods would go to a node not initialized yet",
    NOT_DRIFTED: "it matches its NodePool and the catalog",
    NOT_EXPIRED: "its expireAfter has not passed",
    NEVER_EXPIRES: "its expireAfter is Never",
    WITHIN_LIMIT: "its pool is within limits.nodes",
    NO_NODE_LIMIT: "its pool has no limits.nodes",
    NOT_CHOSEN: "its pool is over limits.nodes, and others go first",
    BUSY: "a graceful command of its pool is under way: over-limit removal waits",
    ANOTHER_COMMAND: "the pass took another command first (one graceful command per pass)",
    AWAITING_RECHECK: "a graceful command awaits its re-check: the pass asks no graceful method meanwhile",
    BALANCED_SCORE: "its pool is Balanced and the move scores below 1/k (what it saves against what it disrupts)",
    STATIC_POOL: "its pool is static (spec.replicas): consolidation never takes its nodes, StaticDrift replaces them",
    WITHIN_REPLICAS: "its static pool has no more claims than its replicas: no Overprovisioned scale-down",
    OVER_REPLICAS: "its static pool is over its replicas: the scale-down comes before a static drift replacement",
    NODE_CLASS_NOT_READY: "its static pool's node class is not Ready: no replacement can launch",
    HEALTHY: "no condition of its node matches a repair policy",
    WITHIN_TOLERATION: "a condition matches a repair policy, but not yet for as long as the policy tolerates",
}
"""The causes `shared.explain` names itself, each with what it means (docs/explain.md)."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Window(_Model):
    """A budget active at the instant and setting its reason's allowance there."""

    budget: int
    """Its index in the pool's `spec.disruption.budgets`."""
    nodes: str
    reasons: list[str] | None
    schedule: str | None = None
    duration: str | None = None
    time_zone: str = "UTC"
    start: datetime | None = None
    """The scheduled window holding the instant (None: the budget has no schedule)."""
    end: datetime | None = None
    start_local: str | None = None
    end_local: str | None = None


class Budget(_Model):
    """A reason's budget in the claim's pool at the instant."""

    reason: str
    allowed: int | None
    """None: unbounded."""
    remaining: int | None
    nodes: int
    disrupting: int
    windows: list[Window] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)


class Verdict(_Model):
    """One method's answer about the claim."""

    method: str
    """Expiration, Overprovisioned (a static pool, `StaticCapacity` on), OverLimit, NodeRepair
    (`NodeRepair` on), Emptiness, StaticDrift (a static pool), Drift, Consolidation: the pass's order."""
    reason: str
    """Its disruption reason: Expired, Overprovisioned, OverLimit, Unhealthy, Empty, Drifted,
    Underutilized."""
    applies: bool
    """Whether the claim is of the kind the method takes (expired, over the limit, empty,
    drifted, not empty): a method that does not apply is no cause."""
    disrupts: bool
    """Whether the method, asked about this claim alone at the instant, disrupts it."""
    cause: str | None = None
    """Why not (None when it disrupts)."""
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class Command(_Model):
    """A command the replayed pass finds at the instant."""

    reason: str
    nodepool: str
    candidates: list[str]
    replacements: int
    consolidation_type: str = ""


class Decision(_Model):
    """A recorded `DisruptionDecided` that names the claim, as `audit --explain` tells it."""

    decision_id: str
    reason: str
    at: datetime
    position: int
    observed_position: int
    nodepool: str
    candidates: list[str]
    replacements: list[str]
    command: str
    forceful: bool
    text: str
    """The audit's chapter: the decision and the budget snapshot the store checked it on."""
    budget_check: dict[str, Any] = Field(default_factory=dict)
    cancelled: str | None = None
    """Why it was cancelled, when it was (the claim then stayed)."""


class Explanation(_Model):
    nodeclaim: str
    node: str | None
    nodepool: str
    at: datetime
    position: int
    """The last log position folded into the world the methods were asked about."""
    state: str
    """running, not-initialized, deleting, or terminated (then no method is asked)."""
    disrupted: bool
    """Whether the log disrupted it by `at` (a decision not cancelled that named it)."""
    verdict: str
    """One sentence: what happened to it and why."""
    causes: list[str]
    """Why it was not disrupted, the most decisive first (empty when it was)."""
    instance_type: str | None = None
    capacity_type: str | None = None
    price: float | None = None
    """What it costs an hour in the catalog the methods priced it with."""
    seed: int = 0
    """The sim seed that catalog was generated at: the recorded run's when known."""
    seed_from: str = ""
    """Where the seed came from (a run's description, --seed), or that it was unknown."""
    gates: list[str] = Field(default_factory=list)
    """The feature gates on the world was built under."""
    gates_source: str = ""
    """Where `gates` came from: `log` (the disruption service's record in force at the instant),
    `environment` (`NODEWRIGHT_FEATURE_GATES`: the log records none, it is older) or `given`."""
    gates_from: str = ""
    """The same in words, with the record's time."""
    methods: list[Verdict] = Field(default_factory=list)
    budgets: dict[str, Budget] = Field(default_factory=dict)
    passed: list[Command] = Field(default_factory=list)
    """What the whole pass, replayed at the instant, decides (every pool)."""
    decision: Decision | None = None
    decisions: list[Decision] = Field(default_factory=list)
    """Every recorded decision that named the claim, cancelled ones too."""
    story: list[dict[str, Any]] = Field(default_factory=list)
    """`audit --explain`'s story of the claim up to `at`: position, at, type, text."""
    notes: list[str] = Field(default_factory=list)
