"""Label and field selectors as list and watch take them (`app=web,tier!=db,env in (a,b),!x`,
`spec.nodeName=node-1,metadata.name!=y`). Pure; a selector that does not parse is a 400."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from services.sim.api.status import bad_request

Match = Callable[[Mapping[str, Any]], bool]
_SET = re.compile(r"^\s*(!?)([A-Za-z0-9_.\-/]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQUALITY = re.compile(r"^\s*([A-Za-z0-9_.\-/]+)\s*(==|=|!=)\s*([A-Za-z0-9_.\-]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_.\-/]+)\s*$")


def _split(selector: str) -> list[str]:
    """Split at the commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for ch in selector:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return parts


def label_selector(selector: str | None) -> Callable[[Mapping[str, str]], bool]:
    """The labels a `labelSelector` query parameter selects."""
    tests: list[Callable[[Mapping[str, str]], bool]] = []
    for part in _split(selector or ""):
        if matched := _SET.match(part):
            negate, key, op, values = matched.groups()
            if negate:
                raise bad_request(f"unable to parse requirement: {part.strip()!r}")
            allowed = {v.strip() for v in values.split(",") if v.strip()}
            if op == "in":
                tests.append(lambda labels, k=key, a=allowed: labels.get(k) in a)
            else:
                tests.append(lambda labels, k=key, a=allowed: labels.get(k) not in a)
        elif matched := _EQUALITY.match(part):
            key, op, value = matched.groups()
            if op == "!=":
                tests.append(lambda labels, k=key, v=value: labels.get(k) != v)
            else:
                tests.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif matched := _EXISTS.match(part):
            negate, key = matched.groups()
            tests.append(lambda labels, k=key, n=bool(negate): (k in labels) != n)
        else:
            raise bad_request(f"unable to parse requirement: {part.strip()!r}")
    return lambda labels: all(t(labels) for t in tests)


def field_selector(selector: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """The objects a `fieldSelector` selects, by the value at each dotted field path (an absent
    field is the empty string, as the API's field sets have it)."""
    tests: list[Callable[[Mapping[str, Any]], bool]] = []
    for part in _split(selector or ""):
        matched = _EQUALITY.match(part)
        if matched is None:
            raise bad_request(f"invalid field selector: {part.strip()!r}: expected field=value or field!=value")
        path, op, value = matched.groups()
        if op == "!=":
            tests.append(lambda obj, p=path, v=value: field_value(obj, p) != v)
        else:
            tests.append(lambda obj, p=path, v=value: field_value(obj, p) == v)
    return lambda obj: all(t(obj) for t in tests)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    if node is None:
        return ""
    return str(node).lower() if isinstance(node, bool) else str(node)


def named(selector: str | None) -> str | None:
    """The one name a field selector pins (`metadata.name=x`), if it does."""
    for part in _split(selector or ""):
        matched = _EQUALITY.match(part)
        if matched and matched.group(1) == "metadata.name" and matched.group(2) != "!=":
            return matched.group(3)
    return None
