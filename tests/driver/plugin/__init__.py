"""Tests of the driver: the plugin process: wiring, command line, feature gates, shutdown."""
