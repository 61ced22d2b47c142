"""Every environment variable goes through bot.config.Settings: empty means unset, a bad value
is one line naming the variable (and its value, unless it may hold a secret), a process that
starts with one exits 2 without a traceback, and .env.example documents exactly the fields."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bot.config import LOG_LEVELS, ConfigError, Settings, load_settings, log_level, redact_url
from bot.queue.celery_app import broker_settings
from runner import cli as runner_cli
from runner import runtime as runner_runtime_module
from tests.support.paths import REPO_ROOT

ENV_EXAMPLE = REPO_ROOT / ".env.example"
# In .env.example but not Settings fields: read by docker compose only, or named by carry.yaml.
NOT_SETTINGS = {
    "REDIS_PASSWORD": "docker compose only",
    "RUNNER_GAUDI_PASSWORD": "docker compose only",
    "RUNNER_GB10_PASSWORD": "docker compose only",
    "CARRY_WEB_PORT": "docker compose only",
    "CARRY_DASHBOARD_TOKEN": "named by web.dashboard_token_env",
}
OURS = re.compile(r"^(CARRY_|GITHUB_|REDIS_)")


def setting_variables() -> set[str]:
    return {str(field.validation_alias) for field in Settings.model_fields.values()}


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An environment without any carry setting of the machine running the tests."""
    for name in list(os.environ):
        if OURS.match(name):
            monkeypatch.delenv(name)
    return monkeypatch


def problem(env: pytest.MonkeyPatch, **variables: str) -> str:
    for name, value in variables.items():
        env.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert "\n" not in message, message
    return message


# --------------------------------------------------------------------------- the template


def test_env_example_documents_exactly_the_settings() -> None:
    documented = set(re.findall(r"^([A-Z_][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.M))
    assert setting_variables() - documented == set(), "Settings fields missing in .env.example"
    assert documented - setting_variables() - set(NOT_SETTINGS) == set(), (
        "variables in .env.example that no Settings field reads"
    )
    assert set(NOT_SETTINGS) <= documented


def test_there_is_one_environment_template() -> None:
    assert not (REPO_ROOT / "config" / "example.env").exists()
    names = {path.name for path in REPO_ROOT.glob("**/*.env*") if ".venv" not in path.parts}
    assert names <= {".env.example", ".env"}, names


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize(
    "name",
    [
        "CARRY_VISIBILITY_TIMEOUT_S",
        "CARRY_LOCK_TTL_S",
        "CARRY_BUSY_RETRY_S",
        "CARRY_CI_DEBOUNCE_S",
        "CARRY_CI_LEASE_S",
        "CARRY_HEARTBEAT_S",
        "CARRY_RUNNER_NAME",
        "CARRY_RUNNER_WORKDIR",
        "CARRY_DOWNSTREAM_DIR",
        "REDIS_URL",
    ],
)
def test_an_empty_value_counts_as_unset(env: pytest.MonkeyPatch, name: str) -> None:
    default = load_settings()
    env.setenv(name, "")
    assert load_settings() == default


def test_values_are_read_with_their_types(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env.setenv("CARRY_VISIBILITY_TIMEOUT_S", " 7200 ")
    env.setenv("CARRY_BUSY_RETRY_S", "0.5")
    env.setenv("CARRY_CI_DEBOUNCE_S", "0")
    env.setenv("CARRY_CI_LEASE_S", "9")
    env.setenv("CARRY_RUNNER_NAME", "gaudi@rack4")
    env.setenv("CARRY_RUNNER_WORKDIR", str(tmp_path))
    settings = load_settings()
    assert (settings.visibility_timeout_s, settings.busy_retry_s) == (7200, 0.5)
    # Read when a runner process starts (its runtime), nothing fixed at import.
    runner_runtime_module.reset()
    runner = runner_runtime_module.runner_runtime()
    assert (runner.lease_s, runner.workdir, runner.name(None)) == (9, tmp_path, "gaudi@rack4")
    runner_runtime_module.reset()
    assert broker_settings(settings)["broker_transport_options"]["visibility_timeout"] == 7200


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("CARRY_VISIBILITY_TIMEOUT_S", "abc", "expected a whole number"),
        ("CARRY_LOCK_TTL_S", "1.5", "expected a whole number"),
        ("CARRY_BUSY_RETRY_S", "soon", "expected a number"),
        ("CARRY_HEARTBEAT_S", "nan", "expected a finite number"),
    ],
)
def test_a_bad_number_names_the_variable_and_the_value(
    env: pytest.MonkeyPatch, name: str, value: str, why: str
) -> None:
    assert problem(env, **{name: value}) == f"environment: {name}: {why} (got {value!r})"


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("CARRY_VISIBILITY_TIMEOUT_S", "-1", "expected a number greater than 0"),
        ("CARRY_CI_LEASE_S", "0", "expected a number greater than 0"),
        ("CARRY_BUSY_RETRY_S", "-0.5", "expected a number greater than 0"),
        ("CARRY_CI_DEBOUNCE_S", "-3", "expected a number of at least 0"),
    ],
)
def test_a_negative_number_is_refused(
    env: pytest.MonkeyPatch, name: str, value: str, why: str
) -> None:
    assert problem(env, **{name: value}) == f"environment: {name}: {why} (got {value!r})"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("garbage", "expected redis://HOST[:PORT][/DB], rediss://HOST[:PORT][/DB] or unix:///PATH"),
        ("http://127.0.0.1:6379/0", "expected redis://HOST"),
        ("redis://", "redis:// needs a host"),
        ("redis://127.0.0.1:port/0", "expected redis://HOST"),
        ("redis://127.0.0.1:6379/zero", "the database after the host must be a number"),
        ("unix://", "unix:// needs a socket path"),
        ("unix:///run/redis.sock?db=2", "a unix:// broker uses database 0"),
    ],
)
def test_a_garbage_redis_url_is_one_line(env: pytest.MonkeyPatch, url: str, why: str) -> None:
    message = problem(env, REDIS_URL=url)
    assert message.startswith(f"environment: REDIS_URL: {why}"), message


