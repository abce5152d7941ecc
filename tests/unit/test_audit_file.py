"""An audit of a file that holds no log is an error, never a clean audit: an empty export, the
wrong file or a truncated copy must not read as "violations: none"."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli.audit import audit_file
from cli.main import app


def _line(kind: str, position: int = 1) -> str:
    return json.dumps(
        {
            "position": position,
            "event_id": f"00000000-0000-0000-0000-{position:012d}",
            "stream_id": "thing-x",
            "version": position,
            "type": kind,
            "data": {},
            "occurred_at": "2026-11-23T09:00:00+00:00",
            "recorded_at": "2026-11-23T09:00:00+00:00",
        }
    )


CASES = [
    ("empty", "", "holds no events"),
    ("blank lines", "\n\n  \n", "holds no events"),
    ("unknown types", _line("SomethingElse") + "\n" + _line("Other", 2) + "\n", "only Other, SomethingElse"),
]


@pytest.mark.parametrize(("content", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_file_without_a_log_is_refused_with_a_clear_message(tmp_path, content, message):
    path = tmp_path / "log.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        audit_file(path)
    result = CliRunner().invoke(app, ["audit", "--from-file", str(path)])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
