"""Jobs signed by the service, verified by the runner (issue 33: runners propose, the service
decides). Whoever holds a runner's broker password can put any message on its queue; a runner
runs a job only if the service signed it, with an Ed25519 key only the service holds.

What is signed is one canonical JSON text: the job's payload as the task carries it
(JobPayload.to_dict()), its run id and kind, and when it was issued and expires. The runner
rebuilds that text from the payload it received, so a payload changed by one byte, a job
for another kind, an expired job or one with no signature is refused.

Pure: keys are passed in; reading or generating key files is bot/ci/job_keys.py.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

SIGNATURE_VERSION = 1
# How far a runner's clock may run behind the service's before a job looks issued later.
CLOCK_SKEW_S = 300


@dataclass(frozen=True)
class JobSignature:
    """What travels beside the payload (the task's `signed` argument)."""

    run_id: str
    kind: str
    issued_at: int  # seconds since the epoch
    expires_at: int
    signature: str  # base64 of the Ed25519 signature of signed_text(...)
    version: int = SIGNATURE_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "run_id": self.run_id,
            "kind": self.kind,
            "issued_at": self.issued_at,
            "expires_at": self.expires_at,
            "signature": self.signature,
        }

    @classmethod
    def from_dict(cls, data: Any) -> JobSignature:
        """ValueError for anything that is not a signature of this version."""
        if not isinstance(data, Mapping):
            raise ValueError("not a mapping")
        if data.get("version") != SIGNATURE_VERSION:
            raise ValueError(f"version {data.get('version')!r} is not {SIGNATURE_VERSION}")
        for name, kind in (
            ("run_id", str),
            ("kind", str),
            ("issued_at", int),
            ("expires_at", int),
            ("signature", str),
        ):
            value = data.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"{name} is not a {kind.__name__}")
        return cls(
            data["run_id"], data["kind"], data["issued_at"], data["expires_at"], data["signature"]
        )


def signed_text(
    payload: Mapping[str, Any], run_id: str, kind: str, issued: int, expires: int
) -> bytes:
    """The exact bytes the service signs and the runner verifies."""
    body = {
        "carry-job": SIGNATURE_VERSION,
        "run_id": run_id,
        "kind": kind,
        "issued_at": issued,
        "expires_at": expires,
        "payload": _canonical(payload),
    }
    return json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode()


def _canonical(value: Any) -> Any:
    """A value as JSON would compare it: a whole float as an int (a timeout of 60 and of 60.0
    is one job), tuples as lists."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


def sign_job(
    key: Ed25519PrivateKey, payload: Mapping[str, Any], *, now: float, ttl_s: int
) -> JobSignature:
    """The service's signature of one job, valid for ttl_s seconds from now."""
    run_id, kind = str(payload["run_id"]), str(payload["kind"])
    issued = int(now)
    expires = issued + int(ttl_s)
    raw = key.sign(signed_text(payload, run_id, kind, issued, expires))
    return JobSignature(run_id, kind, issued, expires, base64.b64encode(raw).decode())


# The keys a runner accepts: one, or several while the service's key is being rotated.
PublicKeys = Ed25519PublicKey | Sequence[Ed25519PublicKey]


def verify_job(
    key: PublicKeys,
    payload: Mapping[str, Any],
    signed: Any,
    *,
    kind: str,
    now: float,
) -> str | None:
    """Why this runner (of `kind`) must not run the job (None when the service signed this
    very payload, for this kind, and the signature has not expired)."""
    problem = signature_problem(key, payload, signed)
    if problem is not None:
        return problem
    return signature_expiry_problem(JobSignature.from_dict(signed), kind, now=now)


def signature_problem(key: PublicKeys, payload: Mapping[str, Any], signed: Any) -> str | None:
    """Why the job is not one the holder of the private key signed (None when `signed` is a
    signature of this very payload, its run id and kind): no signature, a malformed one, one
    by another key, or one of another payload. With several keys (a rotation), a signature
    by any of them is the service's."""
    if signed is None:
        return "the job carries no signature from carry's service (forged, or queued by hand)"
    try:
        sig = JobSignature.from_dict(signed)
        raw = base64.b64decode(sig.signature, validate=True)
    except (ValueError, binascii.Error) as err:
        return f"the job's signature is malformed ({err})"
    try:
        text = signed_text(payload, sig.run_id, sig.kind, sig.issued_at, sig.expires_at)
    except (TypeError, ValueError):
        text = None
    if text is None or not any(_verifies(one, raw, text) for one in _keys(key)):
        return (
            "the job's signature does not verify with this runner's job public key: "
            "not signed by carry's service, or its payload changed since it was signed"
        )
    if (sig.run_id, sig.kind) != (payload.get("run_id"), payload.get("kind")):
        return f"the signature is for run {sig.run_id!r} of kind {sig.kind!r}, not this job"
    return None


