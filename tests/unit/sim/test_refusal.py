"""Which messages on a caller's request subject the sim takes as the caller's own: sent to it
directly, with a reply in the caller's inbox. Everything else is refused, whatever its body."""

from __future__ import annotations

import pytest
from nats.aio.msg import Msg

from services.sim.service import SimService, refusal
from shared.api.scenario import parse_scenario
from shared.bus.names import BusNames
from shared.bus.topology import SIM_CALLERS
from shared.clock import ManualClock
from tests.factories import T0, scenario_doc

NAMES = BusNames("blue")


def message(reply: str, headers: dict[str, str] | None = None) -> Msg:
    return Msg(None, subject=NAMES.sim_request("termination", "cloud.delete"), reply=reply, headers=headers)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reply", "headers", "why"),
    [
        ("_INBOX.blue.termination.abc.1", None, None),
        ("$JS.ACK.ATTACK.c.1.1.1.1700000000000000000.0", None, "jetstream"),
        ("_INBOX.blue.termination.abc.1", {"Nats-Stream": "ATTACK", "Nats-Sequence": "1"}, "jetstream"),
        ("", {"Nats-Stream": "REPUBLISH"}, "jetstream"),
        ("", None, "no-reply"),
        ("_INBOX.blue.disruption.abc.1", None, "foreign-inbox"),
        ("_INBOX.blue.terminationx.abc.1", None, "foreign-inbox"),
        ("_INBOX.default.termination.abc.1", None, "foreign-inbox"),
        ("_INBOX.blue.termination", None, "foreign-inbox"),
        ("_INBOX.abcdef.1", None, "foreign-inbox"),
    ],
)
def test_only_a_direct_request_from_the_callers_inbox_is_taken(reply: str, headers: dict | None, why: str | None):
    assert refusal(NAMES, "termination", message(reply, headers)) == why


def test_the_sim_subscribes_exactly_the_requests_each_caller_may_send():
    sim = SimService(parse_scenario(scenario_doc("t", duration="1h")), ManualClock(T0), "nats://127.0.0.1:9")
    subjects = [s.subject.broker_address for s in sim.shell.router.subscribers]
    expected = [BusNames().sim_request(c, r) for c, asks in SIM_CALLERS.items() for r in asks]
    assert sorted(subjects) == sorted(expected) and not any("*" in s or ">" in s for s in subjects)
