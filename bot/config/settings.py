"""Settings from the environment: secrets (held as SecretStr, out of reprs, logs and error
messages) and the service's knobs, each validated with a one-line error."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bot.config.loader import SECRET_VALUE_RE, ConfigError
from bot.config.schema import (
    DEFAULT_CONFIG_PATH,
    DEFAULT_MAX_BODY_BYTES,
    GITHUB_MAX_PAYLOAD_BYTES,
    CarryConfig,
    EnvName,
    PositiveInt,
)
from bot.git.runner import DEFAULT_MAX_BLOB_BYTES

# --------------------------------------------------------------------------- environment


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
_REDIS_SHAPES = "expected redis://HOST[:PORT][/DB], rediss://HOST[:PORT][/DB] or unix:///PATH"
# Variables whose values never appear in an error message (a Redis URL is shown redacted).
_SECRET_VARIABLES = frozenset(
    {"CARRY_WEBHOOK_SECRET", "GITHUB_TOKEN", "GITHUB_APP_PRIVATE_KEY", "REDIS_URL"}
)
_SHOWN_VALUE_CHARS = 60


def log_level(value: str) -> str:
    """A logging level name, any case ('info' -> 'INFO'); for argparse `type=` too."""
    name = value.strip().upper()
    if name not in LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return name


def redact_url(url: str) -> str:
    """The URL with its password, if it has one, replaced by ***."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}{slash}{path}"


