"""Policy pack for GPU DRA on VKE: pure validators (checks/) and their pulumi_policy glue (pack.py)."""
