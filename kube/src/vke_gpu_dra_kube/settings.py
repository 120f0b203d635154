"""How every request to the API server is made, by the lean transport and the official client alike.

* Every request is tried once: the lean transport never retries, and for the official client urllib3's
  `Retry` is off (`NO_RETRIES`), so a caller with a deadline bounds each request by what is left of it,
  and no retry prints a warning line.
* `REQUEST_TIMEOUT` is the (connect, read) timeout of an ordinary request.

urllib3 is loaded only when `NO_RETRIES` or `say_tls_unverified` is first used (by the official client):
the lean transport's import path stays without it.
"""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import urllib3

#: Client-side timeouts (connect, read) in seconds for ordinary requests.
REQUEST_TIMEOUT: Final = (10.0, 30.0)

#: A timeout as the clients take it: seconds for the whole request, or (connect, read).
Timeout = float | tuple[float, float]

if TYPE_CHECKING:
    #: The official client's retry policy: one attempt per request (callers decide about retrying, within
    #: their deadline).
    NO_RETRIES: urllib3.Retry
else:

    def __getattr__(name: str) -> object:
        """`NO_RETRIES`, made (and kept) when first asked for, so that importing this module does not
        load urllib3."""
        if name != "NO_RETRIES":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import urllib3  # noqa: PLC0415 (loaded for the official client only, see the module docstring)

        retries = urllib3.Retry(
            total=0, connect=0, read=0, redirect=0, status=0, other=0, raise_on_status=False
        )
        return globals().setdefault("NO_RETRIES", retries)


def log_tls_unverified(log: logging.Logger, server: str) -> None:
    """Say once, in the log, that the API server's certificate is not verified."""
    log.warning(
        "TLS verification of the API server is off (the kubeconfig sets insecure-skip-tls-verify)",
        extra={"fields": {"server": server}},
    )


def say_tls_unverified(log: logging.Logger, server: str) -> None:
    """For a client on urllib3 (the official client) that does not verify the API server's certificate:
    said once, in the log, and urllib3's warning for every such request is not shown."""
    from urllib3.exceptions import InsecureRequestWarning  # noqa: PLC0415 (see the module docstring)

    warnings.filterwarnings("ignore", category=InsecureRequestWarning)
    log_tls_unverified(log, server)
