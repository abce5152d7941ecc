"""Tables of the event store, as SQLAlchemy Core metadata.

The migrations in `migrations/versions` create exactly this (a test compares them); the
naming convention gives every constraint a predictable name, so later migrations can refer to it.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Computed,
    DateTime,
    Identity,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

NOW = text("clock_timestamp()")
EVENT_NODEPOOL = "CASE WHEN jsonb_typeof(data -> 'nodepool') = 'string' THEN data ->> 'nodepool' END"

events = Table(
    "events",
    metadata,
    Column("position", BigInteger, Identity(always=True), primary_key=True),
    Column("event_id", Uuid, nullable=False, unique=True),
    Column("stream_id", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("type", Text, nullable=False),
    Column("schema_version", SmallInteger, nullable=False, server_default=text("1")),
    Column("data", JSONB, nullable=False),
    Column("metadata", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("occurred_at", DateTime(timezone=True), nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    # the pool the payload names (NULL when it names none): lets an audit split the log by pool
    Column("nodepool", Text, Computed(EVENT_NODEPOOL, persisted=True), nullable=True),
    # sha256 of the stream's previous hash and of this event's digest (migration 0006; NULL before it)
    Column("hash", LargeBinary, nullable=True),
    # how `hash` was made (`shared.policy.digests`): 1, PostgreSQL's canonical text; 2, the writer's
    # canonical JSON (migration 0007); 3, one hash linked to the pool's or the stream's previous event
    Column("digest_form", SmallInteger, nullable=False, server_default=text("1")),
    # the signing key's id and HMAC-SHA256 of `hash` under it (migration 0008; NULL when written without a key)
    Column("signature", LargeBinary, nullable=True),
    UniqueConstraint("stream_id", "version"),
)

nodepool_counters = Table(
    "nodepool_counters",
    metadata,
    Column("nodepool", Text, primary_key=True),
    Column("spec", JSONB, nullable=True),
    Column("nodes", Integer, nullable=False, server_default=text("0")),
    Column("in_flight", Integer, nullable=False, server_default=text("0")),
    Column("initialized", Integer, nullable=False, server_default=text("0")),
    Column("resources", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("disrupting", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("disrupting_by_reason", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("replacing", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("version", BigInteger, nullable=False, server_default=text("0")),
    Column("last_position", BigInteger, nullable=False, server_default=text("0")),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
    Column("chain_head", LargeBinary, nullable=True),  # the chain of the hashes of the events it counted
)

consumer_checkpoints = Table(
    "consumer_checkpoints",
    metadata,
    Column("consumer", Text, primary_key=True),
    Column("position", BigInteger, nullable=False, server_default=text("0")),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
)

outbox_checkpoint = Table(
    "outbox_checkpoint",
    metadata,
    Column("relay", Text, primary_key=True),
    Column("position", BigInteger, nullable=False, server_default=text("0")),
    Column("published", BigInteger, nullable=False, server_default=text("0")),
    Column("stream_sequence", BigInteger, nullable=False, server_default=text("0")),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=NOW),
)

store_identity = Table(
    "store_identity",
    metadata,
    Column("singleton", Boolean, primary_key=True, server_default=text("true")),
    Column("id", Uuid, nullable=False, server_default=text("gen_random_uuid()")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("chained_after", BigInteger, nullable=False, server_default=text("0")),
    CheckConstraint("singleton", name="store_identity_one_row"),
)
"""One row: the store's random id, which the relay stamps on every message (migration 0004)."""
