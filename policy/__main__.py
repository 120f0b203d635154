"""Entry point the Pulumi CLI runs: serve the policy pack's analyzer."""

import sys
from pathlib import Path

# The pack reads stack config with the program's own parser (components/config.py), one directory up.
_PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)
if _PROJECT_ROOT not in sys.path:
    sys.path.append(_PROJECT_ROOT)

from vke_dra_policies.pack import serve  # noqa: E402 - needs the path above

serve()
