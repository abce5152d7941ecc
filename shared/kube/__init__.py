"""nodewright's Kubernetes API surface as data: the CustomResourceDefinitions and OpenAPI documents
generated from the karpenter.sh/v1 models. Pure: no I/O (the sim serves these, deploy/ ships them)."""
