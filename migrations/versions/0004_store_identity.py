"""The store's identity: one random id, made once, that the relay stamps on every message.

A deployment's stream outlives a database that is wiped or replaced (its NATS data kept), and
event ids repeat between stores that play the same scenario: without the store's id in the
message id and a header, JetStream would drop the new store's events as duplicates and the
consumers would apply the old store's events at the new store's positions.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "store_identity",
        sa.Column("singleton", sa.Boolean(), primary_key=True, server_default=sa.text("true")),
        sa.Column("id", sa.Uuid(), nullable=False, server_default=sa.text("gen_random_uuid()")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")),
        sa.CheckConstraint("singleton", name="store_identity_one_row"),
    )
    op.execute("INSERT INTO store_identity DEFAULT VALUES")


def downgrade() -> None:
    op.drop_table("store_identity")
