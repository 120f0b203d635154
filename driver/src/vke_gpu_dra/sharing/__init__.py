"""GPU sharing as NVIDIA's 25.8.1 plugin applies it: time-slicing through `nvidia-smi`, MPS through
a control-daemon Deployment per claim.

- `records`: what a claim changed on the node (`SharingRecord`), as its checkpoint entry keeps it;
- `plan`: what a claim asks (`Plan`), checked against the other claims of the node (pure);
- `mps`: the MPS objects: daemon ID, directories, Deployment, readiness, CDI edits (pure);
- `runners`: `nvidia-smi` and the shm mounts (I/O);
- `manager`: `SharingManager`, the prepare, unprepare and restore phases of a claim's sharing,
  raising the claim's errors itself.

Import the modules here directly, this package exports nothing itself (the checkpoint imports
`records` alone).
"""
