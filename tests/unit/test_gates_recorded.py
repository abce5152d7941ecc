"""The feature gates in the log: a service records them only when they differ from its stream's
last record, re-reading after a conflict; a replay takes those in force at its instant (else
the first recorded, after it), of the disruption service only."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from services.whatif.gates import used
from shared.config import feature_gates
from shared.events import contracts as c
from shared.events.envelope import Metadata, RecordedEvent
from shared.events.gates import differs, in_force
from shared.runtime.gates import record_gates
from shared.store.errors import ConcurrencyConflict, NotLeader
from shared.store.fence import Fence
from tests.factories import T0, entries

OFF = feature_gates("")
REPAIR = feature_gates("NodeRepair=true")


@pytest.mark.parametrize(
    ("last", "now", "records"),
    [
        (None, OFF, True),  # nothing recorded yet: even all off is said
        (OFF, OFF, False),
        (OFF, REPAIR, True),
        (REPAIR, dict(reversed(REPAIR.items())), False),  # the same gates in another order
        ({k: v for k, v in OFF.items() if k != "NodeOverlay"}, OFF, True),  # a gate known since
    ],
)
def test_the_gates_are_recorded_only_when_they_differ(last, now, records):
    assert differs(last, now) is records


def observed(gates: dict[str, bool], service: str = "disruption") -> c.FeatureGatesObserved:
    return c.FeatureGatesObserved(service=service, gates=gates)


LOG = entries(  # one a minute, the first at T0 + 1m
    [
        c.NodeDeleted(node="a"),
        observed(OFF),
        observed(REPAIR, service="scheduler"),
        c.NodeDeleted(node="b"),
        observed(REPAIR),
        c.NodeDeleted(node="c"),
    ],
    step=timedelta(minutes=1),
)


@pytest.mark.parametrize(
    ("at", "gates", "recorded_at", "later"),
    [
        (T0 + timedelta(minutes=1), OFF, 2, True),  # before any record: the first one, said to be later
        (T0 + timedelta(minutes=2), OFF, 2, False),
        (T0 + timedelta(minutes=4), OFF, 2, False),  # the scheduler's record is not the replayed one
        (T0 + timedelta(minutes=5), REPAIR, 5, False),
        (None, REPAIR, 5, False),  # the log's end
    ],
)
def test_the_gates_in_force_at_an_instant(at, gates, recorded_at, later):
    got = in_force(LOG, at)
    assert got is not None
    assert (got.gates, got.at, got.later) == (gates, T0 + timedelta(minutes=recorded_at), later)
    assert ("after the instant replayed" in got.told()) is later


def test_a_log_older_than_the_fact_records_none():
    assert in_force(LOG[:1], None) is None
    assert in_force(LOG, None, service="watcher") is None


# --- recording: read the stream, append at its version, re-read on a conflict ---------------------


def recorded(version: int, gates: dict[str, bool]) -> RecordedEvent:
    event = observed(gates)
    return RecordedEvent(
        position=version,
        event_id=uuid.uuid4(),
        stream_id=event.stream_id,
        version=version,
        type=event.TYPE,
        schema_version=1,
        data=event.payload(),
        metadata=Metadata("disruption"),
        occurred_at=T0,
        recorded_at=T0,
    )


class Store:
    def __init__(self, reads: list[list[RecordedEvent]]) -> None:
        self.reads = reads

    async def read_stream(self, stream_id: str) -> list[RecordedEvent]:
        assert stream_id == "featuregates-disruption"
        return self.reads.pop(0)


class Ledger:
    """What `record_gates` uses of the real one: its store, and fenced appends."""

    def __init__(self, reads: list[list[RecordedEvent]], results: list[Any]) -> None:
        self.store = Store(reads)
        self.results = results
        self.appended: list[tuple[int | None, dict[str, Any]]] = []

    async def append_units(self, units: Any) -> list[Any]:
        ((append,),) = units
        self.appended.append((append.expected_version, append.events[0].data))
        return [self.results.pop(0)]


class Log:
    def __init__(self) -> None:
        self.warned: list[str] = []

    def warning(self, text: str, *args: Any) -> None:
        self.warned.append(text % args)


async def record(ledger: Ledger, gates: dict[str, bool], log: Log | None = None) -> bool:
    return await record_gates(ledger, "disruption", gates, T0, producer="disruption", log=log or Log())  # type: ignore[arg-type]


async def test_an_empty_stream_is_created():
    ledger = Ledger([[]], [[7]])
    assert await record(ledger, REPAIR)
    assert ledger.appended == [(0, {"service": "disruption", "gates": REPAIR})]


async def test_the_same_gates_are_not_appended_again():
    ledger = Ledger([[recorded(1, OFF), recorded(2, REPAIR)]], [])
    assert not await record(ledger, REPAIR)
    assert ledger.appended == []


async def test_other_gates_are_appended_at_the_version_read():
    ledger = Ledger([[recorded(1, OFF)]], [[9]])
    assert await record(ledger, REPAIR)
    assert [version for version, _ in ledger.appended] == [1]


async def test_a_conflict_reads_again_and_finds_the_other_replicas_record():
    conflict = ConcurrencyConflict("featuregates-disruption", 0, 1)
    ledger = Ledger([[], [recorded(1, REPAIR)]], [conflict])
    assert not await record(ledger, REPAIR)
    assert [version for version, _ in ledger.appended] == [0]


async def test_a_conflict_with_other_gates_appends_after_them():
    conflict = ConcurrencyConflict("featuregates-disruption", 0, 1)
    ledger = Ledger([[], [recorded(1, OFF)]], [conflict, [5]])
    assert await record(ledger, REPAIR)
    assert [version for version, _ in ledger.appended] == [0, 1]


async def test_losing_the_lead_is_raised_another_refusal_logged():
    with pytest.raises(NotLeader):
        await record(Ledger([[]], [NotLeader(Fence(key=1, pid=2, nonce=3))]), REPAIR)
    log = Log()
    assert not await record(Ledger([[]], [ValueError("broken")]), REPAIR, log)
    assert log.warned == ["FeatureGatesObserved not recorded: broken"]


# --- a replay's choice: the record, else the fallback, read only then --------------------------------


def test_a_recorded_gate_unknown_here_is_left_out_and_the_environment_is_not_read():
    log = entries([observed({"NodeRepair": True, "SomeLaterGate": True})])
    got = used(log, None, lambda: pytest.fail("the environment is read only when the log records no gates"))
    assert (got.gates, got.source, got.on()) == (REPAIR, "log", ["NodeRepair"])  # the rest: upstream's defaults


@pytest.mark.parametrize(
    ("source", "says"),
    [("environment", "the environment (NODEWRIGHT_FEATURE_GATES): the log records none"), ("defaults", "upstream's")],
)
def test_a_log_that_records_no_gates_takes_the_fallback_and_says_it(source, says):
    got = used(LOG[:1], None, lambda: REPAIR, source)
    assert (got.gates, got.source) == (REPAIR, source) and got.told.startswith(says)
    assert got.to_dict() == {"on": ["NodeRepair"], "source": source, "from": got.told}
