"""Clocks: every process of `nodewright up` reads the same accelerated instant."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from shared.clock import AcceleratedClock, ManualClock, SystemClock
from shared.config import Settings

START = datetime(2026, 11, 23, 9, tzinfo=UTC)


def test_an_accelerated_clock_runs_speed_times_faster_from_its_start():
    clock = AcceleratedClock(START, speed=60, origin=time.time() - 2)
    assert timedelta(seconds=119) <= clock.now() - START <= timedelta(seconds=125)
    assert clock.wall_seconds(timedelta(minutes=1)) == 1.0


def test_a_gated_clock_holds_at_its_start_in_every_process_until_it_is_opened(monkeypatch, tmp_path):
    parent = AcceleratedClock(START, speed=3600, gate=tmp_path / "gate")
    for key, value in parent.environment().items():
        monkeypatch.setenv(key, value)
    child = Settings().clock()
    assert isinstance(child, AcceleratedClock) and "NODEWRIGHT_CLOCK_ORIGIN" not in parent.environment()
    time.sleep(0.05)  # 3 simulated minutes, were it running
    assert parent.now() == child.now() == START
    origin = parent.open()
    assert child.origin == origin == parent.open()  # opening twice keeps the first origin
    time.sleep(0.05)
    assert child.now() > START and abs((child.now() - parent.now()).total_seconds()) < 60


def test_processes_given_the_same_environment_read_the_same_instant(monkeypatch):
    parent = AcceleratedClock(START, speed=30)
    for key, value in parent.environment().items():
        monkeypatch.setenv(key, value)
    child = Settings().clock()
    assert isinstance(child, AcceleratedClock)
    assert abs((child.now() - parent.now()).total_seconds()) < 0.5


def test_without_a_start_the_settings_give_the_wall_clock(monkeypatch):
    monkeypatch.delenv("NODEWRIGHT_CLOCK_START", raising=False)
    assert isinstance(Settings().clock(), SystemClock)


def test_a_manual_clock_moves_only_when_told():
    clock = ManualClock(START)
    assert clock.now() == START
    assert clock.advance(timedelta(minutes=5)) == START + timedelta(minutes=5)


@pytest.mark.parametrize(("start", "speed"), [(datetime(2026, 1, 1), 1.0), (START, 0.0)])
def test_bad_clocks_are_refused(start, speed):
    with pytest.raises(ValueError):
        AcceleratedClock(start, speed)
