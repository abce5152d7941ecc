"""Digests the writer computes: `events.digest_form` says how an event's digest is made.

Form 1 (migration 0006): sha256 of `nodewright_event_canonical`, the fields as PostgreSQL prints
them. Every write then made PostgreSQL print each payload, hash it, look up the stream's
previous hash and chain the pool's head through a PL/pgSQL step (half again its time per event
of a micro-batched write: 0.82-0.86x the throughput), and the audit did it all again in a second
pass over the log (1.9x its time). Form 2 is sha256 of the fields as one JSON array with sorted
keys (`shared.policy.chain.canonical`): the writer computes it from what it sends, links it to
the stream's previous hash and extends the pool's head from what its snapshot already vouches
for, and the audit rebuilds it from the rows its replay reads.

Each event names its form, so a writer still on form 1 (its statement computes the hash) and
one on form 2 may share a log; the chain and the pools' heads run on across both. The column
is not under the hash: changing it only makes the event fail its check.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A constant default: no table rewrite; rows written so far, and by form-1 writers, are form 1.
    op.add_column("events", sa.Column("digest_form", sa.SmallInteger(), nullable=False, server_default=sa.text("1")))


def downgrade() -> None:
    op.drop_column("events", "digest_form")
