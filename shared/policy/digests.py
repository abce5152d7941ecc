"""How an event's hash is made, in each digest form (`events.digest_form`). The writer makes it
(`shared.store.write`); the audit and an exported file's check remake it (`shared.policy.chain`).

1. sha256 of `nodewright_event_canonical`, the fields as PostgreSQL prints them (migration 0006);
   hash = sha256(stream's previous hash || digest), a pool's head chains its events' hashes.
2. sha256 of `canonical`, the fields as one JSON array (migration 0007); linked as form 1.
3. What every write makes now (no migration: the column takes any form): one sha256 per event,
   hash = sha256(previous || `event_key` || `payload_text`), where previous is the hash of the
   pool's previous counted event for an event a pool counts, else of the stream's previous
   event (none for the first). A pool's head is its newest counted event's hash. Forms 1 and 2
   cost the audit three hashes per counted event; this, one.

Beside the hash: an event's signature (`Signer`, with `NODEWRIGHT_SIGNING_KEY`), and the term a
stream's head adds to the heads' digest (`head_term`).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson

SEPARATOR = "\x1f"
SQL_TEXT = 1
"""Digest form 1: sha256 of PostgreSQL's canonical text (migration 0006)."""
WRITER_JSON = 2
"""Digest form 2: sha256 of `canonical`, computed by the writer (migration 0007)."""
POOL_LINKED = 3
"""Form 3: one hash of the previous hash, `event_key` and `payload_text`."""

OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NAIVE_UTC
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
POSTGRES_EPOCH_MICROS = 946_684_800_000_000
"""2000-01-01 in microseconds since 1970: where PostgreSQL counts a timestamptz from."""
_KEY = struct.Struct(">ihq")
_sha256 = hashlib.sha256


def chain_step(state: bytes | None, value: bytes) -> bytes:
    """Forms 1 and 2: a stream's link (value: the digest) and a pool's head (value: a hash)."""
    return value if state is None else _sha256(state + value).digest()


def linked(previous: bytes | None, content: bytes) -> bytes:
    """Form 3: the hash of an event whose `event_key` + `payload_text` is `content`."""
    return _sha256(previous + content if previous is not None else content).digest()


def link_value(previous: bytes | None, form: int, digest: bytes) -> bytes:
    """What an event's hash must be, given its predecessor's (form 3: `digest` is its content)."""
    return linked(previous, digest) if form == POOL_LINKED else chain_step(previous, digest)


# --- form 3 -------------------------------------------------------------------------------------------


def event_key(event_id: uuid.UUID, version: int, schema_version: int, occurred_at: datetime) -> bytes:
    """The event's fixed-size fields as PostgreSQL sends them in binary (`sql.CHAIN_COLUMNS`:
    uuid_send, int4send, int2send, timestamptz_send), so the audit reads them as one bytea."""
    micros = epoch_micros(occurred_at) - POSTGRES_EPOCH_MICROS
    return event_id.bytes + _KEY.pack(version, schema_version, micros)


def payload_text(stream_id: str, kind: str, data: Any, metadata: Any) -> bytes:
    """The rest of a form-3 event as the audit rebuilds it from the payload it parses anyway."""
    return orjson.dumps([stream_id, kind, data, metadata], option=OPTIONS)


def stored_payload_text(stream_id: str, kind: str, data: Any, metadata: Any) -> bytes:
    """`payload_text` of an event about to be written, as the audit will rebuild it (`as_stored`)."""
    return _read_back(lambda d, m: payload_text(stream_id, kind, d, m), data, metadata)


# --- form 2 -------------------------------------------------------------------------------------------


def canonical(
    event_id: Any,
    stream_id: str,
    version: int,
    kind: str,
    schema_version: int,
    micros: int | None,
    data: Any,
    metadata: Any,
) -> bytes:
    """The text a form-2 digest is of: the fields as one JSON array (unambiguous, unlike text
    joined by a separator), objects' keys sorted, `occurred_at` as microseconds since the epoch."""
    return orjson.dumps([event_id, stream_id, version, kind, schema_version, micros, data, metadata], option=OPTIONS)


