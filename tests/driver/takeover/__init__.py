"""Tests of the driver: taking a node over from NVIDIA's plugin."""
