"""`nodewright validate`: accept or reject NodePool, EC2NodeClass and NodeOverlay files as
Karpenter's API server would."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from shared.api.documents import NO_DOCUMENT, DocumentError, Validation, validate_api_text
from shared.config import STATIC_CAPACITY, InputLimits, gates_now
from shared.runtime.inputs import InputError, limits_now, read_text

EXIT_VALID, EXIT_INVALID, EXIT_UNREADABLE = 0, 1, 2


@dataclass
class FileReport:
    file: str
    results: list[Validation] = field(default_factory=list)
    error: str | None = None


def check_files(paths: list[Path], limits: InputLimits | None = None) -> list[FileReport]:
    """A report per file; never raises for what a file holds (InputError only for a bad
    NODEWRIGHT_MAX_* setting)."""
    limits = limits_now(limits)
    try:
        static_capacity = gates_now()[STATIC_CAPACITY]
    except ValueError as exc:
        raise InputError(None, f"a bad setting: {exc}") from None
    reports = []
    for path in paths:
        report = FileReport(str(path))
        try:
            report.results = validate_api_text(
                read_text(path, limits), limits.max_nesting, static_capacity=static_capacity
            )
            if not report.results:
                report.error = NO_DOCUMENT
        except InputError as exc:
            report.error = exc.reason
        except DocumentError as exc:
            report.error = str(exc)
        reports.append(report)
    return reports


def exit_code(reports: list[FileReport]) -> int:
    if any(r.error for r in reports):
        return EXIT_UNREADABLE
    if any(not v.valid for r in reports for v in r.results):
        return EXIT_INVALID
    return EXIT_VALID


def render_text(reports: list[FileReport]) -> tuple[str, str]:
    """(stdout, stderr)"""
    out, err = [], []
    for report in reports:
        if report.error:
            err.append(f"ERROR {report.file}: {report.error}")
        for v in report.results:
            out.append(f"{'VALID' if v.valid else 'INVALID'} {v.name} ({report.file})")
            out += [f"  {e.path}: {e.message}" for e in v.errors]
    return "\n".join(out), "\n".join(err)


def render_json(reports: list[FileReport]) -> str:
    rows = []
    for report in reports:
        if report.error:
            rows.append(
                {
                    "file": report.file,
                    "name": None,
                    "valid": False,
                    "errors": [{"path": "", "message": report.error}],
                }
            )
        for v in report.results:
            rows.append(
                {
                    "file": report.file,
                    "name": v.name,
                    "valid": v.valid,
                    "errors": [{"path": e.path, "message": e.message} for e in v.errors],
                }
            )
    return json.dumps(rows, indent=2)
