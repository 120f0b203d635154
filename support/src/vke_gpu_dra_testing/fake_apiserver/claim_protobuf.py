"""A claim read and its status updated in Kubernetes' protobuf form (`k8s_protobuf`), and the rule that makes
a client need them: the API server keeps a claim's opaque device config as the bytes its creator sent, and
refuses any status write whose allocation differs from them (422, `status.allocation`). A server-side apply
serialises them again (compact, sorted keys), so a claim whose stored bytes are not in that form has every
status apply refused; a protobuf update carries the bytes as read and keeps them.

Claims keep the stored bytes of their config in `ClusterObjects.claim_config_bytes` (set by `add_claim`'s
`config_bytes`; the default is the compact form). Called with the server's `cond` held."""

from __future__ import annotations

import copy
from typing import Any

from .. import fake_claim_status
from ..k8s_protobuf import PB, claim_message, compact, devices_json, envelope, open_envelope
from .errors import ApiError
from .objects import ClusterObjects

UPDATE_MANAGER_SUFFIX = " (Update)"


def rewritten_bytes(claim: dict[str, Any]) -> list[bytes]:
    """The claim's opaque device configs as an apply serialises them again (`compact`)."""
    configs = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("config") or []
    return [compact((c.get("opaque") or {}).get("parameters")) for c in configs]


def stored_bytes(api: ClusterObjects, claim: dict[str, Any]) -> list[bytes]:
    meta = claim["metadata"]
    return api.claim_config_bytes.get((meta["namespace"], meta["name"]), rewritten_bytes(claim))


def apply_refused(api: ClusterObjects, claim: dict[str, Any]) -> ApiError | None:
    """The 422 of a status apply on a claim whose stored config bytes an apply would rewrite, else None."""
    if stored_bytes(api, claim) == rewritten_bytes(claim):
        return None
    return ApiError(
        422,
        "Invalid",
        f'ResourceClaim.resource.k8s.io "{claim["metadata"]["name"]}" is invalid: status.allocation: '
        "Invalid value: null: field is immutable",
    )


def read(api: ClusterObjects, claim: dict[str, Any]) -> bytes:
    """The claim's protobuf body, its config as the bytes stored."""
    return envelope(claim_message(claim, stored_bytes(api, claim)), "ResourceClaim", "resource.k8s.io/v1")


def update_status(
    api: ClusterObjects, namespace: str, name: str, wire: bytes, query: dict[str, str]
) -> dict[str, Any]:
    """PUT .../resourceclaims/<name>/status with a protobuf body: the claim's `status.devices` as sent, if
    the body is this claim at its current resourceVersion with its allocation's bytes unchanged; the stored
    claim. The entries it sets or changes are owned by the manager's Update."""
    claim = api.claims.get((namespace, name))
    if claim is None:
        raise ApiError.not_found("resourceclaims", "resource.k8s.io", name)
    sent = _sent_claim(wire)
    _check_current(api, claim, sent)
    invalid = f'ResourceClaim.resource.k8s.io "{name}" is invalid: '
    try:
        entries = devices_json(sent)
    except ValueError as err:
        raise ApiError(422, "Invalid", f"{invalid}{err}") from None
    allocated = fake_claim_status.allocated_keys(claim)
    errors = [
        e for i, entry in enumerate(entries) for e in fake_claim_status.entry_errors(i, entry, allocated)
    ]
    if errors:
        raise ApiError(422, "Invalid", invalid + "; ".join(errors))
    _own(api, claim, entries, (query.get("fieldManager") or "unknown") + UPDATE_MANAGER_SUFFIX)
    updated = copy.deepcopy(claim)
    if entries:
        updated.setdefault("status", {})["devices"] = entries
    else:
        updated.get("status", {}).pop("devices", None)
    updated["metadata"]["resourceVersion"] = api._next_rv()
    api.claims[(namespace, name)] = updated
    return copy.deepcopy(updated)


def _sent_claim(wire: bytes) -> Any:
    try:
        api_version, kind, raw = open_envelope(wire)
        sent = PB["ResourceClaim"].FromString(raw)
    except Exception as err:  # not an envelope, or the library's DecodeError
        raise ApiError(
            400, "BadRequest", f"the body is not a ResourceClaim in protobuf form: {err}"
        ) from None
    if (api_version, kind) != ("resource.k8s.io/v1", "ResourceClaim"):
        raise ApiError(400, "BadRequest", f"the body holds a {kind} ({api_version}), not a ResourceClaim")
    return sent


def _check_current(api: ClusterObjects, claim: dict[str, Any], sent: Any) -> None:
    """The update is of this claim (uid) as stored now (resourceVersion), its allocation's bytes as stored."""
    meta = claim["metadata"]
    if sent.metadata.uid and sent.metadata.uid != meta["uid"]:
        raise ApiError(
            409,
            "Conflict",
            f"Precondition failed: UID in precondition: {meta['uid']}, "
            f"UID in object meta: {sent.metadata.uid}",
        )
    if sent.metadata.resourceVersion != meta["resourceVersion"]:
        raise ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on resourceclaims.resource.k8s.io "{meta["name"]}": the object '
            "has been modified; please apply your changes to the latest version and try again",
        )
    current = claim_message(claim, stored_bytes(api, claim))
    if sent.status.allocation.SerializeToString() != current.status.allocation.SerializeToString():
        raise ApiError(
            422,
            "Invalid",
            f'ResourceClaim.resource.k8s.io "{meta["name"]}" is invalid: status.allocation: Invalid value: '
            "null: field is immutable",
        )


def _own(api: ClusterObjects, claim: dict[str, Any], entries: list[dict[str, Any]], owner: str) -> None:
    """Ownership after an update by `owner`: the entries it set or changed are its own, no one else's; an
    entry it removed is no one's."""
    meta = claim["metadata"]
    before = {fake_claim_status.key_of(e): e for e in (claim.get("status") or {}).get("devices") or []}
    after = {fake_claim_status.key_of(e): e for e in entries}
    changed = {k for k, e in after.items() if before.get(k) != e}
    owners = api.claim_status_owners.setdefault((meta["namespace"], meta["name"]), {})
    for manager in list(owners):
        owners[manager] = (owners[manager] & set(after)) - changed
    owners[owner] = owners.get(owner, set()) | changed


def status_body(err: ApiError) -> bytes:
    """An error answer in protobuf form: a meta/v1 Status."""
    status = PB["Status"](status="Failure", message=err.message, reason=err.reason, code=err.code)
    return envelope(status, "Status", "v1")
