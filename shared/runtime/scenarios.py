"""Scenario files from disk: the YAML and the NodePool files it names, read relative to it, then
validated by the pure `shared.api.scenario`."""

from __future__ import annotations

from pathlib import Path

import yaml

from shared.api.scenario import Scenario, ScenarioError, parse_scenario
from shared.api.validation import FieldError


def load_scenario(path: Path) -> Scenario:
    """The scenario in the file; ScenarioError lists every error with its field path."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ScenarioError(str(path), [FieldError("", f"cannot read: {exc}")]) from None
    return parse_scenario(document, read_nodepool_files(document, path.parent), str(path))


def read_nodepool_files(document: object, base: Path) -> dict[str, str]:
    """The text of each `spec.nodePoolFiles` entry that can be read (the others are reported as
    not found by the validation)."""
    spec = document.get("spec") if isinstance(document, dict) else None
    names = spec.get("nodePoolFiles") if isinstance(spec, dict) else None
    out: dict[str, str] = {}
    for name in names if isinstance(names, list) else []:
        if isinstance(name, str):
            try:
                out[name] = (base / name).read_text(encoding="utf-8")
            except OSError:
                continue
    return out
