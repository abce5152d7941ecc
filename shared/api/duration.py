"""Go durations (`720h`, `1h15m`, `30s`) and Karpenter's nillable durations (`Never`).

Parsing is durationpy's (Go's `time.ParseDuration` grammar); the patterns are the CRD's, which are
narrower than Go's (no ms/us/ns, no fractions), so the schema decides what is accepted. Go's bound
holds as in Go: past about 292 years (`shared.api.bounds`) a duration is an error, never a
timedelta that a later `created_at + expireAfter` overflows.
"""

from __future__ import annotations

import re
from datetime import timedelta

import durationpy

from shared.api.bounds import go_duration_error

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
    """Parse a Go duration string; raises ValueError on bad input, with Go's own message past
    a `time.Duration`'s bound."""
    if not _GO_DURATION_RE.match(text):
        raise ValueError(f"invalid duration {text!r}: not a Go duration such as 720h, 1h15m or 30s")
    if (past := go_duration_error(text)) is not None:
        raise ValueError(past)
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


def check_go_duration(text: str | None) -> str | None:
    """A schema validator for a duration field that already matched its pattern: refuses one
    past Go's bound with `Invalid value: "876000000h": time: invalid duration "876000000h"`."""
    if text is not None and text != NEVER and (past := go_duration_error(text)) is not None:
        raise ValueError(f'Invalid value: "{text}": {past}')
    return text
