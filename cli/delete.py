"""`nodewright delete nodeclaim`: ask for NodeClaims to go, as `kubectl delete nodeclaim` does for
Karpenter: each request is recorded in the log once, and termination carries it out."""

from __future__ import annotations

import asyncio
from datetime import datetime

from cli.migrate import open_store


class NotFoundError(LookupError):
    pass


async def delete_nodeclaims(url: str, names: list[str], now: datetime, signing_key: bytes | None = None) -> list[str]:
    """`kubectl delete nodeclaim` for nodewright: record each claim's deletion request (once,
    however often asked), which termination carries out. The names of those asked for; a
    claim the log does not know, or knows gone, is `NotFoundError` (nothing recorded for any)."""
    from shared.events.contracts import NodeClaimDeletionRequested, NodeClaimEvent
    from shared.events.envelope import NewEvent, only_event_id
    from shared.store.units import unit

    store = await open_store(url, signing_key)
    try:
        requests = []
        for name in names:
            history = await store.read_stream(NodeClaimEvent.stream_of(name))
            if not history or history[-1].type in ("NodeClaimTerminated", "NodeClaimLaunchFailed"):
                raise NotFoundError(f'nodeclaims.karpenter.sh "{name}" not found')
            request = NodeClaimDeletionRequested(nodeclaim=name, nodepool=history[0].data["nodepool"], reason="Manual")
            event = NewEvent.of(
                request, occurred_at=now, producer="cli", event_id=only_event_id(request.stream_id, request.TYPE)
            )
            requests.append(unit(request.stream_id, None, [event]))
        for result in await store.append_units(requests):
            if isinstance(result, BaseException):
                raise result
        return names
    finally:
        await store.close()


async def wait_terminated(url: str, names: list[str], timeout: float) -> list[str]:
    """Wait until every claim is terminated; the names still not terminated at `timeout`."""
    from shared.events.contracts import NodeClaimEvent

    store = await open_store(url)
    deadline = asyncio.get_running_loop().time() + timeout
    try:
        left = list(names)
        while left and asyncio.get_running_loop().time() < deadline:
            ended = []
            for name in left:
                history = await store.read_stream(NodeClaimEvent.stream_of(name))
                if history and history[-1].type == "NodeClaimTerminated":
                    ended.append(name)
            left = [n for n in left if n not in ended]
            if left:
                await asyncio.sleep(0.5)
        return left
    finally:
        await store.close()
