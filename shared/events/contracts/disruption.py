"""Disruption's decisions and what became of them."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

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


class DisruptionDecided(DisruptionEvent):
    """Candidates are marked for `reason`; `replacements` are created in the same transaction.
    `budget_check` is filled in by the store inside the reserving transaction."""

    TYPE: ClassVar[str] = "DisruptionDecided"
    candidates: list[str] = Field(min_length=1)
    replacements: list[str] = Field(default_factory=list, description="names the replacements will be created with")
    forceful: bool = False
    command: str = Field(default="", description="upstream's `<Reason>/<id>: <decision>: ...` text")
    decision: str = Field(default="delete", description="delete or replace")
    consolidation_type: str = Field(default="", description="empty, single, multi, or empty for other methods")
    savings: float | None = Field(default=None, description="estimated hourly savings of a consolidation")
    observed_position: int = Field(
        default=0, description="the log position the decision saw: a candidate touched after it is stale"
    )
    budget_check: BudgetCheck | None = None


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
