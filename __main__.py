"""vke-gpu-dra: GPU dynamic resource allocation on VKE (see README.md and components/)."""

from components.stack import main

main()
