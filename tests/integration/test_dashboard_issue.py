"""carry's dashboard issue against the strict GitHub emulator, in this process: opened once,
written only when its text changed, found again when carry's record is lost, opened anew when
the issue it remembers is not there (the tick flow end to end is in tests/e2e/test_github_flow)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.core import dashboard_issue as board
from bot.store import dashboard_issue as record
from bot.store import series as store
from harness.carry_env import SERIES
from tests.support.deployment import DOWN_NAME, DOWN_OWNER, MOVED, Deploy, Deployment, deployments
from workers import dashboard_issue
from workers.dashboard_issue import Refresh

ON = {"dashboard_issue": True}


@pytest.fixture
def deploy(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deploy]:
    with deployments(tmp_path, redis_url, monkeypatch) as start:
        yield start


def refresh(d: Deployment, *, force: bool = False) -> Refresh:
    return dashboard_issue.refresh(d.rt, d.rt.forge(), force=force)


def edits(d: Deployment, number: int) -> int:
    return len(d.gh.api_requests("PATCH", f"/repos/{DOWN_OWNER}/{DOWN_NAME}/issues/{number}"))


@pytest.mark.parametrize("auth", ["token", "app"])
def test_opened_once_then_written_only_when_its_text_changes(deploy: Deploy, auth: str) -> None:
    d = deploy(auth=auth, downstream=ON)
    d.open_pr()
    assert refresh(d) is Refresh.OPENED
    (issue,) = d.gh.issues(DOWN_OWNER, DOWN_NAME)
    assert issue["user"]["login"] == "carry[bot]"
    assert issue["body"] == dashboard_issue.body(d.rt)
    assert f"carry's PR #{d.pull()['number']} (open)" in issue["body"]
    known = record.load(d.rt.redis, f"{DOWN_OWNER}/{DOWN_NAME}")
    assert known is not None and known.number == issue["number"] and len(known.digest) == 64
    assert refresh(d) is Refresh.UNCHANGED and edits(d, issue["number"]) == 0
    assert refresh(d, force=True) is Refresh.EDITED and edits(d, issue["number"]) == 1
    d.propose({"mod.py": MOVED["mod.py"].replace("# header", "# a new header")}, "New header")
    assert refresh(d) is Refresh.EDITED and edits(d, issue["number"]) == 2
    (again,) = d.gh.issues(DOWN_OWNER, DOWN_NAME)
    assert again["number"] == issue["number"] and again["body"] != issue["body"]


def test_a_lost_record_finds_the_issue_by_its_label_and_author(deploy: Deploy) -> None:
    d = deploy(downstream=ON)
    d.open_pr()
    refresh(d)
    (issue,) = d.gh.issues(DOWN_OWNER, DOWN_NAME)
    # A person's issue with the same label is not carry's.
    d.gh.add_user("alice")
    d.gh.set_permission(DOWN_OWNER, DOWN_NAME, "alice", "write")
    d.gh.open_issue(DOWN_OWNER, DOWN_NAME, title="mine", user="alice", labels=[board.LABEL])
    record.forget(d.rt.redis)
    assert refresh(d) is Refresh.EDITED
    assert record.load(d.rt.redis, f"{DOWN_OWNER}/{DOWN_NAME}").number == issue["number"]  # type: ignore[union-attr]
    assert len(d.gh.issues(DOWN_OWNER, DOWN_NAME)) == 2


def test_an_issue_github_does_not_have_is_replaced(deploy: Deploy) -> None:
    d = deploy(downstream=ON)
    record.save(d.rt.redis, record.DashboardIssue(f"{DOWN_OWNER}/{DOWN_NAME}", 999, "x"))
    assert refresh(d) is Refresh.OPENED
    (issue,) = d.gh.issues(DOWN_OWNER, DOWN_NAME)
    assert record.load(d.rt.redis, f"{DOWN_OWNER}/{DOWN_NAME}").number == issue["number"]  # type: ignore[union-attr]
    (opened,) = [
        e for e in store.history(d.rt.redis, None) if e["kind"] == "dashboard-issue-opened"
    ]
    assert opened["data"]["number"] == issue["number"]
    # A configured series not checked yet is listed all the same.
    assert f"## `{SERIES}`" in issue["body"] and "no head seen yet" in issue["body"]


def test_off_when_configured_false_and_never_without_credentials(deploy: Deploy) -> None:
    d = deploy(downstream={"dashboard_issue": False})
    assert refresh(d) is Refresh.OFF
    asked = d.gh.api_requests("GET", f"/repos/{DOWN_OWNER}/{DOWN_NAME}")
    assert asked == []  # false needs no question to GitHub
    downstream = d.rt.config.downstream.model_copy(update={"dashboard_issue": True})
    on = dataclasses.replace(d.rt, config=d.rt.config.model_copy(update={"downstream": downstream}))
    read_only = dataclasses.replace(
        on, settings=on.settings.model_copy(update={"github_token": None})
    )
    assert dashboard_issue.refresh(read_only, d.rt.forge()) is Refresh.OFF
    assert dashboard_issue.refresh(on, d.rt.forge()) is Refresh.OPENED
    assert d.gh.issues(DOWN_OWNER, DOWN_NAME)


@pytest.mark.parametrize("auth", ["token", "app"])
def test_on_by_default_when_the_credentials_can_write_issues(deploy: Deploy, auth: str) -> None:
    d = deploy(auth=auth)  # downstream.dashboard_issue unset
    decided = dashboard_issue.decision(d.rt)
    assert decided.on and "on by default" in decided.reason
    assert refresh(d) is Refresh.OPENED
    assert len(d.gh.issues(DOWN_OWNER, DOWN_NAME)) == 1


@pytest.mark.parametrize(
    ("auth", "lacking"),
    [
        ("token", {"role": "read"}),
        ("app", {"app_permissions": {"checks": "write", "contents": "write", "metadata": "read"}}),
    ],
)
def test_off_with_one_log_line_when_the_credentials_cannot_write_issues(
    deploy: Deploy, auth: str, lacking: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    d = deploy(auth=auth, **lacking)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="carry.dashboard_issue"):
        assert refresh(d) is Refresh.OFF  # no error
        assert refresh(d) is Refresh.OFF
    said = [r.getMessage() for r in caplog.records if r.name == "carry.dashboard_issue"]
    assert len(said) == 1 and "cannot write issues" in said[0] and "off" in said[0]
    assert all(r.levelno < logging.ERROR for r in caplog.records)
    assert d.gh.issues(DOWN_OWNER, DOWN_NAME) == []
    # an explicit true keeps it on, and says why its updates will fail
    on = dashboard_issue.decision(_with(d, True))
    assert on.on and "cannot write issues" in on.reason


def _with(d: Deployment, configured: bool | None) -> Any:
    downstream = d.rt.config.downstream.model_copy(update={"dashboard_issue": configured})
    return dataclasses.replace(
        d.rt, config=d.rt.config.model_copy(update={"downstream": downstream})
    )
