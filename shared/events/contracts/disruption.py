"""Disruption's decisions and what became of them."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from shared.events.contracts.base import DisruptionEvent

# --- Disruption ----------------------------------------------------------------------------------


class BudgetCheck(BaseModel):
    """What the reservation saw when it granted a disruption, for replay and `--explain`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    nodes: int
    disrupting: int
    allowed: int | None
    remaining: int | None
    node_limit: int | None
    pool_nodes: int
    active_budgets: list[int] = Field(default_factory=list, description="indexes of budgets active then")


class Unhealthy(BaseModel):
    """Node repair's evidence: the condition a repair policy matched, since when, and what the
    policy tolerates (the claim is due at since + toleration)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    condition: str
    status: str
    since: str = Field(description="the condition's lastTransitionTime (RFC 3339)")
    toleration_seconds: int = Field(ge=0)


class DisruptionDecided(DisruptionEvent):
    """Candidates are marked for `reason`; `replacements` are created in the same transaction.
    `budget_check` is filled in by the store inside the reserving transaction."""

    TYPE: ClassVar[str] = "DisruptionDecided"
    candidates: list[str] = Field(min_length=1)
    replacements: list[str] = Field(default_factory=list, description="names the replacements will be created with")
    replacement_nodepools: dict[str, str] = Field(
        default_factory=dict,
        description="the pool each replacement goes to where it is not `nodepool` (upstream launches a "
        "replacement wherever its simulation puts it)",
    )
    command_parts: list[str] = Field(
        default_factory=list,
        description="a command whose candidates span pools is one decision per pool, appended in one "
        "transaction and carried out as one: every part's decision_id, the first (which holds the "
        "replacements) first; empty for a command of one pool",
    )
    forceful: bool = False
    command: str = Field(default="", description="upstream's `<Reason>/<id>: <decision>: ...` text")
    decision: str = Field(default="delete", description="delete or replace")
    consolidation_type: str = Field(default="", description="empty, single, multi, or empty for other methods")
    savings: float | None = Field(default=None, description="estimated hourly savings of a consolidation")
    score: float | None = Field(
        default=None,
        description="a consolidation of a Balanced pool: its score in this part's pool (savings share over "
        "disruption share, approved at >= 0.5); none for other policies",
    )
    observed_position: int = Field(
        default=0, description="the log position the decision saw: a candidate touched after it is stale"
    )
    budget_check: BudgetCheck | None = None
    unhealthy: Unhealthy | None = Field(default=None, description="node repair's evidence (reason Unhealthy)")

    @model_validator(mode="after")
    def _planned_pools(self) -> DisruptionDecided:
        unknown = sorted(set(self.replacement_nodepools) - set(self.replacements))
        if unknown:
            raise ValueError(f"replacement_nodepools: {unknown[0]!r} is not one of the replacements")
        if self.command_parts:
            if self.decision_id not in self.command_parts or len(set(self.command_parts)) != len(self.command_parts):
                raise ValueError("command_parts: must name this decision and each part once")
            if self.replacements and self.command_parts[0] != self.decision_id:
                raise ValueError("command_parts: only the first part holds the replacements")
        return self

    @property
    def parts(self) -> list[str]:
        """The decision ids of the command this decision is part of (itself alone, mostly)."""
        return self.command_parts or [self.decision_id]

    def pool_of(self, replacement: str) -> str:
        """The pool a replacement of this decision is launched in."""
        return self.replacement_nodepools.get(replacement, self.nodepool)


class DisruptionValidated(DisruptionEvent):
    """The command passed its re-check: `kept` go ahead, `dropped` (candidate -> why) no longer
    count as disrupting. A replace command's replacements are created in the same append."""

    TYPE: ClassVar[str] = "DisruptionValidated"
    kept: list[str] = Field(min_length=1)
    dropped: dict[str, str] = Field(default_factory=dict)


class DisruptionCancelled(DisruptionEvent):
    TYPE: ClassVar[str] = "DisruptionCancelled"
    candidates: list[str]
    why: str = ""


class DisruptionCompleted(DisruptionEvent):
    """The candidates are handed to termination (their NodeClaimDeletionRequested are in the same
    append); they count as disrupting until they are terminated."""

    TYPE: ClassVar[str] = "DisruptionCompleted"
