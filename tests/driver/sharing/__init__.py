"""Tests of the driver: time-slicing and MPS, the fake nvidia-smi."""
