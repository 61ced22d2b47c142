"""What a runner process needs, loaded once: its settings (kind, name, workdir, lease), its own
config (read again only when the file changes) and its broker client, made in the process that
uses it. Passed to every step of a job instead of each reading the environment again."""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

import redis
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from bot.ci.job_keys import runner_public_keys
from bot.config import CarryConfig, ConfigError, Settings, load_config, load_settings
from bot.log import install_secrets, secret_values

DEFAULT_WORKDIR = Path("~/.cache/carry/runner")


@dataclass
class RunnerRuntime:
    settings: Settings
    _store: redis.Redis | None = field(default=None, repr=False)
    _store_pid: int = 0
    _public_keys: tuple[Ed25519PublicKey, ...] | None = field(default=None, repr=False)

    @property
    def kind(self) -> str:
        """CARRY_RUNNER_KIND, which `carry runner --kind K` sets ("" for no runner)."""
        return self.settings.runner_kind or ""

    @property
    def workdir(self) -> Path:
        return self.settings.runner_workdir or DEFAULT_WORKDIR.expanduser()

    @property
    def lease_s(self) -> int:
        """CARRY_CI_LEASE_S: how long a run's lease lives without renewal."""
        return self.settings.ci_lease_s

    def name(self, hostname: str | None) -> str:
        """CARRY_RUNNER_NAME, else the Celery worker's hostname, else the host's."""
        return self.settings.runner_name or str(hostname or socket.gethostname())

    @property
    def store(self) -> redis.Redis:
        """The broker client of this process: a forked pool process makes its own."""
        if self._store is None or self._store_pid != os.getpid():
            url = self.settings.redis_url.get_secret_value()
            self._store = redis.Redis.from_url(url, health_check_interval=30)
            self._store_pid = os.getpid()
        return self._store

    def job_public_keys(self) -> tuple[Ed25519PublicKey, ...]:
        """The service's public keys this runner verifies every job with (CARRY_JOB_PUBLIC_KEY,
        CARRY_JOB_PUBLIC_KEY_PATH, else the public.key of a service on this host; several
        during a rotation); ConfigError without one: the runner then refuses every job (and
        `carry runner` does not start)."""
        if self._public_keys is None:
            self._public_keys = runner_public_keys(self.settings)
        return self._public_keys

    def config(self) -> CarryConfig | None:
        """This runner host's own config (CARRY_CONFIG, else config/carry.yaml if there is
        one, as `carry runner` chose it), read again only when the file changes."""
        path = self.settings.config_path
        try:
            stat = path.stat()
        except OSError:
            if "config_path" in self.settings.model_fields_set:
                raise ConfigError([f"{path}: cannot read config file"]) from None
            return None
        return _load_config(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _load_config(path: str, mtime_ns: int, size: int) -> CarryConfig:
    # mtime_ns and size are only the cache key: an edited file is read again.
    return load_config(path, check_dirs=False)  # a runner host has no copy of patches/


@functools.cache
def runner_runtime() -> RunnerRuntime:
    """This process's runtime (ConfigError for a bad setting: the runner refuses its jobs);
    its secrets are installed for what the runner stores or logs (bot.log.redact)."""
    settings = load_settings()
    install_secrets(secret_values(settings))
    return RunnerRuntime(settings)


def reset() -> None:
    """Forget the runtime (a test that changes the environment)."""
    runner_runtime.cache_clear()
