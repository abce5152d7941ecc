"""Expiration (upstream's `pkg/controllers/nodeclaim/expiration/`): forceful, at creation plus expireAfter, Never never."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.disruption.command import Decision
from shared.disruption.expiration import Expiring, expiration, next_expiry

T0 = datetime(2026, 11, 24, 12, tzinfo=UTC)
DAY = timedelta(days=1)


def test_claims_past_their_expiry_go_in_one_delete_command_oldest_expiry_first():
    claims = [
        Expiring("young", T0, DAY),
        Expiring("old", T0 - 2 * DAY, DAY),
        Expiring("exact", T0 - DAY, DAY),  # at its expiry instant: due
        Expiring("forever", T0 - 900 * DAY, None),
        Expiring("going", T0 - 3 * DAY, DAY, deleting=True),
    ]
    command = expiration(claims, T0)
    assert command is not None and command.candidates == ("old", "exact")
    assert command.reason == "Expired" and command.decision is Decision.DELETE and command.replacements == 0


def test_nothing_due_and_when_to_look_again():
    claims = [Expiring("a", T0, DAY), Expiring("b", T0, 2 * DAY), Expiring("c", T0, None)]
    assert expiration(claims, T0 + timedelta(hours=23)) is None
    assert next_expiry(claims, T0) == T0 + DAY
    assert next_expiry(claims, T0 + DAY) == T0 + 2 * DAY
    assert next_expiry([Expiring("c", T0, None)], T0) is None
