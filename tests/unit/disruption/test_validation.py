"""A command checked before it is carried out: anything moved is refused; emptiness keeps what
survives, the other methods are all or nothing; the wait for replacements is clamped."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.disruption.validation import command_timeout, validate

NAMES = ("a", "b", "c")


def check(**changes):
    fields = {"moved": (), "still_valid": NAMES, "within_budget": NAMES} | changes
    return validate(NAMES, **fields)


def test_nothing_moved_keeps_every_candidate():
    verdict = check()
    assert verdict.keep == NAMES and not verdict.cancelled and verdict.rejected == {}


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"moved": ("b",)}, "changed since the decision: its stream moved"),  # a pod bound to b
        ({"still_valid": ("a", "c")}, "churn"),
        ({"nominated": ("b",)}, "nominated for a pending pod"),
        ({"within_budget": ("a", "c")}, "budget"),
    ],
)
def test_one_candidate_moved_cancels_a_consolidation_and_trims_an_emptiness(changes, why):
    whole = check(**changes)
    assert whole.cancelled and whole.rejected == {"b": why}
    trimmed = check(**changes, partial=True)
    assert trimmed.keep == ("a", "c") and trimmed.rejected == {"b": why}


def test_emptiness_with_nothing_left_is_cancelled():
    assert check(still_valid=(), partial=True).cancelled


@pytest.mark.parametrize(
    ("queued", "expected"),
    [
        (0, timedelta(minutes=10)),
        (7_500, timedelta(minutes=10)),
        (15_000, timedelta(minutes=20)),
        (10**6, timedelta(hours=1)),
    ],
)
def test_the_wait_for_replacements_is_clamped(queued, expected):
    assert command_timeout(queued) == expected
