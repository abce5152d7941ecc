"""PATCH as the API server applies it: JSON merge patch (RFC 7386), JSON patch (RFC 6902, with
`test`) and strategic merge patch for the fields nodewright and kubectl patch (labels,
annotations, finalizers, taints, status conditions). Pure; a patch that cannot apply is an
ApiError (422 for a failed `test` or a bad path, 400 for a malformed patch)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from services.sim.api.status import ApiError, bad_request

MERGE, JSON_PATCH, STRATEGIC, APPLY = (
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
MERGE_KEYS: dict[str, str] = {"conditions": "type", "containers": "name", "ownerReferences": "uid"}
"""Lists a strategic merge patch merges by a key (Kubernetes' patchMergeKey), by field name."""
SET_LISTS = frozenset({"finalizers"})
"""Lists of scalars it merges as sets (patchStrategy merge): ObjectMeta.finalizers."""


def apply_patch(document: dict[str, Any], patch: Any, content_type: str) -> dict[str, Any]:
    """The document after `patch`; the document itself is left unchanged."""
    if content_type == MERGE:
        if not isinstance(patch, Mapping):
            raise bad_request("a merge patch is a JSON object")
        return merge_patch(document, patch)
    if content_type == JSON_PATCH:
        return json_patch(document, patch)
    if content_type == STRATEGIC:
        if not isinstance(patch, Mapping):
            raise bad_request("a strategic merge patch is a JSON object")
        return strategic_merge(document, patch)
    raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {content_type}")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, null removes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge(target: Any, patch: Mapping[str, Any], field: str = "") -> Any:
    """Kubernetes' strategic merge patch for the lists it knows (MERGE_KEYS, SET_LISTS); other
    lists are replaced, as for a list without a patch strategy. Directives: `$patch: replace`
    and `delete` on a map, `$deleteFromPrimitiveList/<field>`, `$setElementOrder/<field>`."""
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            name = key.partition("/")[2]
            out[name] = [v for v in out.get(name) or [] if v not in (value or [])]
            continue
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping):
            out[key] = strategic_merge(out.get(key), value, key)
        elif isinstance(value, list) and key in SET_LISTS:
            have = list(out.get(key) or [])
            out[key] = have + [v for v in value if v not in have]
        elif isinstance(value, list) and key in MERGE_KEYS:
            out[key] = _merge_list(list(out.get(key) or []), value, MERGE_KEYS[key])
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_list(have: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    out = list(have)
    for item in patch:
        if not isinstance(item, Mapping) or merge_key not in item:
            raise bad_request(f"a strategic merge patch of a list merged by {merge_key!r} needs it in every item")
        index = next(
            (i for i, old in enumerate(out) if isinstance(old, Mapping) and old.get(merge_key) == item[merge_key]), None
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del out[index]
        elif index is None:
            out.append({k: v for k, v in item.items() if k != "$patch"})
        else:
            out[index] = strategic_merge(out[index], item)
    return out


def json_patch(document: Any, operations: Any) -> Any:
    """RFC 6902: add, remove, replace, move, copy and test, in order; a failed `test` or a path
    that is not there answers 422 and applies nothing."""
    if not isinstance(operations, list):
        raise bad_request("a JSON patch is a list of operations")
    out = copy.deepcopy(document)
    for index, op in enumerate(operations):
        if not isinstance(op, Mapping) or not isinstance(op.get("path"), str):
            raise bad_request(f"JSON patch operation {index} needs an `op` and a `path`")
        kind, path = op.get("op"), _pointer(op["path"])
        if kind == "test":
            if _get(out, path, op["path"]) != op.get("value"):
                raise _unprocessable(f"testing value {op['path']} failed: test operation does not apply")
        elif kind == "remove":
            _remove(out, path, op["path"])
        elif kind == "add":
            out = _add(out, path, copy.deepcopy(op.get("value")), op["path"])
        elif kind == "replace":
            _get(out, path, op["path"])
            _remove(out, path, op["path"])
            out = _add(out, path, copy.deepcopy(op.get("value")), op["path"])
        elif kind in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise bad_request(f"JSON patch operation {index} ({kind}) needs `from`")
            value = copy.deepcopy(_get(out, _pointer(source), source))
            if kind == "move":
                _remove(out, _pointer(source), source)
            out = _add(out, path, value, op["path"])
        else:
            raise bad_request(f"JSON patch operation {index}: unknown op {kind!r}")
    return out


def _unprocessable(message: str) -> ApiError:
    return ApiError(422, "Invalid", message)


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"a JSON pointer starts with '/': {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _step(node: Any, part: str, path: str) -> Any:
    if isinstance(node, Mapping):
        if part not in node:
            raise _unprocessable(f"the path {path} does not exist")
        return node[part]
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    raise _unprocessable(f"the path {path} does not exist")


def _get(document: Any, parts: list[str], path: str) -> Any:
    node = document
    for part in parts:
        node = _step(node, part, path)
    return node


def _remove(document: Any, parts: list[str], path: str) -> None:
    if not parts:
        raise _unprocessable("the whole document cannot be removed")
    parent = _get(document, parts[:-1], path)
    _step(parent, parts[-1], path)
    if isinstance(parent, list):
        del parent[int(parts[-1])]
    else:
        del parent[parts[-1]]


def _add(document: Any, parts: list[str], value: Any, path: str) -> Any:
    if not parts:
        return value
    parent = _get(document, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise _unprocessable(f"the path {path} does not exist")
    else:
        raise _unprocessable(f"the path {path} does not exist")
    return document