def test_a_bad_redis_url_never_shows_its_password(env: pytest.MonkeyPatch) -> None:
    message = problem(env, REDIS_URL="redis://:hunter2secret@host:63x9/0")
    assert "hunter2secret" not in message and "redis://:***@host:63x9/0" in message
    # A value with no scheme may be a password pasted into the wrong variable.
    assert "hunter2secret" not in problem(env, REDIS_URL="hunter2secret")


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/0",
        "redis://:pw@redis:6379/3",
        "rediss://h:6380",
        "unix:///r.sock",
        "unix:///r.sock?db=0",
    ],
)
def test_good_redis_urls_are_accepted(env: pytest.MonkeyPatch, url: str) -> None:
    env.setenv("REDIS_URL", url)
    assert load_settings().redis_url.get_secret_value() == url


def test_redact_url_hides_only_the_password() -> None:
    assert redact_url("redis://user:pw@host:1/2") == "redis://user:***@host:1/2"
    assert redact_url("redis://host:1/2") == "redis://host:1/2"


def test_a_bad_log_level_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert log_level("info") == "INFO" and "INFO" in LOG_LEVELS
    with pytest.raises(ValueError, match="expected one of DEBUG, INFO, WARNING"):
        log_level("verbose")
    with pytest.raises(SystemExit) as stopped:
        runner_cli.parse_args(["--kind", "gaudi", "--loglevel", "verbose"])
    assert stopped.value.code == 2
    assert "argument --loglevel: expected one of DEBUG" in capsys.readouterr().err


# --------------------------------------------------------------------------- real processes


def clean_environment(tmp_path: Path, **variables: str) -> dict[str, str]:
    kept = {name: value for name, value in os.environ.items() if not OURS.match(name)}
    return {
        **kept,
        "PYTHONPATH": str(REPO_ROOT),
        "CARRY_CACHE_DIR": str(tmp_path / "cache"),
        **variables,
    }


def start(argv: list[str], tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *argv],
        env=clean_environment(tmp_path, **variables),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["bot.cli", "worker"],
        ["bot.cli", "beat"],
        ["bot.cli", "web", "--port", "0"],
        ["celery", "-A", "bot.queue.celery_app", "worker", "--pool", "solo"],
        ["runner.cli", "--kind", "gaudi"],
    ],
    ids=["worker", "beat", "web", "celery-worker", "runner"],
)
def test_a_process_started_with_a_bad_setting_exits_2_with_one_line(
    tmp_path: Path, argv: list[str]
) -> None:
    result = start(argv, tmp_path, CARRY_VISIBILITY_TIMEOUT_S="abc")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "carry: error: environment: CARRY_VISIBILITY_TIMEOUT_S: expected a whole number (got 'abc')"
    ]


def test_importing_the_workers_reads_no_setting(tmp_path: Path) -> None:
    code = "import workers.tasks, workers.ci.requests, runner.task, runner.cli, workers.service"
    imported = subprocess.run(
        [sys.executable, "-c", code],
        env=clean_environment(tmp_path, CARRY_LOCK_TTL_S="x", REDIS_URL="garbage"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert imported.returncode == 0, imported.stderr


def test_the_app_takes_its_broker_from_the_settings_handed_to_it(tmp_path: Path) -> None:
    """carry's entry points read the settings once and hand them to the app (start_with): the
    environment is not read again when Celery first needs its configuration (here it holds a
    bad value, which a second read would refuse)."""
    code = (
        "from pydantic import SecretStr\n"
        "from bot.config import Settings\n"
        "from bot.queue import celery_app\n"
        "url = SecretStr('redis://127.0.0.1:1/5')\n"
        "celery_app.start_with(Settings(redis_url=url, visibility_timeout_s=4321))\n"
        "conf = celery_app.app.conf\n"
        "print(conf.broker_url, conf.broker_transport_options['visibility_timeout'])\n"
    )
    started = subprocess.run(
        [sys.executable, "-c", code],
        env=clean_environment(tmp_path, CARRY_VISIBILITY_TIMEOUT_S="abc"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 0, started.stderr
    assert started.stdout.split() == ["redis://127.0.0.1:1/5", "4321"]


def test_carry_run_names_the_redis_database_it_uses() -> None:
    from workers.service import redis_database

    assert redis_database("redis://127.0.0.1:6379/0") == "database 0 of redis://127.0.0.1:6379"
    assert redis_database("redis://:pw@redis:6379/3") == "database 3 of redis://:***@redis:6379"
    assert redis_database("redis://h") == "database 0 of redis://h"


def test_a_job_ttl_shorter_than_the_visibility_timeout_is_refused(env: pytest.MonkeyPatch) -> None:
    """A redelivered job is verified again: it must not have expired by then (issue 33)."""
    said = problem(env, CARRY_JOB_TTL_S="3600", CARRY_VISIBILITY_TIMEOUT_S="7200")
    assert "CARRY_JOB_TTL_S (3600) must be longer than CARRY_VISIBILITY_TIMEOUT_S (7200)" in said
    env.setenv("CARRY_JOB_TTL_S", "7201")
    assert load_settings().job_ttl_s == 7201
