"""The bus: the relay remembers the stream sequence of its checkpoint, and commits wake it.

`outbox_checkpoint.stream_sequence` is the JetStream sequence of the message that carried the
checkpoint's position: a projection consumer folds the store up to that position and follows the
stream from the next sequence (`shared.bus.projection`). A statement trigger on `events` notifies
`nodewright_events` at commit, so the relay waits on LISTEN instead of polling the table.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "outbox_checkpoint",
        sa.Column("stream_sequence", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
    )
    op.execute(
        """
        CREATE FUNCTION nodewright_events_committed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('nodewright_events', '');
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        "CREATE TRIGGER events_committed AFTER INSERT ON events"
        " FOR EACH STATEMENT EXECUTE FUNCTION nodewright_events_committed()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER events_committed ON events")
    op.execute("DROP FUNCTION nodewright_events_committed()")
    op.drop_column("outbox_checkpoint", "stream_sequence")
