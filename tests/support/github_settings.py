"""carry's settings against the GitHub emulator, with no credential but those a test gives."""

from __future__ import annotations

from typing import Any, Final

from bot.config import Settings

# Every GitHub credential unset, whatever the environment running the tests holds.
NO_GITHUB: Final[dict[str, Any]] = {
    "github_token": None,
    "github_app_id": None,
    "github_app_private_key": None,
    "github_app_private_key_path": None,
    "github_installation_id": None,
}


def emulator_settings(base_url: str, **given: Any) -> Settings:
    """Settings that reach the emulator at `base_url` with no write pause; `given` over them."""
    values = {"github_base_url": base_url, "github_write_pause_s": 0, **NO_GITHUB}
    return Settings(**(values | given))
