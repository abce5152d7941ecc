"""The outbox relay as a service: committed events onto the bus, by one leader at a time."""
