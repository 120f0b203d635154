"""The claim engine: the batch runner, the claim lifecycle, the checkpoint with its journal, the start
after a reboot, and the interface every step of the lifecycle implements (`step`). It imports no feature
(the import contracts hold it).
"""
