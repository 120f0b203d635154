"""Tests of the driver: device metadata (KEP-5304)."""
