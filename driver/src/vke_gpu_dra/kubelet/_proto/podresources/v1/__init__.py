"""Generated code; regenerate with driver/scripts/generate_protos.py."""
