"""`KubeError`, what a failed API request raises: apart from the transport, so the kubelet services
load without it."""

from __future__ import annotations

from vke_gpu_dra_kube.reasons import TIMEOUT


class KubeError(Exception):
    """A failed API request: HTTP status (0 for transport errors) and the server's message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else message)
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def timed_out(self) -> bool:
        """The API server did not answer within the request's timeout."""
        return self.status == 0 and self.reason == TIMEOUT

    @property
    def unreachable(self) -> bool:
        """No answer at all: connection refused, DNS, TLS, reset, or a timeout."""
        return self.status == 0
