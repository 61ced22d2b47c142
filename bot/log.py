"""Logging with correlation ids (delivery, event, task, run) carried in context variables,
and with every known secret value redacted from every record before it is written."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from urllib.parse import quote, unquote, urlsplit

# `carry check` logs without loading the settings, and in plain lines: what only the service
# needs (the settings, JSON lines, base64) is imported where it is used. typing.TYPE_CHECKING
# without importing typing (mypy and ruff treat the name the same way).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pydantic import SecretStr

    from bot.config import Settings

_CORRELATION: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "carry_correlation", default=None
)


def correlation() -> dict[str, str]:
    return dict(_CORRELATION.get() or {})


@contextlib.contextmanager
def correlated(**ids: str | None) -> Iterator[None]:
    """Adds ids (delivery_id, event_key, task_id, run_id, ...) to every log line inside the block."""
    merged = {**(_CORRELATION.get() or {}), **{k: str(v) for k, v in ids.items() if v is not None}}
    token = _CORRELATION.set(merged)
    try:
        yield
    finally:
        _CORRELATION.reset(token)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        import json

        line: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **correlation(),
        }
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            line.update(extra)
        if record.exc_text:  # set (and redacted) by SecretFilter
            line["exc"] = record.exc_text
        elif record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = record.stack_info
        return json.dumps(line, default=str)


# --------------------------------------------------------------------------- secrets

REDACTED = "[redacted]"
# Shorter values would blank out ordinary words; a secret that short is no secret anyway.
MIN_SECRET_LEN = 6
# Values of variables named like these are redacted too (HF_TOKEN on a runner host, a
# dashboard token under another name, ...). *_PATH, *_ENV and *_ID name things, not secrets.
_SECRET_NAME = re.compile(r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|PRIVATE_KEY|API_KEY|ACCESS_KEY)$")
_SETTINGS_ENV = (
    "CARRY_WEBHOOK_SECRET",
    "GITHUB_TOKEN",
    "GITHUB_APP_PRIVATE_KEY",
    "CARRY_DASHBOARD_TOKEN",
)
# Secrets carry does not know the value of (a step's output, a host's other services), found
# by their form and redacted all the same: the password of a URL (scheme://user:PASSWORD@),
# GitHub's tokens (classic, OAuth, App installation and user, refresh; fine-grained), Hugging
# Face's, and the credential of an Authorization header.
_SECRET_FORMS = (
    (
        re.compile(r"\b([a-z][a-z0-9+.-]*://[^\s/:@]*):[^\s/@]+@", re.IGNORECASE),
        rf"\1:{REDACTED}@",
    ),
    (re.compile(r"\b(gh[pousr]_)[A-Za-z0-9]{20,}\b"), rf"\1{REDACTED}"),
    (re.compile(r"\b(github_pat_)[A-Za-z0-9_]{20,}"), rf"\1{REDACTED}"),
    (re.compile(r"\b(hf_)[A-Za-z0-9]{20,}\b"), rf"\1{REDACTED}"),
    (
        re.compile(r"\b(authorization:\s*(?:bearer|token|basic)\s+)\S+", re.IGNORECASE),
        rf"\1{REDACTED}",
    ),
)


def secret_values(
    settings: Settings | None = None, environ: Mapping[str, str] | None = None
) -> set[str]:
    """Every secret value this process knows, in the forms it may be written in: the secrets
    of `settings` (webhook secret, GitHub token, App private key, Redis password), the
    dashboard token, and any variable whose name says it holds a secret."""
    env = os.environ if environ is None else environ
    raw: list[str] = [value for name, value in env.items() if _SECRET_NAME.search(name)]
    raw += [env.get(name, "") for name in _SETTINGS_ENV]
    if settings is not None:
        raw += _settings_secrets(settings)
    raw.append(_url_password(env.get("REDIS_URL", "")))
    found: set[str] = set()
    for value in raw:
        found |= _forms(value)
    return {value for value in found if len(value) >= MIN_SECRET_LEN}


def _settings_secrets(settings: Settings) -> list[str]:
    import base64

    from bot.config import ConfigError

    secrets: list[SecretStr | None] = [
        settings.webhook_secret,
        settings.github_token,
        settings.github_app_private_key,
    ]
    with contextlib.suppress(ConfigError):
        secrets.append(settings.app_private_key())
    values = [secret.get_secret_value() for secret in secrets if secret is not None]
    values.append(_url_password(settings.redis_url.get_secret_value()))
    if settings.github_token is not None:
        # How git receives the token (bot.git.downstream.auth_env): a Basic auth header.
        token = settings.github_token.get_secret_value()
        values.append(base64.b64encode(f"x-access-token:{token}".encode()).decode())
    return values


def _url_password(url: str) -> str:
    try:
        return urlsplit(url).password or ""
    except ValueError:
        return ""


def _forms(value: str) -> set[str]:
    """The value, its URL-encoded and -decoded forms, and for a multi-line value (a PEM key)
    each long line, so that a fragment of it is caught too."""
    value = value.strip()
    if not value:
        return set()
    forms = {value, quote(value, safe=""), unquote(value)}
    if "\n" in value:
        forms.add(value.replace("\n", "\\n"))
        forms |= {line.strip() for line in value.splitlines() if len(line.strip()) >= 16}
    return forms


class SecretFilter(logging.Filter):
    """Rewrites each record so that no secret reaches a handler (a known value, or one of the
    _SECRET_FORMS): the message with its arguments, the exception text, the stack and the
    structured fields."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        # Longest first, so that a secret containing another is replaced whole.
        self._secrets = sorted(set(secrets), key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        for form, replacement in _SECRET_FORMS:
            text = form.sub(replacement, text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # bad %-arguments: left for the handler to report
            return True
        record.msg, record.args = self.redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            record.fields = self._redact_value(fields)
        return True

    def _redact_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {key: self._redact_value(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self._redact_value(item) for item in value]
        return value


def redact(text: str) -> str:
    """`text` as it may be stored or shown: with the secrets this process knows and the
    _SECRET_FORMS redacted, as in carry's logs. The secrets are those its entry point installed
    (install_secrets); where none did (a library used from a test or a script), those of the
    raw environment, so that a secret variable is never left in."""
    return _process_filter().redact(text)


# The filter of the secrets installed where this process started (install_secrets): this module
# reads no settings itself, they are read once by the entry point and handed in.
_INSTALLED: list[SecretFilter] = []


def install_secrets(secrets: Iterable[str]) -> None:
    """The secrets of this process, read where it starts (secret_values(settings), by the
    entry points that load the settings): what redact() and setup() redact from now on. A
    second call replaces the first (a process that read its settings again)."""
    _INSTALLED[:] = [SecretFilter(secrets)]


def forget_secrets() -> None:
    """Back to no installed secrets, and the environment read again when next needed: for a
    process whose environment changes (the resident engine between requests)."""
    _INSTALLED.clear()
    _environment_filter.cache_clear()


def _process_filter() -> SecretFilter:
    return _INSTALLED[-1] if _INSTALLED else _environment_filter()


@functools.cache
def _environment_filter() -> SecretFilter:
    """Nothing installed: the secret variables of the raw environment (os.environ, read once,
    the settings not loaded: this module reads no settings). It lacks only what the settings
    add to them: an App key read from GITHUB_APP_PRIVATE_KEY_PATH and the token's Basic auth
    form; an entry point installs those."""
    return SecretFilter(secret_values())


# --------------------------------------------------------------------------- set-up


# Loggers that never reach the root's handler: without one of their own, Python's last-resort
# handler prints their records as bare text among the JSON lines. billiard (Celery's pool)
# logs a pool process's exit this way.
_NON_PROPAGATING = ("multiprocessing",)


def setup(
    level: str | int = "INFO", json_lines: bool = True, secrets: Iterable[str] | None = None
) -> None:
    """One stderr handler on the root logger: JSON lines (or plain text) with the correlation
    ids, and `secrets` redacted: by default those redact() redacts (the installed secrets, or
    the raw environment's)."""
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_process_filter() if secrets is None else SecretFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)
    for name in _NON_PROPAGATING:
        logging.getLogger(name).handlers[:] = [handler]
    logging.captureWarnings(True)  # warnings become log lines (logger py.warnings) too
