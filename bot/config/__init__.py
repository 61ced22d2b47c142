"""Configuration: config/carry.yaml (validated at start-up) and secrets from the environment.

The YAML file describes *what* carry does (series, upstreams, runners, policies): its schema is
`bot.config.schema`, and `bot.config.loader` reads and checks it. Secrets never live in it:
they come from environment variables through `bot.config.settings.Settings`.
"""

from bot.config.loader import ConfigError, format_loc, load_config, parse_config
from bot.config.schema import (
    DEFAULT_CONFIG_PATH,
    DEFAULT_MAX_BODY_BYTES,
    GITHUB_MAX_PAYLOAD_BYTES,
    BaseSpec,
    Budget,
    CarryConfig,
    Command,
    Downstream,
    Policy,
    Polling,
    Runner,
    Series,
    SetupStep,
    Upstream,
    Web,
    Webhook,
    parse_pr_ref,
)
from bot.config.settings import (
    DEFAULT_REDIS_URL,
    LOG_LEVELS,
    Settings,
    load_settings,
    log_level,
    redact_url,
)

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_REDIS_URL",
    "GITHUB_MAX_PAYLOAD_BYTES",
    "LOG_LEVELS",
    "BaseSpec",
    "Budget",
    "CarryConfig",
    "Command",
    "ConfigError",
    "Downstream",
    "Policy",
    "Polling",
    "Runner",
    "Series",
    "Settings",
    "SetupStep",
    "Upstream",
    "Web",
    "Webhook",
    "format_loc",
    "load_config",
    "load_settings",
    "log_level",
    "parse_config",
    "parse_pr_ref",
    "redact_url",
]
