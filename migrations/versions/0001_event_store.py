"""The event store: events, per-NodePool counters, consumer checkpoints, the outbox checkpoint.

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

NOW = sa.text("clock_timestamp()")
EMPTY = sa.text("'{}'::jsonb")
ZERO = sa.text("0")


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("position", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("stream_id", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("schema_version", sa.SmallInteger(), server_default=sa.text("1"), nullable=False),
        sa.Column("data", postgresql.JSONB(), nullable=False),
        sa.Column("metadata", postgresql.JSONB(), server_default=EMPTY, nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("position", name="pk_events"),
        sa.UniqueConstraint("event_id", name="uq_events_event_id"),
        sa.UniqueConstraint("stream_id", "version", name="uq_events_stream_id_version"),
    )
    op.create_table(
        "nodepool_counters",
        sa.Column("nodepool", sa.Text(), nullable=False),
        sa.Column("spec", postgresql.JSONB(), nullable=True),
        sa.Column("nodes", sa.Integer(), server_default=ZERO, nullable=False),
        sa.Column("in_flight", sa.Integer(), server_default=ZERO, nullable=False),
        sa.Column("initialized", sa.Integer(), server_default=ZERO, nullable=False),
        sa.Column("resources", postgresql.JSONB(), server_default=EMPTY, nullable=False),
        sa.Column("disrupting", postgresql.JSONB(), server_default=EMPTY, nullable=False),
        sa.Column("disrupting_by_reason", postgresql.JSONB(), server_default=EMPTY, nullable=False),
        sa.Column("replacing", postgresql.JSONB(), server_default=EMPTY, nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=ZERO, nullable=False),
        sa.Column("last_position", sa.BigInteger(), server_default=ZERO, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("nodepool", name="pk_nodepool_counters"),
    )
    op.create_table(
        "consumer_checkpoints",
        sa.Column("consumer", sa.Text(), nullable=False),
        sa.Column("position", sa.BigInteger(), server_default=ZERO, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("consumer", name="pk_consumer_checkpoints"),
    )
    op.create_table(
        "outbox_checkpoint",
        sa.Column("relay", sa.Text(), nullable=False),
        sa.Column("position", sa.BigInteger(), server_default=ZERO, nullable=False),
        sa.Column("published", sa.BigInteger(), server_default=ZERO, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("relay", name="pk_outbox_checkpoint"),
    )


def downgrade() -> None:
    op.drop_table("outbox_checkpoint")
    op.drop_table("consumer_checkpoints")
    op.drop_table("nodepool_counters")
    op.drop_table("events")