def stored_canonical(
    event_id: Any,
    stream_id: str,
    version: int,
    kind: str,
    schema_version: int,
    occurred_at: datetime,
    data: Any,
    metadata: Any,
) -> bytes:
    """`canonical` of an event as written, as the audit rebuilds it (`as_stored`)."""
    micros = epoch_micros(occurred_at)
    return _read_back(
        lambda d, m: canonical(event_id, stream_id, version, kind, schema_version, micros, d, m), data, metadata
    )


# --- both ---------------------------------------------------------------------------------------------


def epoch_micros(at: datetime) -> int:
    """Microseconds since the epoch, as PostgreSQL stores a timestamptz (naive means UTC, as the
    write's JSON says)."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return (at - _EPOCH) // _MICROSECOND


def _read_back(text_of: Callable[[Any, Any], bytes], data: Any, metadata: Any) -> bytes:
    """`text_of(data, metadata)` as the audit will rebuild it from what jsonb gives back: only a
    text that shows a number PostgreSQL prints otherwise (`e+`, `-0.0`) pays for `as_stored`."""
    text = text_of(data, metadata)
    if b"e+" in text or b"-0.0" in text:
        text = text_of(as_stored(data), as_stored(metadata))
    return text


def as_stored(value: Any) -> Any:
    """The value as it reads back from jsonb: the JSON the write sends, each number through
    PostgreSQL's numeric (printed in full, no negative zero), parsed again by orjson."""
    return _numbers(orjson.loads(orjson.dumps(value, option=orjson.OPT_NAIVE_UTC)))


def _numbers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    if isinstance(value, float):
        number = Decimal(orjson.dumps(value).decode())
        return orjson.loads(format(number.copy_abs() if number.is_zero() else number, "f"))
    return value


# --- signatures ---------------------------------------------------------------------------------------

KEY_ID_BYTES = 4
SIGNATURE_BYTES = KEY_ID_BYTES + 32
MIN_KEY_BYTES = 32
"""A shorter key could be guessed offline from any signed event (its hash and HMAC are public)."""
_BLOCK = 64


class Signer:
    """An event's signature: the key's id (`KEY_ID_BYTES`) then HMAC-SHA256(key, the event's
    hash). The hash covers the event and its link to its predecessor, so whoever recomputes a
    rewritten or forged event's hash still cannot sign it without the key, which the services
    hold and the database does not. The key id tells an event signed with another key from a
    forged one. HMAC from its two pads hashed once (RFC 2104): `hmac.digest` would redo them per
    event, 2.5x the cost, on the audit's and the writer's hot paths."""

    __slots__ = ("_inner", "_key", "_outer", "key_id")

    def __init__(self, key: bytes) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"a signing key must be at least {MIN_KEY_BYTES} bytes, not {len(key)}")
        self._key = key
        block = (hashlib.sha256(key).digest() if len(key) > _BLOCK else key).ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in block))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))
        self.key_id = hmac.digest(key, b"nodewright signing key id", "sha256")[:KEY_ID_BYTES]

    def mac(self, value: bytes) -> bytes:
        """HMAC-SHA256(key, value)."""
        inner = self._inner.copy()
        inner.update(value)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def sign(self, event_hash: bytes) -> bytes:
        return self.key_id + self.mac(event_hash)

    def __reduce__(self) -> tuple[type[Signer], tuple[bytes]]:
        """Sent to an audit's worker processes as its key (hash objects do not pickle)."""
        return (Signer, (self._key,))

    def __repr__(self) -> str:
        return f"Signer(key id {self.key_id.hex()})"


# --- the heads of every stream ------------------------------------------------------------------------

HEADS_BYTES = 256
HEADS_MODULUS = 1 << (8 * HEADS_BYTES)
"""The streams' heads are summed modulo 2^2048: a sum, so that parts of a split audit add up
whatever streams each saw (Bellare and Micciancio's AdHash); that wide, so that no search for
heads whose changes cancel out is feasible (Wagner's k-tree attack needs about 2^90 steps)."""


def head_term(stream: str, version: int, event_hash: bytes | None) -> int:
    """What a stream whose head is (`version`, `event_hash`) adds to the sum of its kind's heads."""
    text = orjson.dumps([stream, str(version)]) + (event_hash or b"")
    return int.from_bytes(hashlib.shake_256(text).digest(HEADS_BYTES), "big")
