"""`python -m bench.pod_startup`: the pod start-up bench (its package's docstring says what it does)."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