def _keys(key: PublicKeys) -> tuple[Ed25519PublicKey, ...]:
    return (key,) if isinstance(key, Ed25519PublicKey) else tuple(key)


def _verifies(key: Ed25519PublicKey, raw: bytes, text: bytes) -> bool:
    try:
        key.verify(raw, text)
    except InvalidSignature:
        return False
    return True


def signature_expiry_problem(sig: JobSignature, kind: str, *, now: float) -> str | None:
    """Why an authentic signature is not valid on this runner (of `kind`) now: signed for
    another kind, expired, or issued later than this host's clock allows."""
    if sig.kind != kind:
        return f"the job is signed for runner kind {sig.kind!r}, this runner is {kind!r}"
    if now >= sig.expires_at:
        return f"the job's signature expired {int(now - sig.expires_at)} s ago"
    if sig.issued_at > now + CLOCK_SKEW_S:
        return "the job's signature was issued in the future (check this host's clock)"
    return None


# --------------------------------------------------------------------------- key texts


def new_private_key_pem() -> bytes:
    """A fresh Ed25519 private key, PKCS#8 PEM (unencrypted: its file's mode protects it)."""
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def private_key_from_pem(pem: bytes) -> Ed25519PrivateKey:
    """ValueError unless `pem` holds an Ed25519 private key."""
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("not an Ed25519 private key")
    return key


def public_key_text(key: Ed25519PublicKey | Ed25519PrivateKey) -> str:
    """The public key as one line: base64 of its 32 raw bytes (CARRY_JOB_PUBLIC_KEY's form)."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def public_key_from_text(text: str) -> Ed25519PublicKey:
    """A public key from its one-line form or a PEM; ValueError for anything else (a private
    key included: a runner must never be given one)."""
    stripped = text.strip()
    if "PRIVATE KEY" in stripped:
        raise ValueError("that is a private key: a runner holds only the public half")
    if stripped.startswith("-----BEGIN"):
        key = serialization.load_pem_public_key(stripped.encode())
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError("not an Ed25519 public key")
        return key
    try:
        raw = base64.b64decode(stripped, validate=True)
    except binascii.Error:
        raise ValueError("not base64 of an Ed25519 public key, nor a PEM") from None
    if len(raw) != 32:
        raise ValueError(f"an Ed25519 public key has 32 bytes, this one {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


_PEM_BLOCK = re.compile(r"-----BEGIN [A-Z ]+-----.*?-----END [A-Z ]+-----", re.DOTALL)


def public_keys_from_text(text: str) -> tuple[Ed25519PublicKey, ...]:
    """One or more public keys: one-line forms separated by commas or new lines, or PEM
    blocks (several while the service's key is rotated: the new one, then the old one until
    the old key's jobs have expired). ValueError naming the key at fault; none is an error."""
    if "PRIVATE KEY" in text:
        raise ValueError("that is a private key: a runner holds only the public half")
    parts = _PEM_BLOCK.findall(text)
    rest = _PEM_BLOCK.sub(" ", text)
    parts += [token.strip() for token in re.split(r"[,\n]", rest) if token.strip()]
    if not parts:
        raise ValueError("no public key in it")
    keys = []
    for number, part in enumerate(parts, start=1):
        try:
            keys.append(public_key_from_text(part))
        except ValueError as err:
            raise ValueError(
                f"key {number} of {len(parts)}: {err}" if len(parts) > 1 else str(err)
            ) from None
    return tuple(keys)


def public_keys_text(keys: Sequence[Ed25519PublicKey]) -> str:
    """Several public keys as CARRY_JOB_PUBLIC_KEY holds them: one-line forms, commas between."""
    return ",".join(public_key_text(key) for key in keys)
