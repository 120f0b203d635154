"""Tests of the driver: the claim engine: checkpoint and journal, the Step contract, the state, reboots, lost
claims."""
