"""bot/ci/signing.py: a runner runs only a job whose payload, run id and kind the service
signed, for its kind, before the signature expired (issue 33)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bot.ci import signing
from bot.ci.spec import JobPayload, StepSpec, TreeSpec

NOW = 1_800_000_000.0
TREE = TreeSpec(
    "/srv/up.git",
    "a" * 40,
    "/srv/down.git",
    "refs/heads/carry/s",
    "b" * 40,
    "p",
    "c" * 64,
    "e" * 40,
)
JOB = JobPayload(
    "gaudi-0123456789ab", "s1", "gaudi", "hw.gaudi", "t" * 64, "a" * 40, TREE,
    (StepSpec("setup", ("pip", "install", "-e", ".")),), (StepSpec("fixed", ("pytest", "-q"), 60.0),),
)  # fmt: skip
KEY = Ed25519PrivateKey.generate()


def signed(payload: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    body = payload if payload is not None else JOB.to_dict()
    args = {"now": NOW, "ttl_s": 3600, **kwargs}
    return signing.sign_job(KEY, body, **args).to_dict()


def verify(payload: dict[str, Any], sig: Any, *, kind: str = "gaudi", now: float = NOW) -> Any:
    return signing.verify_job(KEY.public_key(), payload, sig, kind=kind, now=now)


def test_a_job_the_service_signed_verifies_after_a_trip_through_json() -> None:
    """Celery carries payload and signature as JSON: floats, lists and all come back equal."""
    payload, sig = json.loads(json.dumps([JOB.to_dict(), signed()]))
    assert verify(payload, sig) is None


def test_a_whole_number_reads_the_same_as_an_int_or_a_float() -> None:
    """A record read back (JobPayload.from_dict) holds timeouts as floats, a config as ints:
    equal values are one job."""
    payload = JOB.to_dict()
    as_ints = {**payload, "checks": [{**payload["checks"][0], "timeout_s": 60}]}
    assert verify(as_ints, signed()) is None
    assert verify(payload, signed(as_ints)) is None


def test_any_change_to_the_payload_breaks_the_signature() -> None:
    sig = signed()
    changes = {
        "a check's command": {"checks": [{**JOB.to_dict()["checks"][0], "run": ["sh", "-c", "x"]}]},
        "the upstream head": {"tree": {**JOB.to_dict()["tree"], "upstream_sha": "f" * 40}},
        "the run id": {"run_id": "gaudi-ffffffffffff"},
        "a timeout": {"checks": [{**JOB.to_dict()["checks"][0], "timeout_s": 61.0}]},
    }
    for what, change in changes.items():
        reason = verify({**JOB.to_dict(), **change}, sig)
        assert reason is not None and "does not verify" in reason, what


def test_no_signature_a_malformed_one_or_another_keys_is_refused() -> None:
    payload = JOB.to_dict()
    assert verify(payload, None) == (
        "the job carries no signature from carry's service (forged, or queued by hand)"
    )
    for bad in ("x", {"version": 1}, {**signed(), "issued_at": "soon"}, {**signed(), "version": 2}):
        reason = verify(payload, bad)
        assert reason is not None and reason.startswith("the job's signature is malformed"), bad
    garbled = {**signed(), "signature": "not base64!"}
    assert str(verify(payload, garbled)).startswith("the job's signature is malformed")
    other = signing.sign_job(Ed25519PrivateKey.generate(), payload, now=NOW, ttl_s=60)
    assert "does not verify" in str(verify(payload, other.to_dict()))
    # the times are signed too: a later expiry written in does not verify
    assert "does not verify" in str(verify(payload, {**signed(), "expires_at": int(NOW) + 10**6}))


def test_a_job_for_another_kind_an_expired_one_or_one_from_the_future_is_refused() -> None:
    payload = JOB.to_dict()
    assert verify(payload, signed(), kind="gb10") == (
        "the job is signed for runner kind 'gaudi', this runner is 'gb10'"
    )
    assert verify(payload, signed(), now=NOW + 3599) is None
    assert verify(payload, signed(), now=NOW + 3700) == "the job's signature expired 100 s ago"
    ahead = signed(now=NOW + 2 * signing.CLOCK_SKEW_S)
    assert verify(payload, ahead) == (
        "the job's signature was issued in the future (check this host's clock)"
    )
    assert verify(payload, signed(now=NOW + signing.CLOCK_SKEW_S / 2)) is None


def test_the_public_key_travels_as_one_line_and_a_private_key_is_refused() -> None:
    line = signing.public_key_text(KEY)
    assert "\n" not in line and len(line) == 44
    assert signing.public_key_text(signing.public_key_from_text(f"  {line}\n")) == line
    private_pem = signing.new_private_key_pem().decode()
    with pytest.raises(ValueError, match="that is a private key"):
        signing.public_key_from_text(private_pem)
    with pytest.raises(ValueError, match="32 bytes"):
        signing.public_key_from_text("AAAA")
    with pytest.raises(ValueError, match="not base64"):
        signing.public_key_from_text("not a key")
    again = signing.private_key_from_pem(private_pem.encode())  # its public half, as a line
    assert signing.public_key_from_text(signing.public_key_text(again)) is not None


def test_the_signed_text_names_the_private_key_nowhere() -> None:
    """What travels with a job (the signature and the signed text) holds no byte of the key."""
    sig = signed()
    text = signing.signed_text(
        JOB.to_dict(), sig["run_id"], "gaudi", sig["issued_at"], sig["expires_at"]
    )
    pem = signing.new_private_key_pem()
    key = signing.private_key_from_pem(pem)
    travelling = json.dumps(signing.sign_job(key, JOB.to_dict(), now=NOW, ttl_s=1).to_dict())
    body = b"".join(line for line in pem.splitlines() if b"-----" not in line)
    assert body.decode() not in travelling + text.decode()


def test_during_a_rotation_a_job_signed_with_either_key_verifies_and_no_other() -> None:
    new, stranger = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    both = (new.public_key(), KEY.public_key())
    payload = JOB.to_dict()
    by_old = signed()
    by_new = signing.sign_job(new, payload, now=NOW, ttl_s=3600).to_dict()
    by_stranger = signing.sign_job(stranger, payload, now=NOW, ttl_s=3600).to_dict()
    assert signing.verify_job(both, payload, by_old, kind="gaudi", now=NOW) is None
    assert signing.verify_job(both, payload, by_new, kind="gaudi", now=NOW) is None
    refused = signing.verify_job(both, payload, by_stranger, kind="gaudi", now=NOW)
    assert refused is not None and "does not verify" in refused
    # the new key alone once the rotation ended: a job the old key signed is refused
    assert signing.verify_job((new.public_key(),), payload, by_old, kind="gaudi", now=NOW)