def _redis_url_problem(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError:
        return _REDIS_SHAPES
    if parts.scheme == "unix":
        if not parts.path:
            return "unix:// needs a socket path, e.g. unix:///run/redis.sock"
        if parse_qs(parts.query).get("db", ["0"]) != ["0"]:
            # Celery's Redis transport always uses database 0 on a socket.
            return "a unix:// broker uses database 0: leave out ?db="
        return None
    if parts.scheme not in ("redis", "rediss"):
        return _REDIS_SHAPES
    if not parts.hostname:
        return f"{parts.scheme}:// needs a host, e.g. {parts.scheme}://127.0.0.1:6379/0"
    database = parts.path.removeprefix("/")
    if database and not database.isdigit():
        return "the database after the host must be a number, e.g. /0"
    return None


def _redis_url(value: SecretStr) -> SecretStr:
    url = value.get_secret_value().strip()
    problem = _redis_url_problem(url)
    if problem is None:
        return SecretStr(url)
    # Without a scheme the value may be a password pasted in the wrong place: not shown.
    shown = repr(redact_url(url)) if "://" in url else "a value with no scheme://"
    raise ValueError(f"{problem} (got {shown})")


def _non_empty_path(value: Path | None) -> Path | None:
    return value.expanduser() if value is not None else None


RedisUrl = Annotated[SecretStr, AfterValidator(_redis_url)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
OptionalPath = Annotated[Path | None, AfterValidator(_non_empty_path)]
OptionalText = Annotated[str, Field(min_length=1)] | None


def _env_names(value: object) -> object:
    if isinstance(value, str):
        return tuple(name.strip() for name in value.split(",") if name.strip())
    return value


# "HF_TOKEN, HF_HOME" -> ("HF_TOKEN", "HF_HOME"); each must look like a variable name.
EnvNameList = Annotated[tuple[EnvName, ...], NoDecode, BeforeValidator(_env_names)]


class Settings(BaseSettings):
    """Secrets and deployment knobs, read only from the environment. Every variable carry
    reads is a field here (the dashboard token excepted: web.dashboard_token_env names it);
    .env.example documents each one (tests/integration/test_settings_env.py keeps them in step)."""

    model_config = SettingsConfigDict(
        env_file=None, env_ignore_empty=True, extra="ignore", populate_by_name=True, frozen=True
    )

    webhook_secret: SecretStr | None = Field(default=None, validation_alias="CARRY_WEBHOOK_SECRET")
    # A Redis URL may carry a password (redis://:pw@host), so it is treated as a secret too.
    redis_url: RedisUrl = Field(default=SecretStr(DEFAULT_REDIS_URL), validation_alias="REDIS_URL")
    # A worker, beat or runner refuses a Redis whose default user needs no password (code
    # under test could reach it); 1 accepts that risk (bot/queue/broker_auth.py).
    allow_open_redis: bool = Field(default=False, validation_alias="CARRY_ALLOW_OPEN_REDIS")
    github_token: SecretStr | None = Field(default=None, validation_alias="GITHUB_TOKEN")
    github_app_id: PositiveInt | None = Field(default=None, validation_alias="GITHUB_APP_ID")
    github_app_private_key: SecretStr | None = Field(
        default=None, validation_alias="GITHUB_APP_PRIVATE_KEY"
    )
    github_app_private_key_path: Path | None = Field(
        default=None, validation_alias="GITHUB_APP_PRIVATE_KEY_PATH"
    )
    github_installation_id: PositiveInt | None = Field(
        default=None, validation_alias="GITHUB_INSTALLATION_ID"
    )
    github_base_url: str = Field(
        default="https://api.github.com", validation_alias="GITHUB_BASE_URL"
    )
    bot_login: Annotated[str, Field(min_length=1)] = Field(
        default="carry[bot]", validation_alias="CARRY_BOT_LOGIN"
    )
    # GitHub asks for at least a second between mutative requests (REST best practices);
    # 0 sends writes back to back (tests, the demo's emulator).
    github_write_pause_s: Annotated[float, Field(ge=0, le=60, allow_inf_nan=False)] = Field(
        default=1.0, validation_alias="CARRY_GITHUB_WRITE_PAUSE_S"
    )
    # GitHub's secondary limits on content-creating requests per installation or token
    # (documented: 80 a minute, 500 an hour); a GitHub Enterprise Server may set its own.
    github_writes_per_minute: PositiveInt = Field(
        default=80, validation_alias="CARRY_GITHUB_WRITES_PER_MINUTE"
    )
    github_writes_per_hour: PositiveInt = Field(
        default=500, validation_alias="CARRY_GITHUB_WRITES_PER_HOUR"
    )
    # GitHub calls one task may make (a publish makes 2-6); beyond it the task fails visibly.
    github_request_budget: PositiveInt = Field(
        default=100, validation_alias="CARRY_GITHUB_REQUEST_BUDGET"
    )
    config_path: Path = Field(default=DEFAULT_CONFIG_PATH, validation_alias="CARRY_CONFIG")
    cache_dir: Path = Field(
        default_factory=lambda: Path("~/.cache/carry").expanduser(),
        validation_alias="CARRY_CACHE_DIR",
    )
    downstream_dir: OptionalPath = Field(default=None, validation_alias="CARRY_DOWNSTREAM_DIR")
    downstream_git_url: OptionalText = Field(
        default=None, validation_alias="CARRY_DOWNSTREAM_GIT_URL"
    )
    max_body_bytes: Annotated[int, Field(gt=0, le=GITHUB_MAX_PAYLOAD_BYTES)] | None = Field(
        default=None, validation_alias="CARRY_MAX_BODY_BYTES"
    )
    # Connections the web process serves at once; beyond it a request gets 503 at once. Each
    # held connection costs memory (about 12 KiB, more with the start of a body buffered), so
    # without a cap an attacker's count of slow connections sets the web process's memory.
    web_max_connections: PositiveInt = Field(
        default=1000, validation_alias="CARRY_WEB_MAX_CONNECTIONS"
    )
    # Longer than the longest job (hardware checks are bounded by their own timeouts), so
    # Redis does not hand a running job to a second worker.
    visibility_timeout_s: PositiveInt = Field(
        default=6 * 3600, validation_alias="CARRY_VISIBILITY_TIMEOUT_S"
    )
    lock_ttl_s: PositiveInt = Field(default=600, validation_alias="CARRY_LOCK_TTL_S")
    # A git fetch, ls-remote or push that gets no answer for this long is stopped: a hung
    # upstream or downstream is a visible failure, not a worker waiting forever.
    git_timeout_s: PositiveInt = Field(default=600, validation_alias="CARRY_GIT_TIMEOUT_S")
    # One slow series must not hold the others behind it: a rebase past this is stopped and
    # shown as timed out (hard limit: a minute more).
    rebase_time_limit_s: PositiveInt = Field(
        default=900, validation_alias="CARRY_REBASE_TIME_LIMIT_S"
    )
    # The same for the other tasks of the service, by kind: a publish (git push, GitHub), a
    # poll of the upstream heads (one ls-remote per upstream), and every task of the quick
    # lane (GitHub calls only).
    publish_time_limit_s: PositiveInt = Field(
        default=900, validation_alias="CARRY_PUBLISH_TIME_LIMIT_S"
    )
    poll_time_limit_s: PositiveInt = Field(default=1800, validation_alias="CARRY_POLL_TIME_LIMIT_S")
    quick_time_limit_s: PositiveInt = Field(
        default=600, validation_alias="CARRY_QUICK_TIME_LIMIT_S"
    )
    # Checked before a rebase starts: a series over either is refused (shown as a problem of
    # the series), not checked for minutes while the others wait.
    max_patch_bytes: PositiveInt = Field(
        default=8 * 1024 * 1024, validation_alias="CARRY_MAX_PATCH_BYTES"
    )
    max_series_patches: PositiveInt = Field(
        default=1000, validation_alias="CARRY_MAX_SERIES_PATCHES"
    )
    # An upstream head's file a patch touches is read only up to this size (checked from
    # the object's header first): a pack of kilobytes can hold a file of gigabytes. A patch
    # touching a larger one is invalid, naming the file; git gets it as core.bigFileThreshold.
    max_blob_bytes: PositiveInt = Field(
        default=DEFAULT_MAX_BLOB_BYTES, validation_alias="CARRY_MAX_BLOB_BYTES"
    )
    # The address space of each task of a worker (RLIMIT_AS and RLIMIT_DATA of the pool's
    # processes, and so of the git they start): a task past it fails, on the series, as out of
    # memory instead of taking the machine's memory. Runners have their own limits.
    task_memory_mb: Annotated[int, Field(ge=256)] = Field(
        default=4096, validation_alias="CARRY_TASK_MEMORY_MB"
    )
    # The CPU priority (nice value, at least) of `carry worker` and the git it runs. A rebase
    # is batch work; the web process answers GitHub's deliveries (10 s before GitHub gives up)
    # and the dashboard. Where both share CPUs, a busy worker must not take their turn
    # (bench/scale.py: the overview's p95 at 200 series). An idle CPU is still the worker's.
    worker_nice: Annotated[int, Field(ge=0, le=19)] = Field(
        default=10, validation_alias="CARRY_WORKER_NICE"
    )
    busy_retry_s: Seconds = Field(default=2.0, validation_alias="CARRY_BUSY_RETRY_S")
    # An acknowledged delivery no worker has finished this long after its message was queued
    # is queued again (its message can be lost in the broker: bot/core/requeue.py).
    requeue_after_s: Seconds = Field(default=300.0, validation_alias="CARRY_REQUEUE_AFTER_S")
    ci_debounce_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        default=30.0, validation_alias="CARRY_CI_DEBOUNCE_S"
    )
    ci_lease_s: PositiveInt = Field(default=60, validation_alias="CARRY_CI_LEASE_S")
    runner_kind: OptionalText = Field(default=None, validation_alias="CARRY_RUNNER_KIND")
    runner_name: OptionalText = Field(default=None, validation_alias="CARRY_RUNNER_NAME")
    runner_workdir: OptionalPath = Field(default=None, validation_alias="CARRY_RUNNER_WORKDIR")
    heartbeat_s: Seconds = Field(default=15.0, validation_alias="CARRY_HEARTBEAT_S")
    runner_pass_env: EnvNameList = Field(default=(), validation_alias="CARRY_RUNNER_PASS_ENV")
    # Jobs are signed by the service and verified by the runner (bot/ci/job_keys.py): the
    # service's Ed25519 private key (default <CARRY_CACHE_DIR>/job-signing/private.pem, made on
    # first use), a runner's public key (the line `carry job-key` prints) or a file holding it,
    # and how long a signed job stays valid (longer than a job waits, runs and is redelivered).
    job_signing_key_path: OptionalPath = Field(
        default=None, validation_alias="CARRY_JOB_SIGNING_KEY_PATH"
    )
    job_public_key: OptionalText = Field(default=None, validation_alias="CARRY_JOB_PUBLIC_KEY")
    job_public_key_path: OptionalPath = Field(
        default=None, validation_alias="CARRY_JOB_PUBLIC_KEY_PATH"
    )
    job_ttl_s: PositiveInt = Field(default=3 * 24 * 3600, validation_alias="CARRY_JOB_TTL_S")
    # The password `carry runner-user` gives a runner kind's Redis user.
    runner_password: SecretStr | None = Field(
        default=None, validation_alias="CARRY_RUNNER_PASSWORD"
    )

    @field_validator("cache_dir", "github_app_private_key_path", "config_path")
    @classmethod
    def _expand_home(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @model_validator(mode="after")
    def _github_auth_is_consistent(self) -> Settings:
        key_given = [
            name
            for name, value in (
                ("GITHUB_APP_PRIVATE_KEY", self.github_app_private_key),
                ("GITHUB_APP_PRIVATE_KEY_PATH", self.github_app_private_key_path),
            )
            if value is not None
        ]
        if len(key_given) > 1:
            raise ValueError(
                "set only one of GITHUB_APP_PRIVATE_KEY and GITHUB_APP_PRIVATE_KEY_PATH"
            )
        if self.github_app_id is not None and not key_given:
            raise ValueError(
                "GITHUB_APP_ID is set but neither GITHUB_APP_PRIVATE_KEY nor "
                "GITHUB_APP_PRIVATE_KEY_PATH is"
            )
        if key_given and self.github_app_id is None:
            raise ValueError(f"{key_given[0]} is set but GITHUB_APP_ID is not")
        return self

    @model_validator(mode="after")
    def _signed_jobs_outlive_a_redelivery(self) -> Settings:
        # Redis hands an unacknowledged job out again after the visibility timeout, and the
        # runner verifies it again then: a shorter TTL refuses every redelivered job as expired.
        if self.job_ttl_s <= self.visibility_timeout_s:
            raise ValueError(
                f"CARRY_JOB_TTL_S ({self.job_ttl_s}) must be longer than "
                f"CARRY_VISIBILITY_TIMEOUT_S ({self.visibility_timeout_s}): a job handed out "
                "again after the visibility timeout would be refused as expired"
            )
        return self

    @property
    def github_auth(self) -> Literal["app", "token", "none"]:
        if self.github_app_id is not None:
            return "app"
        return "token" if self.github_token is not None else "none"

    def app_private_key(self) -> SecretStr | None:
        """The App's PEM key: GITHUB_APP_PRIVATE_KEY, or the file at GITHUB_APP_PRIVATE_KEY_PATH."""
        if self.github_app_private_key is not None:
            return self.github_app_private_key
        if self.github_app_private_key_path is None:
            return None
        try:
            return SecretStr(self.github_app_private_key_path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(
                [f"environment: GITHUB_APP_PRIVATE_KEY_PATH: cannot read key file: {exc.strerror}"]
            ) from exc

    @property
    def tracks_github(self) -> bool:
        """With GitHub credentials and no local checkout given, the series come from GitHub."""
        return self.github_auth != "none" and self.downstream_dir is None

    def downstream_checkout(self) -> Path:
        """Where the downstream repository's series are read from, by workers and the
        dashboard alike: CARRY_DOWNSTREAM_DIR, else the copy exported from GitHub, else the
        working directory."""
        if self.downstream_dir is not None:
            return self.downstream_dir.resolve()
        if self.tracks_github:
            return self.cache_dir / "downstream-checkout"
        return Path().resolve()

    def effective_max_body_bytes(self, config: CarryConfig | None) -> int:
        """CARRY_MAX_BODY_BYTES wins over web.max_body_bytes in the YAML."""
        if self.max_body_bytes is not None:
            return self.max_body_bytes
        return config.web.max_body_bytes if config is not None else DEFAULT_MAX_BODY_BYTES

    @staticmethod
    def dashboard_token(config: CarryConfig) -> SecretStr | None:
        """The dashboard/API token, from the variable that web.dashboard_token_env names."""
        value = os.environ.get(config.web.dashboard_token_env)
        return SecretStr(value) if value else None

    @staticmethod
    def named_secret(variable: str) -> SecretStr | None:
        """A secret the config names by its variable (a webhook's secret_env); None if unset."""
        value = os.environ.get(variable)
        return SecretStr(value) if value else None


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment; ConfigError with one line per bad variable, naming it
    and (unless it may hold a secret) its value."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(
            [_setting_problem(error) for error in exc.errors(include_url=False)]
        ) from None


_SETTING_REASONS = {
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "int_type": "expected a whole number",
    "float_parsing": "expected a number",
    "float_type": "expected a number",
    "finite_number": "expected a finite number",
    "greater_than": "expected a number greater than {gt}",
    "greater_than_equal": "expected a number of at least {ge}",
    "less_than_equal": "expected a number of at most {le}",
    "string_too_short": "expected a non-empty value",
}


def _setting_problem(error: Any) -> str:
    variable = ".".join(str(part) for part in error["loc"]) or "settings"
    template = _SETTING_REASONS.get(error["type"])
    if template is not None:
        why = template.format(**{k: _plain_number(v) for k, v in error.get("ctx", {}).items()})
    else:
        why = error["msg"].removeprefix("Value error, ")
    shown = _shown_value(variable, error.get("input"))
    return f"environment: {variable}: {why}{shown}"


def _plain_number(value: Any) -> Any:
    """0.0 -> 0 in messages ('greater than 0', not 'greater than 0.0')."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _shown_value(variable: str, value: Any) -> str:
    """' (got VALUE)' for a plain setting; nothing for one that may hold a secret."""
    if variable in _SECRET_VARIABLES or not isinstance(value, str):
        return ""
    if SECRET_VALUE_RE.search(value) or len(value) > _SHOWN_VALUE_CHARS:
        return ""
    return f" (got {value!r})"
