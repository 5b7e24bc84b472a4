"""Who is calling and what they may use: key, alias, data class.

All answers come from the in-memory snapshot; no database on the hot path.
"""

from __future__ import annotations

from proxy.errors import AuthenticationFailed, InvalidRequest, NotFound, PermissionDenied
from proxy.snapshot import DATA_CLASSES, AdminToken, Alias, KeyRecord, Snapshot, hash_key

_RANK = {name: i for i, name in enumerate(DATA_CLASSES)}


def bearer_token(header: str | None) -> str:
    if not header:
        raise AuthenticationFailed(
            "You didn't provide an API key. Send your farebox virtual key as 'Authorization: Bearer <key>'.",
            code="missing_api_key",
        )
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationFailed("The Authorization header must be 'Bearer <key>'.")
    return token


def authenticate(snapshot: Snapshot, header: str | None, now: float) -> KeyRecord:
    """The key record for the presented key; 401 for unknown, revoked or expired keys."""
    token = bearer_token(header)
    key = snapshot.key_by_secret(token)
    # One message for every failure: a caller learns nothing about which keys exist.
    if key is None:
        raise AuthenticationFailed("Incorrect API key provided.")
    return usable(key, now)


def authenticate_batch_line(snapshot: Snapshot, key_id: str | None, now: float) -> KeyRecord:
    """The key a batch runner's line runs as (the runner's token already checked): the batch's key, if it is
    still usable now (revoked or expired since the batch was created: the line fails, as the key's own
    requests would)."""
    key = snapshot.keys_by_id.get(key_id or "")
    if key is None:
        raise AuthenticationFailed(f"The key {key_id} that created this batch no longer exists.")
    return usable(key, now)


def usable(key: KeyRecord, now: float) -> KeyRecord:
    """The key, unless it is revoked, expired or spends another environment's budget."""
    if key.revoked:
        raise AuthenticationFailed(f"The key {key.key_id} has been revoked.", code="revoked_api_key")
    if key.expires_at is not None and now >= key.expires_at:
        raise AuthenticationFailed(f"The key {key.key_id} has expired.", code="expired_api_key")
    if key.env_conflict is not None:  # precomputed at publish: no budget lookup here
        raise PermissionDenied(
            f"The key {key.key_id} is a {key.env} key and may not spend the budget {key.env_conflict}, "
            "which belongs to another environment.",
            code="environment_mismatch",
        )
    return key


def authenticate_admin(snapshot: Snapshot, header: str | None) -> AdminToken:
    """The admin token for an /admin/ call; 401 otherwise (virtual keys are not admin tokens)."""
    token = snapshot.admin_tokens.get(hash_key(bearer_token(header)))
    if token is None:
        raise AuthenticationFailed("Incorrect admin token provided.", code="invalid_admin_token")
    return token


def require_role(token: AdminToken, *roles: str) -> None:
    """403 unless the token's role is one of ``roles`` (admin may do everything)."""
    if token.role != "admin" and token.role not in roles:
        raise PermissionDenied(
            f"Admin token '{token.name}' has role '{token.role}'; this call needs {' or '.join(('admin', *roles))}.",
            code="insufficient_role",
        )


def allowed_alias(snapshot: Snapshot, key: KeyRecord, name: str, kind: str) -> Alias:
    alias = snapshot.aliases.get(name)
    if alias is None:
        raise NotFound(
            f"The model '{name}' does not exist. Use one of the aliases GET /v1/models lists.",
            param="model",
            code="model_not_found",
        )
    if name not in key.aliases:
        raise PermissionDenied(
            f"The key {key.key_id} may not use the model '{name}'.", param="model", code="model_not_allowed"
        )
    if alias.kind != kind:
        raise InvalidRequest(
            f"The model '{name}' is a {alias.kind} alias and cannot serve this endpoint.",
            param="model",
            code="wrong_model_kind",
        )
    return alias


def data_class(key: KeyRecord, header: str | None) -> str:
    """max(key default, caller's tag); above the key's ceiling is refused."""
    cls = key.default_data_class
    if header:
        tag = header.strip().lower()
        if tag not in _RANK:
            raise InvalidRequest(
                f"x-fb-data-class must be one of {list(DATA_CLASSES)}, got {header!r}.",
                param="x-fb-data-class",
                code="invalid_data_class",
            )
        if _RANK[tag] > _RANK[cls]:
            cls = tag
    if _RANK[cls] > _RANK[key.data_class_ceiling]:
        raise PermissionDenied(
            f"Data class '{cls}' is above the ceiling '{key.data_class_ceiling}' of key {key.key_id}.",
            code="data_class_not_allowed",
        )
    return cls
