"""events.nodepool: the NodePool an event names, kept by PostgreSQL itself.

A generated column, so it can never disagree with the payload, whoever wrote the row: an audit
can split the log by pool (counters never cross pools) and fold the parts on separate cores.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

NODEPOOL = "CASE WHEN jsonb_typeof(data -> 'nodepool') = 'string' THEN data ->> 'nodepool' END"


def upgrade() -> None:
    op.add_column("events", sa.Column("nodepool", sa.Text(), sa.Computed(NODEPOOL, persisted=True), nullable=True))


def downgrade() -> None:
    op.drop_column("events", "nodepool")
