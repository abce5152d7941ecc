"""The bus: NATS JetStream, one stream `NODEWRIGHT` for every event."""
