"""Process plumbing shared by services and tests: embedded PostgreSQL and NATS servers."""
