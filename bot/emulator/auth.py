"""Who is calling: PATs and installation tokens (`token ...`), App JWTs (`Bearer <JWT>`),
HTTP Basic with a token as password (git), or nobody."""

from __future__ import annotations

import base64
import binascii
import time
from typing import TYPE_CHECKING

import jwt

from .errors import ApiError
from .state import Identity, Token

if TYPE_CHECKING:
    from .hub import Hub

JWT_LEEWAY = 60
JWT_MAX_LIFETIME = 600  # GitHub refuses exp more than 10 minutes ahead


def bad_credentials() -> ApiError:
    return ApiError(401, "Bad credentials")


def jwt_error(message: str = "A JSON web token could not be decoded") -> ApiError:
    return ApiError(401, message)


ANONYMOUS = Identity(kind="anonymous", login=None)


def identify(hub: Hub, header: str | None, *, rest: bool = True) -> Identity:
    """The caller of one request; ApiError(401) for credentials that are present but bad.
    The token warm-up applies to REST only (`rest`): git over HTTP does not model it."""
    if not header:
        return ANONYMOUS
    scheme, _, credential = header.strip().partition(" ")
    credential = credential.strip()
    scheme = scheme.lower()
    if scheme == "basic":
        credential = _basic_secret(credential)
    elif scheme not in ("token", "bearer"):
        raise bad_credentials()
    token = hub.tokens.get(credential)
    if token is not None:
        if token.expires_at is not None and token.expires_at <= hub.clock.now():
            raise bad_credentials()
        if rest and _warming_up(hub, token):
            raise bad_credentials()
        if token.installation_id is None:
            return Identity(kind="user", login=token.login)
        return Identity(
            kind="installation",
            login=token.login,
            installation_id=token.installation_id,
            app_id=hub.installations[token.installation_id].app_id,
            token_repos=frozenset(token.repos) if token.repos is not None else None,
        )
    if scheme == "bearer" and credential.count(".") == 2:
        return _verify_app_jwt(hub, credential)
    raise bad_credentials()


def _warming_up(hub: Hub, token: Token) -> bool:
    """A just-minted installation token is not known everywhere yet: GitHub answers 401 for
    a moment (replication lag; octokit/auth-app.js#65 and #161 retry 401s for 5 s after
    creation for it). Off unless `token_warmup_s` is set, so other tests stay fast."""
    if token.minted_at is None or hub.token_warmup_s <= 0:
        return False
    return hub.clock.now() < token.minted_at + hub.token_warmup_s


def _basic_secret(credential: str) -> str:
    try:
        user, _, password = base64.b64decode(credential).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise bad_credentials() from exc
    return password or user


def _verify_app_jwt(hub: Hub, token: str) -> Identity:
    """RS256 with the App's public key, iss = app id, a short lifetime like GitHub demands."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise jwt_error() from exc
    if header.get("alg") != "RS256":
        raise jwt_error()
    try:
        app = hub.apps.get(int(str(claims.get("iss"))))
    except ValueError:
        app = None
    if app is None or app.public_key is None:
        raise jwt_error("Integration not found")
    try:
        verified = jwt.decode(
            token,
            app.public_key,
            algorithms=["RS256"],
            options={"require": ["iat", "exp", "iss"]},
            leeway=JWT_LEEWAY,
        )
    except jwt.ExpiredSignatureError as exc:
        raise jwt_error(
            "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires"
        ) from exc
    except jwt.PyJWTError as exc:
        raise jwt_error() from exc
    if verified["exp"] > time.time() + JWT_MAX_LIFETIME + JWT_LEEWAY:
        raise jwt_error("'Expiration time' claim ('exp') is too far in the future")
    return Identity(kind="app", login=app.bot_login, app_id=app.id)
