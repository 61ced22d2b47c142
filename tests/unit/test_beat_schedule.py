"""What carry's beat sends, and how often: the failed-delivery redelivery (issue 34, item 3)
runs only where carry knows a hook to read (web.hook_id, or a GitHub App's own hook)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from bot.config import Settings, load_config
from tests.support.github_settings import NO_GITHUB
from tests.support.paths import REPO_ROOT
from workers.service import beat_schedule

EXAMPLE = REPO_ROOT / "config" / "carry.example.yaml"


def schedule(
    tmp_path: Path,
    settings: Settings,
    ci: dict[str, Any] | None = None,
    notify: dict[str, Any] | None = None,
    **web: Any,
) -> dict[str, dict[str, object]]:
    data = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    data["web"] = {**data.get("web", {}), **web}
    if ci is not None:
        data["series"][0]["ci"] = ci
    if notify is not None:
        data["notify"] = {**data.get("notify", {}), **notify}
    data["polling"]["redeliver_every_s"] = 120
    path = tmp_path / "carry.yaml"
    path.write_text(yaml.safe_dump(data))
    (tmp_path / "patches").mkdir(exist_ok=True)
    config = load_config(path, patches_root=tmp_path / "patches", check_dirs=False)
    return beat_schedule(config, settings)


def test_a_repository_hook_is_read_every_redeliver_every_s(tmp_path: Path) -> None:
    token = Settings(**(NO_GITHUB | {"github_token": "t"}))
    entry = schedule(tmp_path, token, hook_id=42)["redeliver-failed-deliveries"]
    assert entry == {"task": "carry.redeliver", "schedule": 120.0}


def test_a_github_app_reads_its_own_hook_without_a_hook_id(tmp_path: Path) -> None:
    app = Settings.model_construct(**(NO_GITHUB | {"github_app_id": 7}))
    assert "redeliver-failed-deliveries" in schedule(tmp_path, app)


def test_without_a_hook_there_is_nothing_to_read(tmp_path: Path) -> None:
    token = Settings(**(NO_GITHUB | {"github_token": "t"}))
    found = schedule(tmp_path, token)
    assert "redeliver-failed-deliveries" not in found
    assert {e["task"] for e in found.values()} >= {"carry.poll", "carry.poll_prs"}


def test_paced_runs_are_released_only_where_a_series_paces(tmp_path: Path) -> None:
    token = Settings(**(NO_GITHUB | {"github_token": "t"}))
    assert "release-paced-runs" not in schedule(tmp_path, token)
    entry = schedule(tmp_path, token, ci={"min_interval_s": 600})["release-paced-runs"]
    assert entry == {"task": "carry.ci.release_paced", "schedule": 30.0}
    assert "release-paced-runs" in schedule(tmp_path, token, ci={"daily_budget": 4})


def test_series_stuck_for_hours_are_asked_about_unless_the_limit_is_off(tmp_path: Path) -> None:
    token = Settings(**(NO_GITHUB | {"github_token": "t"}))
    entry = schedule(tmp_path, token)["tell-stuck-series"]  # notify.stuck_hours: 72 by default
    assert entry == {"task": "carry.stuck", "schedule": 600.0}
    assert "tell-stuck-series" not in schedule(tmp_path, token, notify={"stuck_hours": None})


def test_the_dashboard_issue_is_refreshed_by_default_unless_configured_false(
    tmp_path: Path,
) -> None:
    """Unset, each refresh asks whether the worker keeps the issue (its credentials decide);
    false, or no credentials, sends nothing."""
    token = Settings(**(NO_GITHUB | {"github_token": "t"}))
    assert "refresh-dashboard-issue" in schedule(tmp_path, token)
    assert "refresh-dashboard-issue" not in schedule(tmp_path, Settings(**NO_GITHUB))
    data = yaml.safe_load(EXAMPLE.read_text())
    data["downstream"]["dashboard_issue"] = False
    off = tmp_path / "off.yaml"
    off.write_text(yaml.safe_dump(data))
    (tmp_path / "patches").mkdir(exist_ok=True)
    config = load_config(off, patches_root=tmp_path / "patches", check_dirs=False)
    assert "refresh-dashboard-issue" not in beat_schedule(config, token)


def test_lost_deliveries_are_swept_every_minute_whatever_the_config(tmp_path: Path) -> None:
    token = Settings(**(NO_GITHUB | {"github_token": "t"}))
    entry = schedule(tmp_path, token)["requeue-lost-deliveries"]
    assert entry == {"task": "carry.requeue_lost", "schedule": 60.0}
