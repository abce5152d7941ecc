"""Multi-document YAML holding NodePools, as users keep them in git or get them from kubectl.

Pure: text in, documents out. `kind: List` / `NodePoolList` (what `kubectl get nodepools -o yaml`
prints) is unwrapped into its items. The YAML is read within `shared.api.loading`'s limits
(nesting, alias expansion), so no text makes the parser crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.api.loading import MAX_NESTING, LoadError, yaml_documents
from shared.api.nodeclass_validation import NodeClassValidation, validate_nodeclass
from shared.api.nodeoverlay_validation import OverlayValidation, validate_overlay
from shared.api.nodepool import NodePool
from shared.api.validation import NodePoolValidation, validate_nodepool

_LIST_KINDS = ("List", "NodePoolList")


class DocumentError(ValueError):
    """The text is not YAML, or holds something other than NodePools."""


NO_DOCUMENT = "holds no NodePool document: an empty file validates nothing"


@dataclass(frozen=True, slots=True)
class Document:
    index: int
    body: Any


def _safe_load_all(text: str, max_nesting: int) -> list[Any]:
    try:
        return yaml_documents(text, max_nesting)
    except LoadError as exc:
        raise DocumentError(str(exc)) from None


def nodepool_documents(text: str, max_nesting: int = MAX_NESTING) -> list[Document]:
    """Every NodePool document in the text; raises DocumentError for any other kind."""
    out: list[Document] = []
    for index, doc in enumerate(_safe_load_all(text, max_nesting)):
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


def validate_text(text: str, max_nesting: int = MAX_NESTING) -> list[NodePoolValidation]:
    return [validate_nodepool(d.body) for d in nodepool_documents(text, max_nesting)]


_VALIDATORS = {"NodePool": validate_nodepool, "EC2NodeClass": validate_nodeclass, "NodeOverlay": validate_overlay}
_API_LIST_KINDS = ("List", "NodePoolList", "EC2NodeClassList", "NodeOverlayList")
Validation = NodePoolValidation | NodeClassValidation | OverlayValidation


def validate_api_text(
    text: str, max_nesting: int = MAX_NESTING, *, static_capacity: bool | None = None
) -> list[Validation]:
    """Every NodePool, EC2NodeClass and NodeOverlay in the text validated, in order (`nodewright
    validate`); raises DocumentError for any other kind, naming the document. `static_capacity`:
    the gate a NodePool's `spec.replicas` is admitted by (None: not checked)."""
    out: list[Validation] = []
    for index, doc in enumerate(_safe_load_all(text, max_nesting)):
        if not isinstance(doc, dict):
            raise DocumentError(f"document {index + 1} is not a mapping (got {type(doc).__name__})")
        items = [doc]
        if doc.get("kind") in _API_LIST_KINDS:
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise DocumentError(f"document {index + 1}: 'items' of a {doc.get('kind')} must be a list")
        for item in items:
            kind = item.get("kind") if isinstance(item, dict) else None
            if kind not in _VALIDATORS:
                shown = f"kind {kind!r}" if kind is not None else "no kind"
                raise DocumentError(
                    f"document {index + 1} has {shown};"
                    " only NodePool, EC2NodeClass and NodeOverlay documents are accepted"
                )
            if kind == "NodePool":
                out.append(validate_nodepool(item, static_capacity=static_capacity))
            else:
                out.append(_VALIDATORS[kind](item))
    return out


def load_nodepools(text: str, max_nesting: int = MAX_NESTING) -> list[NodePool]:
    """Valid NodePools from the text; raises DocumentError naming every invalid one, and for
    a text with no NodePool at all (an empty file configures nothing: that is a mistake)."""
    results = validate_text(text, max_nesting)
    if not results:
        raise DocumentError(NO_DOCUMENT)
    bad = [r for r in results if not r.valid]
    if bad:
        lines = [f"NodePool {r.name} is invalid:" + "".join(f"\n  {e}" for e in r.errors) for r in bad]
        raise DocumentError("\n".join(lines))
    return [r.nodepool for r in results if r.nodepool is not None]
