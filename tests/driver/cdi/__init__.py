"""Tests of the driver: CDI specs and the driver's user-space in them."""
