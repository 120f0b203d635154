"""Tests of the driver: allocation results, consumable shares, extended resources, opaque configs."""
