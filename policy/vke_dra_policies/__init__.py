"""Policy pack for GPU DRA on VKE: pure validators (checks/), the table (pack.py), the server."""
