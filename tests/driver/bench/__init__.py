"""Tests of the driver: the driver's benchmarks run in their tiny modes."""
