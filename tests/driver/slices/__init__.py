"""Tests of the driver: ResourceSlice planning and publishing."""
