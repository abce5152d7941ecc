"""The JetStream stream every event goes to, and how to make sure it exists."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import StorageType, StreamConfig
from nats.js.errors import NotFoundError

STREAM = "NODEWRIGHT"
EVENT_SUBJECTS = "nodewright.events.>"
DEAD_SUBJECTS = "nodewright.dead.>"
DUPLICATE_WINDOW_SECONDS = 600.0
"""JetStream drops a message whose id it saw this recently: a relay that restarts within ten
minutes of a crash republishes its last batch without duplicating it."""

MSG_ID = "Nats-Msg-Id"
POSITION = "Nodewright-Position"


def stream_config(duplicate_window: float = DUPLICATE_WINDOW_SECONDS) -> StreamConfig:
    return StreamConfig(
        name=STREAM,
        subjects=[EVENT_SUBJECTS, DEAD_SUBJECTS],
        storage=StorageType.FILE,
        duplicate_window=duplicate_window,
    )


async def ensure_stream(js: JetStreamContext, duplicate_window: float = DUPLICATE_WINDOW_SECONDS) -> None:
    """Create the stream, or bring an existing one's subjects and window up to date."""
    config = stream_config(duplicate_window)
    try:
        info = await js.stream_info(STREAM)
    except NotFoundError:
        await js.add_stream(config)
        return
    current = info.config
    if set(current.subjects or ()) != set(config.subjects or ()) or current.duplicate_window != duplicate_window:
        await js.update_stream(config)
