"""Signed events: `events.signature`, the key's id and HMAC-SHA256 of the event's hash under a key
the services hold (`NODEWRIGHT_SIGNING_KEY`) and the database does not (`shared.policy.digests.
Signer`). A superuser can recompute a rewritten or forged event's hash, not its signature.

NULL for events written without a key: every event before this migration, and every event of
a deployment that runs without one. The writer role inserts it as it inserts `hash` (its INSERT
is on the whole table); no role may update it (migration 0005's trigger). `docs/store.md`, "The
hash chain", says what the audit makes of it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("signature", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    op.drop_column("events", "signature")
