"""The `Cluster` port over the Kubernetes API (kubernetes_asyncio): informers, patches under
optimistic locking, evictions, Events, status subresources; RBAC rules per port method."""

from __future__ import annotations

from shared.adapters.kube.cluster import KubeCluster, KubeconfigError
from shared.adapters.kube.kubeconfig import kubeconfig_document, write_kubeconfig

__all__ = ["KubeCluster", "KubeconfigError", "kubeconfig_document", "write_kubeconfig"]
