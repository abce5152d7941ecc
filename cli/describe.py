"""`nodewright describe`: each NodePool's disruption budgets and limits, as a table."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from shared.api.documents import DocumentError, load_nodepools
from shared.api.nodepool import NodePool
from shared.runtime.inputs import limits_now, read_text


def nodepool_table(nodepool: NodePool) -> Table:
    spec = nodepool.spec
    disruption = spec.disruption
    limits = ", ".join(f"{k}={v}" for k, v in (spec.limits or {}).items()) or "none"
    title = (
        f"NodePool {nodepool.name}: limits {limits}; nodeLimitMode {disruption.node_limit_mode}; "
        f"{disruption.consolidation_policy} after {disruption.consolidate_after}; "
        f"expireAfter {spec.template.spec.expire_after}"
    )
    table = Table(title=title, title_justify="left")
    for column in ("#", "nodes", "reasons", "schedule", "duration", "timeZone"):
        table.add_column(column)
    for i, budget in enumerate(disruption.budgets):
        table.add_row(
            str(i),
            budget.nodes,
            ", ".join(budget.reasons) if budget.reasons else "all",
            budget.schedule or "always",
            budget.duration or "-",
            budget.time_zone or ("UTC" if budget.schedule else "-"),
        )
    return table


def nodepools_in(path: Path) -> list[NodePool]:
    """The valid NodePools of a file a user gave (`describe`, `budgets`): InputError or
    DocumentError, naming the file, for anything else."""
    limits = limits_now()
    try:
        return load_nodepools(read_text(path, limits), limits.max_nesting)
    except DocumentError as exc:
        raise DocumentError(f"{path}: {exc}") from None


def describe_files(paths: list[Path], console: Console) -> None:
    for path in paths:
        for nodepool in nodepools_in(path):
            console.print(nodepool_table(nodepool))
