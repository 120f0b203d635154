"""How every request to the API server is made, by the lean transport and the official client alike.

* Every request is tried once: urllib3's `Retry` is off, so a caller with a deadline bounds each request
  by what is left of it, and no retry prints a warning line.
* `REQUEST_TIMEOUT` is the (connect, read) timeout of an ordinary request.
"""

from __future__ import annotations

import logging
import warnings
from typing import Final

import urllib3

#: Client-side timeouts (connect, read) in seconds for ordinary requests.
REQUEST_TIMEOUT: Final = (10.0, 30.0)
#: No hidden retries: one attempt per request (callers decide about retrying, within their deadline).
NO_RETRIES: Final = urllib3.Retry(
    total=0, connect=0, read=0, redirect=0, status=0, other=0, raise_on_status=False
)

#: A timeout as the clients take it: seconds for the whole request, or (connect, read).
Timeout = float | tuple[float, float]


def urllib3_timeout(timeout: Timeout) -> urllib3.Timeout:
    """`timeout` as urllib3 takes it: a total for the whole request, or separate connect and read limits."""
    if isinstance(timeout, tuple):
        connect, read = timeout
        return urllib3.Timeout(connect=connect, read=read)
    return urllib3.Timeout(total=timeout)


def say_tls_unverified(log: logging.Logger, server: str) -> None:
    """A client that does not verify the API server's certificate says so once, in the log: urllib3's
    warning for every such request is not shown."""
    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    log.warning(
        "TLS verification of the API server is off (the kubeconfig sets insecure-skip-tls-verify)",
        extra={"fields": {"server": server}},
    )
