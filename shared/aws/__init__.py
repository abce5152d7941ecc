"""The AWS provider's pure core: EC2 instance types into catalog entries, labels and prices (no I/O)."""
