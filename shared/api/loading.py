"""YAML and JSON text to Python values, within limits, so bad input is an error and never a
crash.

Pure: text in, values out. Three things a parser does not guard against are refused here:
nesting deeper than a limit (pure-Python parsers and pydantic recurse, and overflow the stack
near 1,000 levels), YAML aliases that expand into far more than was written (a "billion laughs"
is a few hundred bytes that every later walk of the value multiplies into billions of nodes),
and aliases that make a value contain itself. The YAML is composed by libyaml when PyYAML has it
(about five times faster than the pure-Python parser on large files), and the composed node
graph is measured (iteratively, each shared node once) before any Python value is built.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

MAX_NESTING = 64
"""The default depth limit: NodePools and Scenarios need about ten."""
MAX_ALIAS_NODES = 100_000
"""The most nodes YAML aliases may add to a document beyond the nodes written in it."""
NESTING_SETTING = "NODEWRIGHT_MAX_NESTING"

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LoadError(ValueError):
    """The text is not YAML (or JSON), or is nested or aliased beyond the limits."""


def too_deep(limit: int) -> str:
    return f"nested deeper than {limit} levels (the limit is {NESTING_SETTING}={limit})"


def yaml_documents(text: str, max_nesting: int = MAX_NESTING) -> list[Any]:
    """The documents of a (multi-document) YAML text, empty ones left out."""
    documents: list[Any] = []
    number = 0
    loader = None
    try:
        loader = _Loader(text)
        while loader.check_node():
            node = loader.get_node()
            number += 1
            problem = _measure(node, max_nesting)
            if problem:
                raise LoadError(f"document {number}: {problem}")
            value = loader.construct_document(node)
            if value is not None:
                documents.append(value)
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):  # libyaml's own stop, at 1,000 levels
            raise LoadError(too_deep(max_nesting)) from None
        raise LoadError(f"not valid YAML: {exc}") from None
    except RecursionError:  # the pure-Python parser, when PyYAML has no libyaml
        raise LoadError(too_deep(max_nesting)) from None
    except (ValueError, OverflowError, TypeError) as exc:
        if isinstance(exc, LoadError):
            raise
        # a scalar that resolves to a type Python cannot build: `2026-13-45`, an int of 5,000 digits
        raise LoadError(f"not valid YAML: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return documents


def json_value(text: str, max_nesting: int = MAX_NESTING) -> Any:
    """One JSON value."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise LoadError(too_deep(max_nesting)) from None
    except ValueError as exc:
        raise LoadError(f"not valid JSON: {exc}") from None
    check_nesting(value, max_nesting)
    return value


def check_nesting(value: Any, max_nesting: int = MAX_NESTING) -> None:
    """LoadError if the dicts and lists of `value` nest deeper than `max_nesting` (a walk with a
    stack of its own: never a RecursionError)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth + 1 > max_nesting:
            raise LoadError(too_deep(max_nesting))
        stack.extend((child, depth + 1) for child in children)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _measure(root: yaml.Node, max_nesting: int) -> str | None:
    """What is wrong with a composed document, or None: its depth, its size with every alias
    expanded, and cycles. Post-order over the graph, each distinct collection once (memoised by
    identity: an alias is the same node object met again), so a billion laughs costs what was
    written; scalars are counted in place."""
    if not isinstance(root, yaml.CollectionNode):
        return None
    measured: dict[int, tuple[int, int]] = {}  # id -> (nodes with aliases expanded, depth)
    open_: set[int] = set()
    written = 0
    stack: list[tuple[yaml.Node, list[yaml.Node] | None]] = [(root, None)]
    while stack:
        node, children = stack.pop()
        key = id(node)
        if children is not None:  # closing: every child collection is measured
            size, deepest = 1, 0
            for child in children:
                if isinstance(child, yaml.CollectionNode):
                    n, d = measured[id(child)]
                    size += n
                    deepest = max(deepest, d)
                else:
                    size += 1
            measured[key] = (size, deepest + 1)
            written += 1 + sum(not isinstance(c, yaml.CollectionNode) for c in children)
            open_.discard(key)
            continue
        if key in measured:
            continue
        if key in open_:
            return f"a YAML alias makes the value at line {node.start_mark.line + 1} contain itself"
        open_.add(key)
        children = _children(node)
        stack.append((node, children))
        stack.extend((child, None) for child in children if isinstance(child, yaml.CollectionNode))
    expanded, depth = measured[id(root)]
    if depth > max_nesting:
        return f"{too_deep(max_nesting)}, at line {_deep_line(root, measured, max_nesting)}"
    if expanded - written > MAX_ALIAS_NODES:
        return (
            f"YAML aliases expand its {written:,} nodes to {expanded:,}: at most {MAX_ALIAS_NODES:,} more are "
            "accepted (a 'billion laughs'?)"
        )
    return None


def _deep_line(node: yaml.Node, measured: dict[int, tuple[int, int]], limit: int) -> int:
    """The line of the first collection past the limit, down the deepest branch."""
    level = 1
    while level <= limit:
        node = max((c for c in _children(node) if isinstance(c, yaml.CollectionNode)), key=lambda c: measured[id(c)][1])
        level += 1
    return node.start_mark.line + 1
