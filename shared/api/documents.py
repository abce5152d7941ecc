"""Multi-document YAML holding NodePools, as users keep them in git or get them from kubectl.

Pure: text in, documents out. `kind: List` / `NodePoolList` (what `kubectl get nodepools -o yaml`
prints) is unwrapped into its items.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from shared.api.nodepool import NodePool
from shared.api.validation import NodePoolValidation, validate_nodepool

_LIST_KINDS = ("List", "NodePoolList")


class DocumentError(ValueError):
    """The text is not YAML, or holds something other than NodePools."""


@dataclass(frozen=True, slots=True)
class Document:
    index: int
    body: Any


def _safe_load_all(text: str) -> list[Any]:
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise DocumentError(f"not valid YAML: {exc}") from None


def nodepool_documents(text: str) -> list[Document]:
    """Every NodePool document in the text; raises DocumentError for any other kind."""
    out: list[Document] = []
    for index, doc in enumerate(_safe_load_all(text)):
        if not isinstance(doc, dict):
            raise DocumentError(f"document {index + 1} is not a mapping (got {type(doc).__name__})")
        kind = doc.get("kind")
        if kind in _LIST_KINDS:
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise DocumentError(f"document {index + 1}: 'items' of a {kind} must be a list")
            for item in items:
                _require_nodepool(item, index)
                out.append(Document(index, item))
            continue
        _require_nodepool(doc, index)
        out.append(Document(index, doc))
    return out


def _require_nodepool(doc: Any, index: int) -> None:
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if kind != "NodePool":
        shown = f"kind {kind!r}" if kind is not None else "no kind"
        raise DocumentError(f"document {index + 1} has {shown}; only NodePool documents are accepted")


def validate_text(text: str) -> list[NodePoolValidation]:
    return [validate_nodepool(d.body) for d in nodepool_documents(text)]


def load_nodepools(text: str) -> list[NodePool]:
    """Valid NodePools from the text; raises DocumentError naming every invalid one."""
    results = validate_text(text)
    bad = [r for r in results if not r.valid]
    if bad:
        lines = [f"NodePool {r.name} is invalid:" + "".join(f"\n  {e}" for e in r.errors) for r in bad]
        raise DocumentError("\n".join(lines))
    return [r.nodepool for r in results if r.nodepool is not None]
