"""Pulumi components of the vke-gpu-dra program (one ComponentResource per concern)."""
