"""Scenario files from disk: the YAML and the NodePool files it names, read relative to it
(through `shared.runtime.inputs`, within the input limits), then validated by the pure
`shared.api.scenario`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from shared.api.scenario import Scenario, ScenarioError, validate_scenario
from shared.api.validation import FieldError
from shared.config import STATIC_CAPACITY, InputLimits, gates_now
from shared.runtime.inputs import InputError, limits_now, read_text, read_yaml


def load_scenario(path: Path, limits: InputLimits | None = None, gates: Mapping[str, bool] | None = None) -> Scenario:
    """The scenario in the file; ScenarioError lists every error with its field path. Its
    NodePools are admitted by the feature gates (`gates`, else the environment's, which the
    services the scenario is played by read too): a static pool needs `StaticCapacity`."""
    try:
        limits = limits_now(limits)
        documents = read_yaml(path, limits)
    except InputError as exc:
        raise ScenarioError(str(path), [FieldError("", exc.reason)]) from None
    if len(documents) != 1:
        found = "no document" if not documents else f"{len(documents)} documents"
        raise ScenarioError(str(path), [FieldError("", f"holds {found}: a Scenario file holds exactly one")])
    document = documents[0]
    files, unreadable = read_nodepool_files(document, path.parent, limits)
    static_capacity = (gates if gates is not None else gates_now())[STATIC_CAPACITY]
    scenario, errors = validate_scenario(document, files, limits.max_nesting, static_capacity=static_capacity)
    errors = unreadable + [e for e in errors if e.path not in {u.path for u in unreadable}]
    if scenario is None or errors:
        raise ScenarioError(str(path), errors)
    return scenario


def read_nodepool_files(
    document: object, base: Path, limits: InputLimits | None = None
) -> tuple[dict[str, str], list[FieldError]]:
    """The text of each `spec.nodePoolFiles` entry that can be read, and an error for each
    that exists but cannot be used (too large, not text); a missing one is left to the
    validation, which reports it as not found."""
    spec = document.get("spec") if isinstance(document, dict) else None
    names = spec.get("nodePoolFiles") if isinstance(spec, dict) else None
    out: dict[str, str] = {}
    errors: list[FieldError] = []
    for i, name in enumerate(names if isinstance(names, list) else []):
        if not isinstance(name, str) or name in out:
            continue
        try:
            out[name] = read_text(base / name, limits)
        except InputError as exc:
            if (base / name).exists():
                errors.append(FieldError(f"spec.nodePoolFiles[{i}]", f"{name}: {exc.reason}"))
    return out, errors
