"""Tests of the driver: the API client, kubeconfig, claim status, reconciliation, RBAC, the API fake."""
