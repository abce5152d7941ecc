"""Go durations (`720h`, `1h15m`, `30s`) and Karpenter's nillable durations (`Never`).

Parsing is durationpy's (Go's `time.ParseDuration` grammar); the patterns are the CRD's, which are
narrower than Go's (no ms/us/ns, no fractions), so the schema decides what is accepted.
"""

from __future__ import annotations

import re
from datetime import timedelta

import durationpy

NEVER = "Never"

# spec.template.spec.expireAfter and spec.disruption.consolidateAfter
NILLABLE_DURATION_PATTERN = r"^(([0-9]+(s|m|h))+|Never)$"
# spec.template.spec.terminationGracePeriod
DURATION_PATTERN = r"^([0-9]+(s|m|h))+$"
# spec.disruption.budgets[].duration: hours and minutes only, as cron has no seconds
BUDGET_DURATION_PATTERN = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"
# Go's time.ParseDuration grammar (durationpy also accepts units such as `d` that Go refuses).
_GO_DURATION_RE = re.compile(r"^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+)$")


def parse_duration(text: str) -> timedelta:
    """Parse a Go duration string; raises ValueError on bad input."""
    if not _GO_DURATION_RE.match(text):
        raise ValueError(f"invalid duration {text!r}: not a Go duration such as 720h, 1h15m or 30s")
    try:
        return durationpy.from_str(text)
    except Exception as exc:  # durationpy raises its own DurationError
        raise ValueError(f"invalid duration {text!r}: {exc}") from exc


def parse_nillable(text: str | None) -> timedelta | None:
    """`Never` (or absence) means no duration at all."""
    if text is None or text == NEVER:
        return None
    return parse_duration(text)


def format_duration(value: timedelta) -> str:
    """Go's Duration.String(): `1h15m0s`, `30s`, `0s`."""
    return durationpy.to_str(value)
