"""Where the job signing keys live (bot/ci/signing.py signs and verifies with them).

The service holds the private key: CARRY_JOB_SIGNING_KEY_PATH, by default
<CARRY_CACHE_DIR>/job-signing/private.pem (mode 0600), made on first use with its public half
beside it (public.key, one line). A runner holds only the public key: CARRY_JOB_PUBLIC_KEY
(that line), or the file CARRY_JOB_PUBLIC_KEY_PATH, or else the public.key a service on the
same host made; with none of them it refuses to start. Either may hold several public keys
(commas or one per line) while the service's key is rotated: docs/security.md says how.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from bot.ci import signing
from bot.config import ConfigError, Settings

log = logging.getLogger("carry.ci")

KEY_DIR = "job-signing"
PRIVATE_NAME = "private.pem"
PUBLIC_NAME = "public.key"
NO_PUBLIC_KEY = (
    "no job public key: a runner runs only jobs carry's service signed; set "
    "CARRY_JOB_PUBLIC_KEY to the line `carry job-key` prints on the service's host "
    "(or CARRY_JOB_PUBLIC_KEY_PATH to a file holding it)"
)


def private_key_path(settings: Settings) -> Path:
    return settings.job_signing_key_path or settings.cache_dir / KEY_DIR / PRIVATE_NAME


def public_key_path(settings: Settings) -> Path:
    """Where a runner reads the public key from when CARRY_JOB_PUBLIC_KEY is not set."""
    if settings.job_public_key_path is not None:
        return settings.job_public_key_path
    return private_key_path(settings).with_name(PUBLIC_NAME)


def ensure_key_pair(private: Path) -> tuple[Ed25519PrivateKey, bool]:
    """The private key at `private`, made first (mode 0600, in a 0700 directory) if there is
    none; True when this call made it. Processes racing to make it agree on one key."""
    created = False
    if not private.exists():
        private.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = private.with_name(f".{private.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, signing.new_private_key_pem())
        finally:
            os.close(fd)
        try:
            os.link(tmp, private)  # never replaces a key another process made meanwhile
            created = True
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    key = _read_private(private)
    _write_public(private.with_name(PUBLIC_NAME), signing.public_key_text(key))
    if created:
        log.warning(
            "made the job signing key %s; runners need its public half: "
            "CARRY_JOB_PUBLIC_KEY=%s (also in %s)",
            private,
            signing.public_key_text(key),
            private.with_name(PUBLIC_NAME),
        )
    return key, created


def _read_private(path: Path) -> Ed25519PrivateKey:
    try:
        return signing.private_key_from_pem(path.read_bytes())
    except OSError as err:
        raise ConfigError([f"job signing key {path}: cannot read it: {err.strerror}"]) from None
    except (ValueError, TypeError):
        raise ConfigError([f"job signing key {path}: not an Ed25519 private key (PEM)"]) from None


def _write_public(path: Path, text: str) -> None:
    with contextlib.suppress(OSError):  # a read-only key directory: the public half is optional
        if path.is_file() and path.read_text().strip() == text:
            return
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text + "\n")
        tmp.chmod(0o644)
        tmp.replace(path)


def service_signing_key(settings: Settings) -> Ed25519PrivateKey:
    """The service's private key (made on first use); ConfigError when it cannot be read."""
    return signing_key_at(private_key_path(settings))


def signing_key_at(path: Path) -> Ed25519PrivateKey:
    """The private key at `path` (made on first use); ConfigError when it cannot be read."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return ensure_key_pair(path)[0]
    except OSError as err:
        raise ConfigError([f"job signing key {path}: cannot read it: {err.strerror}"]) from None
    return _cached_private(str(path), stat.st_mtime_ns, stat.st_size)


@dataclass(frozen=True)
class JobIssuer:
    """How the service hands a job to the runners, from its settings (passed in: the Runtime's
    `job_issuer`): signed with the service's key (made on first use), valid `ttl_s`
    (CARRY_JOB_TTL_S), after waiting `debounce_s` in the broker so that a burst of heads runs
    once (CARRY_CI_DEBOUNCE_S)."""

    private_key: Path
    ttl_s: int
    debounce_s: float

    @classmethod
    def from_settings(cls, settings: Settings) -> JobIssuer:
        return cls(private_key_path(settings), settings.job_ttl_s, settings.ci_debounce_s)

    def sign(self, payload: Mapping[str, Any], *, now: float) -> dict[str, Any]:
        """The service's signature of one job (bot/ci/signing.py), as the task sends it."""
        key = signing_key_at(self.private_key)
        return signing.sign_job(key, payload, now=now, ttl_s=self.ttl_s).to_dict()


@functools.lru_cache(maxsize=4)
def _cached_private(path: str, mtime_ns: int, size: int) -> Ed25519PrivateKey:
    # mtime_ns and size are only the cache key: a replaced key is read again.
    return _read_private(Path(path))


def runner_public_keys(settings: Settings) -> tuple[Ed25519PublicKey, ...]:
    """The public keys a runner verifies its jobs with (one, or several during a rotation);
    ConfigError (one line) without one."""
    if settings.job_public_key is not None:
        try:
            return signing.public_keys_from_text(settings.job_public_key)
        except ValueError as err:
            raise ConfigError([f"environment: CARRY_JOB_PUBLIC_KEY: {err}"]) from None
    path = public_key_path(settings)
    try:
        text = path.read_text()
    except FileNotFoundError:
        if settings.job_public_key_path is not None:
            raise ConfigError([f"environment: CARRY_JOB_PUBLIC_KEY_PATH: no file {path}"]) from None
        raise ConfigError([NO_PUBLIC_KEY]) from None
    except OSError as err:
        raise ConfigError([f"job public key {path}: cannot read it: {err.strerror}"]) from None
    try:
        return signing.public_keys_from_text(text)
    except ValueError as err:
        raise ConfigError([f"job public key {path}: {err}"]) from None
