"""A hash chain over the log, extended by the write itself, so that a changed, removed, inserted or
reordered event shows.

Every event gets `hash`: sha256 of the previous event's hash in its stream and of its own digest
(sha256 of `nodewright_event_canonical`, the event's fields as PostgreSQL prints them); the first
event of a stream hashes to its digest. Each pool's counter row keeps `chain_head`, the chain of
the hashes of the events it counted, in position order, extended under the row lock the write
already holds: removing a pool's newest event shows there. Events from before this migration stay
unchained (`store_identity.chained_after`). `docs/store.md`, "The hash chain", says what each
check finds.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("hash", sa.LargeBinary(), nullable=True))
    op.add_column("nodepool_counters", sa.Column("chain_head", sa.LargeBinary(), nullable=True))
    op.add_column(
        "store_identity",
        sa.Column("chained_after", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
    )
    op.execute("UPDATE store_identity SET chained_after = (SELECT coalesce(max(position), 0) FROM events)")
    # STABLE (not IMMUTABLE): its text depends on no setting, but convert_to and extract are stable,
    # and a STABLE SQL function is inlined into the statements that call it.
    op.execute(
        """
        CREATE FUNCTION nodewright_event_canonical(
            event_id uuid, stream_id text, version integer, type text, schema_version smallint,
            data jsonb, metadata jsonb, occurred_at timestamptz
        ) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
            SELECT concat_ws(chr(31), event_id::text, stream_id, version::text, type, schema_version::text,
                             extract(epoch FROM occurred_at)::text, data::text, metadata::text)
        $$
        """
    )
    op.execute(
        """
        CREATE FUNCTION nodewright_event_digest(
            event_id uuid, stream_id text, version integer, type text, schema_version smallint,
            data jsonb, metadata jsonb, occurred_at timestamptz
        ) RETURNS bytea LANGUAGE sql STABLE PARALLEL SAFE AS $$
            SELECT sha256(convert_to(nodewright_event_canonical(
                event_id, stream_id, version, type, schema_version, data, metadata, occurred_at), 'UTF8'))
        $$
        """
    )
    # plpgsql, not sql: as an aggregate's step a SQL function is never inlined, and each call
    # through the SQL-function executor cost the write more than the hashing itself.
    op.execute(
        "CREATE FUNCTION nodewright_chain_step(state bytea, next bytea) RETURNS bytea"
        " LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS 'BEGIN RETURN sha256(state || next); END'"
    )
    # STRICT step, no initial state: the first non-null input starts the chain as it is.
    op.execute("CREATE AGGREGATE nodewright_chain(bytea) (SFUNC = nodewright_chain_step, STYPE = bytea)")
    for name in (
        "FUNCTION nodewright_event_canonical(uuid, text, integer, text, smallint, jsonb, jsonb, timestamptz)",
        "FUNCTION nodewright_event_digest(uuid, text, integer, text, smallint, jsonb, jsonb, timestamptz)",
        "FUNCTION nodewright_chain_step(bytea, bytea)",
        "AGGREGATE nodewright_chain(bytea)",
    ):
        op.execute(f"ALTER {name} OWNER TO nodewright_owner")


def downgrade() -> None:
    op.execute("DROP AGGREGATE nodewright_chain(bytea)")
    op.execute("DROP FUNCTION nodewright_chain_step(bytea, bytea)")
    op.execute("DROP FUNCTION nodewright_event_digest(uuid, text, integer, text, smallint, jsonb, jsonb, timestamptz)")
    op.execute(
        "DROP FUNCTION nodewright_event_canonical(uuid, text, integer, text, smallint, jsonb, jsonb, timestamptz)"
    )
    op.drop_column("store_identity", "chained_after")
    op.drop_column("nodepool_counters", "chain_head")
    op.drop_column("events", "hash")
