"""Names of Kubernetes objects as the API server checks them (RFC 1123 DNS labels and subdomains).

One definition for the driver's flags, the stack configuration, the capacity planner and the test
support package's fake API server.
"""

from __future__ import annotations

import re
from typing import Final

#: Longest DNS label (a namespace, a device name).
DNS_LABEL_MAX: Final = 63
#: Longest DNS subdomain (most object names, a label key's prefix).
DNS_SUBDOMAIN_MAX: Final = 253

#: A DNS label: 1-63 lower-case letters, digits and '-', starting and ending with a letter or digit.
DNS_LABEL_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
#: DNS labels joined by '.'; the length (at most `DNS_SUBDOMAIN_MAX`) is checked apart.
DNS_SUBDOMAIN_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def is_dns_label(value: str) -> bool:
    return bool(DNS_LABEL_RE.match(value))


def is_dns_subdomain(value: str, limit: int = DNS_SUBDOMAIN_MAX) -> bool:
    """A DNS subdomain of 1 to `limit` characters."""
    return 0 < len(value) <= limit and bool(DNS_SUBDOMAIN_RE.match(value))
