"""How often the prepared claims are checked against the API server (`reconcile`).

The bounds of --claim-reconcile-interval, apart from `reconcile` so the command line loads without it.
"""

from __future__ import annotations

from typing import Final

#: Seconds between rounds by default: 1,000 nodes x 8 claims / 600 s = 13.3 GETs/s (budget 20/s).
DEFAULT_INTERVAL_SECONDS: Final = 600
#: Bounds of --claim-reconcile-interval.
MIN_INTERVAL_SECONDS: Final = 10
MAX_INTERVAL_SECONDS: Final = 86400
