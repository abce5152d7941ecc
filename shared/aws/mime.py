"""MIME multi-part user data, as cloud-init and nodeadm read it: the user's document taken apart,
parts put together. Pure; the standard library's `email` package does the format.

As upstream (aws/karpenter-provider-aws `pkg/providers/amifamily/bootstrap/mime/mime.go`,
`eksbootstrap.go`): user data that starts with `MIME-Version:` or `Content-Type:` must be a
well-formed multi-part document; anything else is a single part. Unlike upstream's fixed `//`,
the boundary is a digest of the parts: still the same for the same parts (a launch template's
name hashes its user data), and never a line a part holds.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from email import errors
from email.generator import Generator
from email.message import Message
from email.mime.multipart import MIMEMultipart
from email.parser import Parser
from email.policy import compat32

SHELL_SCRIPT = 'text/x-shellscript; charset="us-ascii"'
NODE_CONFIG = "application/node.eks.aws"
"""nodeadm's content type for a NodeConfig part."""
MIME_PREFIXES = ("MIME-Version:", "Content-Type:")
_POLICY = compat32.clone(linesep="\n", max_line_length=0)
_DEFECTS: dict[type[errors.MessageDefect], str] = {
    errors.NoBoundaryInMultipartDefect: "its multipart Content-Type names no boundary",
    errors.StartBoundaryNotFoundDefect: "no part starts with its boundary",
    errors.CloseBoundaryNotFoundDefect: "its closing boundary (--BOUNDARY--) is missing",
    errors.MissingHeaderBodySeparatorDefect: "a header block is not ended by a blank line",
    errors.MultipartInvariantViolationDefect: "it says multipart but holds no parts",
}


class UserDataError(ValueError):
    """The class's `spec.userData` cannot be merged with the bootstrap: the message names the
    field and the rule it breaks."""


def is_mime(text: str) -> bool:
    return text.strip().startswith(MIME_PREFIXES)


def parts_of(text: str) -> list[Message]:
    """The parts of a multi-part MIME document, in order, each with its own headers."""
    message = Parser(policy=_POLICY).parsestr(text.strip() + "\n")
    if message.get("Content-Type") is None:
        raise UserDataError("spec.userData: a MIME document needs a Content-Type header (multipart/mixed)")
    if message.get_content_maintype() != "multipart":
        raise UserDataError(
            f"spec.userData: a MIME document must be multipart (multipart/mixed), not {message.get_content_type()}"
        )
    for part in message.walk():
        for defect in part.defects:
            why = _DEFECTS.get(type(defect), type(defect).__name__)
            raise UserDataError(f"spec.userData: not a well-formed multipart MIME document: {why}")
    payload = message.get_payload()
    return list(payload) if isinstance(payload, list) else []


def part(content_type: str, content: str) -> Message:
    """One part of the given type holding `content` as written (no transfer encoding)."""
    out = Message(policy=_POLICY)
    out["Content-Type"] = content_type
    out.set_payload(content)
    return out


def archive(parts: Sequence[Message]) -> str:
    """A multipart/mixed document of the parts, in order."""
    texts = [_text(p) for p in parts]
    digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()
    boundary = f"=={digest[:32]}=="
    while any(boundary in t for t in texts):  # a part holding a digest of itself: never, but cheap
        digest = hashlib.sha256(digest.encode()).hexdigest()
        boundary = f"=={digest[:32]}=="
    document = MIMEMultipart("mixed", boundary=boundary, policy=_POLICY)
    for p in parts:
        document.attach(p)
    return _text(document)


def _text(message: Message) -> str:
    out = io.StringIO()
    Generator(out, mangle_from_=False, policy=_POLICY).flatten(message)
    return out.getvalue()
