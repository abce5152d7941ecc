"""The event store on PostgreSQL: the log, per-NodePool counters, checkpoints."""
