"""Secret values never reach a log line, whatever part of the record carries them."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from bot import log as carry_log
from bot.config import Settings

WEBHOOK = "whsec-0123456789abcdef"
TOKEN = "ghp_" + "A1b2C3d4" * 5
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAx7Tq0oZc4QmYb1Q2iN1mX6nEw8oR3kP0yJ7Vb5sD2hF9gK4lM3\n"
    "c9PqRsTuVwXyZ0123456789abcdefABCDEFghijklmnopqrstuvwxyz+/AbCdEfGh\n"
    "-----END RSA PRIVATE KEY-----\n"
)
REDIS_PASSWORD = "r3dis-p@ss/word"
REDIS_URL = "redis://:r3dis-p%40ss%2Fword@127.0.0.1:6379/0"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)


def settings() -> Settings:
    return Settings(
        webhook_secret=SecretStr(WEBHOOK),
        github_token=SecretStr(TOKEN),
        github_app_id=1,
        github_app_private_key=SecretStr(PEM),
        redis_url=SecretStr(REDIS_URL),
    )


def test_every_secret_of_the_settings_is_known_in_the_forms_it_is_written_in() -> None:
    values = carry_log.secret_values(settings(), environ={})
    assert {WEBHOOK, TOKEN, PEM.strip()} <= values
    assert {REDIS_PASSWORD, "r3dis-p%40ss%2Fword"} <= values  # decoded and as in the URL
    assert base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode() in values
    assert PEM.splitlines()[1] in values  # a line of the key, should a fragment be logged


def test_variables_named_like_secrets_count_but_names_and_short_values_do_not() -> None:
    environ = {
        "HF_TOKEN": "hf_abcdefghijklmnop",
        "CARRY_DASHBOARD_TOKEN": "dash-token-1234",
        "GITHUB_APP_PRIVATE_KEY_PATH": "/etc/carry/key.pem",
        "CARRY_LOCK_TTL_S": "600",
        "SOME_SECRET": "abc",
    }
    values = carry_log.secret_values(None, environ=environ)
    assert values == {"hf_abcdefghijklmnop", "dash-token-1234"}


def test_message_arguments_exception_stack_and_fields_are_redacted(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    carry_log.setup("INFO", json_lines=True, secrets=carry_log.secret_values(settings(), {}))
    log = logging.getLogger("tests.redaction")  # not under "carry": other tests set its level
    with carry_log.correlated(delivery_id="d-1"):
        log.info("token is %s", TOKEN, extra={"fields": {"header": f"Bearer {TOKEN}"}})
        try:
            raise RuntimeError(f"cannot connect with {REDIS_URL}")
        except RuntimeError:
            log.exception("failed with key %r", PEM)
        log.warning("where", stack_info=True, extra={"fields": {"list": [WEBHOOK, 3]}})

    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    text = json.dumps(lines)
    for secret in (WEBHOOK, TOKEN, REDIS_PASSWORD, "r3dis-p%40ss%2Fword", PEM.splitlines()[1]):
        assert secret not in text
    assert lines[0]["msg"] == f"token is {carry_log.REDACTED}"
    assert lines[0]["header"] == f"Bearer {carry_log.REDACTED}"
    assert lines[0]["delivery_id"] == "d-1"
    assert "RuntimeError: cannot connect with redis://:[redacted]@127.0.0.1" in lines[1]["exc"]
    assert lines[2]["list"] == [carry_log.REDACTED, 3]
    assert "stack" in lines[2]


def test_plain_text_lines_and_warnings_are_redacted_too(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    carry_log.setup("INFO", json_lines=False, secrets=[TOKEN])
    logging.getLogger("tests.redaction").error("pushing with %s", TOKEN)
    import warnings

    warnings.warn(f"deprecated: {TOKEN}", UserWarning, stacklevel=1)
    err = capsys.readouterr().err
    assert TOKEN not in err
    assert err.count(carry_log.REDACTED) == 2


def test_a_record_with_bad_arguments_still_reaches_the_handler(restore_logging: None) -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%d items", ("many",), None)
    assert carry_log.SecretFilter([TOKEN]).filter(record)
    assert record.args == ("many",)  # left alone: the handler reports the formatting error


def test_the_worker_pools_own_logger_writes_json_lines_too(
    restore_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """billiard (Celery's pool) logs through a logger that does not propagate: its "Process
    ... exited with 'signal 15 (SIGTERM)'" came out as a bare text line among the JSON ones."""
    import json

    from billiard import util as billiard_util

    pool_logger = logging.getLogger(billiard_util.LOGGER_NAME)
    kept = pool_logger.handlers[:]
    try:
        carry_log.setup("INFO", json_lines=True, secrets=[TOKEN])
        billiard_util.get_logger()
        billiard_util.error("Process %r pid:%r exited with %r", "ForkPoolWorker-1", 7, TOKEN)
        lines = capsys.readouterr().err.strip().splitlines()
    finally:
        pool_logger.handlers[:] = kept
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert "ForkPoolWorker-1" in record["msg"] and TOKEN not in lines[0]


@pytest.mark.parametrize(
    ("line", "stored"),
    [
        ("redis://runner:s3cret-pw@10.0.0.5:6379/0", "redis://runner:[redacted]@10.0.0.5:6379/0"),
        ("REDIS_URL=redis://:pw123456@h/0", "REDIS_URL=redis://:[redacted]@h/0"),
        (
            "https://x-access-token:ghs_abc@github.com/o/r",
            "https://x-access-token:[redacted]@github.com/o/r",
        ),
        ("token ghp_" + "a1B2" * 9 + " used", "token ghp_[redacted] used"),
        ("ghs_" + "x" * 36, "ghs_[redacted]"),
        ("github_pat_11ABC_" + "d" * 40, "github_pat_[redacted]"),
        ("HF_TOKEN=hf_" + "k" * 34, "HF_TOKEN=hf_[redacted]"),
        ("authorization: token abcdef", "authorization: token [redacted]"),
        ("Authorization: Basic eC1hY2Nlc3M=", "Authorization: Basic [redacted]"),
        # What only looks like one stays as it is.
        ("git@github.com:o/r.git and https://github.com/o/r", None),
        ("mail ada@example.com, http://host:8080/path, ghp_short", None),
        ("the hf_ prefix, github_pat_ alone", None),
    ],
)
def test_secrets_carry_never_knew_are_redacted_by_their_form(line: str, stored: str | None) -> None:
    assert carry_log.SecretFilter([]).redact(line) == (stored or line)


def test_a_log_record_is_redacted_by_form_without_any_known_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("tests.redaction.forms")
    log.addFilter(carry_log.SecretFilter([]))
    with caplog.at_level(logging.INFO, logger="tests.redaction.forms"):
        log.info("cloning %s", "https://u:hunter2-pw@git.example/r.git")
    assert caplog.messages == ["cloning https://u:[redacted]@git.example/r.git"]


# What redact() (run storage, a runner's reasons) redacts: the secrets installed where the
# process started, else those of the raw environment (bot.log.install_secrets).
INSTALLED = "installed-only-secret-42"
PLAIN = "plain-secret-value-9"  # no form of _SECRET_FORMS: only a known value is redacted


@pytest.fixture
def no_installed_secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """A process whose entry point installed no secrets, and none left installed after."""
    carry_log.forget_secrets()
    yield monkeypatch
    monkeypatch.undo()
    carry_log.forget_secrets()


def test_with_nothing_installed_the_raw_secret_variables_are_redacted(
    no_installed_secrets: pytest.MonkeyPatch,
) -> None:
    # A bad setting too: the settings are not loaded, the variables are read as they are.
    no_installed_secrets.setenv("CARRY_VISIBILITY_TIMEOUT_S", "abc")
    no_installed_secrets.setenv("SOME_API_KEY", PLAIN)
    assert carry_log.redact(f"calling with {PLAIN}") == f"calling with {carry_log.REDACTED}"


def test_redact_and_setup_use_the_installed_secrets(
    no_installed_secrets: pytest.MonkeyPatch,
    restore_logging: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert carry_log.redact(INSTALLED) == INSTALLED  # in no variable: not known yet
    carry_log.install_secrets([INSTALLED])
    assert carry_log.redact(f"x {INSTALLED}") == f"x {carry_log.REDACTED}"
    carry_log.setup("INFO", json_lines=False)
    logging.getLogger("tests.redaction").error("pushing with %s", INSTALLED)
    assert INSTALLED not in capsys.readouterr().err
    carry_log.forget_secrets()
    assert carry_log.redact(INSTALLED) == INSTALLED


def test_an_entry_point_installs_the_secrets_of_its_settings(
    no_installed_secrets: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The App key read from GITHUB_APP_PRIVATE_KEY_PATH is in no variable: only the settings
    the entry point read know it, and redact() redacts it once they are installed."""
    from workers import service

    key = tmp_path / "app.pem"
    key.write_text(PEM)
    no_installed_secrets.setenv("GITHUB_APP_ID", "1")
    no_installed_secrets.setenv("GITHUB_APP_PRIVATE_KEY_PATH", str(key))
    no_installed_secrets.setenv("CARRY_CACHE_DIR", str(tmp_path / "cache"))
    line = PEM.splitlines()[1]
    assert carry_log.redact(line) == line
    carry_log.forget_secrets()
    service.settings()
    assert carry_log.redact(line) == carry_log.REDACTED
