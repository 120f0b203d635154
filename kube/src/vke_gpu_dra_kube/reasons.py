"""Why a request got no answer: the `reason` of a network failure (`failures.network_failure`), also the
reason of the driver's `KubeError` with status 0. No imports: the driver's kubelet services load it."""

from __future__ import annotations

from typing import Final

UNREACHABLE: Final = "Unreachable"
TIMEOUT: Final = "Timeout"
TLS_ERROR: Final = "TLSError"
TRANSPORT_ERROR: Final = "TransportError"
#: No request was sent: the credentials could not be had (an exec plugin failed, a token file vanished).
CREDENTIALS_ERROR: Final = "CredentialsError"
