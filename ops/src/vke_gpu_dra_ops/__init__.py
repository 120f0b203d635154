"""Operator tools for DRA GPUs on VKE: `verify`, `demo`, `plan`."""
