"""The bus: NATS JetStream, one stream per deployment for every event (`docs/bus.md`).

`names` builds every subject and id; `identity` says who may publish what; `relay` puts the
store's events on the stream; `projection` and `work` are the two ways to consume them, both
faststream subscribers in a `service.ServiceShell`; `consumer` holds what they share.
"""
