"""Termination: drains NodeClaims whose deletion was asked for, and deletes their instances."""
