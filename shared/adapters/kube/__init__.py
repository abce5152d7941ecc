"""The `Cluster` port over the Kubernetes API (kubernetes_asyncio): informers, patches under
optimistic locking, evictions, Events, status subresources; RBAC rules per port method."""
