"""Every webhook example octokit/webhooks publishes, through normalize() and the real intake.

tests/data/github/webhooks/octokit/examples.json holds all of octokit's api.github.com examples
at one commit (tests/data/README.md says where from and what was trimmed). For the event types
that carry normalizes, the event each example must become is worked out here from the payload
itself, by GitHub's meaning of its fields, not by calling bot/core/events.py; every other event
type must come back as Ignored. Then each example is sent, signed as GitHub signs it, to the
app's /webhooks/github with a real Redis, and must be acknowledged (2xx) and recorded.

The examples are GitHub's documented ones, so all of them are well-formed: a PayloadError from
any of them is a carry defect, as is any other exception.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, get_args

import httpx
import pytest
import redis
from fastapi.testclient import TestClient
from pydantic import SecretStr

from bot.config import CarryConfig, Settings
from bot.core.events import (
    ZERO_SHA,
    CiKind,
    CiResultReceived,
    CommentCreated,
    Event,
    HeadMoved,
    Ignored,
    InstallationChanged,
    IssueEdited,
    Ping,
    PrState,
    PrStateChanged,
    RefDeleted,
    RepositoryMoved,
)
from bot.core.github_payloads import normalize
from bot.store import get_delivery
from bot.web.app import create_app
from bot.web.webhooks import sign
from tests.support.paths import WEBHOOK_EXAMPLES

DATA_FILE = WEBHOOK_EXAMPLES / "octokit" / "examples.json"
DATA: dict[str, Any] = json.loads(DATA_FILE.read_text(encoding="utf-8"))
EXAMPLES: list[dict[str, Any]] = DATA["examples"]
PREFIX: str = DATA["source"]["dir"]

# How many examples octokit has of each event type carry normalizes, and in all (60 types).
HANDLED_COUNTS = {
    "check_run": 8,
    "check_suite": 8,
    "installation": 6,
    "installation_repositories": 2,
    "issue_comment": 8,
    "issues": 28,
    "ping": 3,
    "pull_request": 28,
    "push": 6,
    "repository": 12,
    "workflow_run": 4,
}
TOTAL = 273

CI_KINDS: dict[str, CiKind] = {kind: kind for kind in get_args(CiKind)}
SECRET = "octokit-contract-secret"
DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
CONFIG = CarryConfig.model_validate(
    {
        "downstream": {"repo": "example-org/carry"},
        "upstreams": {
            "vllm": {"url": "https://github.com/vllm-project/vllm.git", "repo": "vllm-project/vllm"}
        },
        "series": [],
    }
)


def example_id(entry: dict[str, Any]) -> str:
    path: str = entry["source_path"]
    return path.removeprefix(PREFIX)


PARAMS = [pytest.param(entry, id=example_id(entry)) for entry in EXAMPLES]


# --------------------------------------------------------------------------- expectations


@dataclass(frozen=True)
class Skipped:
    """An Ignored event whose reason must mention `mentions` (its wording is carry's own)."""

    event_name: str
    action: str | None
    mentions: str


def moment(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, int):
        return datetime.fromtimestamp(value, tz=UTC)
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def expected_event(event_name: str, p: dict[str, Any]) -> Event | Skipped:
    """What carry must make of example `p`, delivered as `event_name`."""
    action = p.get("action") if isinstance(p.get("action"), str) else None
    if event_name == "ping":
        return Ping(zen=p.get("zen"), hook_id=p.get("hook_id"), delivery_id=DELIVERY)
    if event_name == "push":
        return expected_push(p)
    if event_name == "pull_request":
        return expected_pull_request(p)
    if event_name == "issue_comment":
        return expected_issue_comment(p)
    if event_name == "issues":
        return expected_issues(p)
    if event_name in CI_KINDS:
        return expected_ci(CI_KINDS[event_name], p)
    if event_name in ("installation", "installation_repositories"):
        return expected_installation(event_name, p)
    if event_name == "repository":
        return expected_repository(p)
    return Skipped(event_name, action, mentions=repr(event_name))


def expected_push(p: dict[str, Any]) -> Event:
    repo = p["repository"]["full_name"]
    actor = p["sender"]["login"]
    if p["deleted"]:  # GitHub's own flag, not carry's zero-sha test
        assert p["after"] == ZERO_SHA
        return RefDeleted(
            repo=repo,
            repo_id=p["repository"]["id"],
            ref=p["ref"],
            before=p["before"],
            actor=actor,
            delivery_id=DELIVERY,
        )
    after = p["after"]
    if p["ref"].startswith("refs/tags/") and p.get("head_commit"):
        after = p["head_commit"]["id"]  # an annotated tag: the commit it points to
    return HeadMoved(
        repo=repo,
        repo_id=p["repository"]["id"],
        ref=p["ref"],
        before=p["before"],
        after=after,
        actor=actor,
        forced=p["forced"],
        delivery_id=DELIVERY,
    )


def expected_pull_request(p: dict[str, Any]) -> Event | Skipped:
    action = p["action"]
    pr = p["pull_request"]
    repo = p["repository"]["full_name"]
    if action == "synchronize":
        return HeadMoved(
            repo=repo,
            repo_id=p["repository"]["id"],
            ref=f"refs/pull/{pr['number']}/head",
            before=p["before"],
            after=pr["head"]["sha"],
            actor=p["sender"]["login"],
            forced=True,
            delivery_id=DELIVERY,
        )
    state: PrState
    if action == "opened":
        state, at = "open", pr["updated_at"]
    elif action == "reopened":
        state, at = "reopened", pr["updated_at"]
    elif action == "closed" and pr["merged"]:
        state, at = "merged", pr["merged_at"]
    elif action == "closed":
        state, at = "closed_unmerged", pr["closed_at"]
    elif action == "edited":
        state = "base_edited" if "base" in p["changes"] else "edited"
        at = pr["updated_at"]
    else:
        return Skipped("pull_request", action, mentions=repr(action))
    merged = state == "merged"
    return PrStateChanged(
        repo=repo,
        repo_id=p["repository"]["id"],
        number=pr["number"],
        state=state,
        head_sha=pr["head"]["sha"],
        base_ref=pr["base"]["ref"],
        merge_commit_sha=pr["merge_commit_sha"] if merged else None,
        merged_by=pr["merged_by"]["login"] if merged else None,
        actor=p["sender"]["login"],
        previous_base_ref=p["changes"]["base"]["ref"]["from"] if state == "base_edited" else None,
        at=moment(at),
        delivery_id=DELIVERY,
    )


def expected_issues(p: dict[str, Any]) -> Event | Skipped:
    """Only an edit can be a tick on carry's dashboard issue; the planner decides whether it
    is that issue."""
    if p["action"] != "edited":
        return Skipped("issues", p["action"], mentions=repr(p["action"]))
    body_change = p.get("changes", {}).get("body")
    return IssueEdited(
        repo=p["repository"]["full_name"],
        repo_id=p["repository"]["id"],
        number=p["issue"]["number"],
        actor=p["sender"]["login"],
        body=p["issue"]["body"] or "",
        previous_body=body_change["from"] if body_change else None,
        delivery_id=DELIVERY,
    )


def expected_issue_comment(p: dict[str, Any]) -> Event | Skipped:
    action = p["action"]
    if action != "created":
        return Skipped("issue_comment", action, mentions=repr(action))
    if "pull_request" not in p["issue"]:
        return Skipped("issue_comment", action, mentions="not a pull request")
    comment = p["comment"]
    return CommentCreated(
        repo=p["repository"]["full_name"],
        repo_id=p["repository"]["id"],
        number=p["issue"]["number"],
        on_pull_request=True,
        author=comment["user"]["login"],
        author_association=comment["author_association"],
        body=comment["body"],
        comment_id=comment["id"],
        html_url=comment["html_url"],
        delivery_id=DELIVERY,
    )


def expected_ci(kind: CiKind, p: dict[str, Any]) -> Event | Skipped:
    action = p["action"]
    if action not in ("completed", "rerequested"):
        return Skipped(kind, action, mentions=repr(action))
    run = p[kind]
    if kind == "check_run":
        name = run["name"]
        head_branch = run["check_suite"]["head_branch"]
        completed_at = run["completed_at"]
    else:
        # A suite is named by the app that runs it (older payloads have no app slug, only its
        # name); a workflow run by its own name, else its workflow's.
        if kind == "check_suite":
            name = run["app"].get("slug") or run["app"]["name"]
        else:
            name = run["name"] or p["workflow"]["name"]
        head_branch = run["head_branch"]
        completed_at = run["updated_at"]
    return CiResultReceived(
        ci_kind=kind,
        action=action,
        repo=p["repository"]["full_name"],
        repo_id=p["repository"]["id"],
        head_sha=run["head_sha"],
        name=name,
        status=run["status"],
        conclusion=run["conclusion"],
        id=run["id"],
        external_id=run.get("external_id") or None,
        attempt=run.get("run_attempt") or 1,
        head_branch=head_branch,
        pull_requests=tuple(pr["number"] for pr in run["pull_requests"]),
        html_url=run.get("html_url"),
        completed_at=moment(completed_at),
        delivery_id=DELIVERY,
    )


def expected_installation(event_name: str, p: dict[str, Any]) -> Event:
    def names(key: str) -> tuple[str, ...]:
        return tuple(repo["full_name"] for repo in p.get(key) or [])

    added = "repositories" if event_name == "installation" else "repositories_added"
    return InstallationChanged(
        action=p["action"],
        installation_id=p["installation"]["id"],
        account=p["installation"]["account"]["login"],
        repos=names(added),
        repos_removed=names("repositories_removed"),
        delivery_id=DELIVERY,
    )


def expected_repository(p: dict[str, Any]) -> Event | Skipped:
    """A rename or a transfer: the repository's id stays, its name changes."""
    action, repo = p["action"], p["repository"]
    if action == "renamed":
        was = f"{repo['owner']['login']}/{p['changes']['repository']['name']['from']}"
    elif action == "transferred":
        old = p["changes"]["owner"]["from"]
        was = f"{(old.get('user') or old['organization'])['login']}/{repo['name']}"
    else:
        return Skipped("repository", action, mentions=repr(action))
    return RepositoryMoved(
        action=action,
        repo=repo["full_name"],
        repo_id=repo["id"],
        was=was,
        actor=p["sender"]["login"],
        delivery_id=DELIVERY,
    )


# --------------------------------------------------------------------------- the data itself


def test_every_stored_example_is_tested() -> None:
    paths = [entry["source_path"] for entry in EXAMPLES]
    per_event = Counter(entry["event"] for entry in EXAMPLES)

    assert len(PARAMS) == len(EXAMPLES) == len(set(paths)) == TOTAL >= 200
    assert {event: per_event[event] for event in HANDLED_COUNTS} == HANDLED_COUNTS
    assert sum(HANDLED_COUNTS.values()) == 113
    assert len(per_event) == 60
    for entry in EXAMPLES:
        # The directory an example sits in is the event GitHub names in X-GitHub-Event.
        assert entry["source_path"].startswith(f"{PREFIX}{entry['event']}/")
        assert isinstance(entry["payload"], dict)


def test_no_url_key_is_left_but_html_url() -> None:
    def keys(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                yield key
                yield from keys(value)
        elif isinstance(node, list):
            for value in node:
                yield from keys(value)

    left = {key for entry in EXAMPLES for key in keys(entry["payload"]) if key.endswith("_url")}
    assert left == {"html_url"}  # carry reads comment.html_url and <ci run>.html_url


# --------------------------------------------------------------------------- normalize


@pytest.mark.parametrize("entry", PARAMS)
def test_normalize_makes_the_expected_event(entry: dict[str, Any]) -> None:
    event_name, payload = entry["event"], entry["payload"]
    expected = expected_event(event_name, payload)

    event = normalize(event_name, DELIVERY, payload)

    if isinstance(expected, Skipped):
        assert isinstance(event, Ignored), event
        assert (event.event_name, event.action) == (expected.event_name, expected.action)
        assert event.delivery_id == DELIVERY
        assert expected.mentions in event.reason
    else:
        assert event == expected


def test_which_events_the_examples_make() -> None:
    kinds = Counter(
        type(expected_event(entry["event"], entry["payload"])).__name__ for entry in EXAMPLES
    )
    # Skipped: the 160 examples of event types carry does not use, and 70 of actions it does
    # not use. The two IssueEdited are edits of a title and of a body. No octokit example is a comment on a pull request (the four issue_comment
    # "created" ones are on plain issues), so none makes a CommentCreated: the derived
    # issue_comment.created.on-pull-request.json of tests/unit/test_events.py does.
    assert kinds == {
        "Skipped": 230,
        "RepositoryMoved": 4,  # 1 renamed, 3 transferred
        "IssueEdited": 2,
        "CiResultReceived": 12,
        "InstallationChanged": 8,
        "PrStateChanged": 7,
        "RefDeleted": 4,
        "HeadMoved": 3,
        "Ping": 3,
    }


# --------------------------------------------------------------------------- intake


@dataclass
class Intake:
    http: TestClient
    client: redis.Redis
    handed_off: list[Event] = field(default_factory=list)

    def post(self, event_name: str, delivery: str, body: bytes) -> httpx.Response:
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "GitHub-Hookshot/octokit-contract",
            "X-GitHub-Event": event_name,
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": sign(SECRET, body),
        }
        return self.http.post("/webhooks/github", content=body, headers=headers)


@pytest.fixture(scope="module")
def apps() -> Iterator[dict[str, Intake]]:
    """The app for each Redis URL (one, in practice): one app serves every example, since
    each delivery has its own id, and building one per example would triple the runtime."""
    made: dict[str, Intake] = {}
    yield made
    for intake in made.values():
        intake.http.close()


@pytest.fixture
def intake(apps: dict[str, Intake], redis_url: str) -> Intake:
    if redis_url not in apps:
        client = redis.Redis.from_url(redis_url)
        handed_off: list[Event] = []
        settings = Settings(webhook_secret=SecretStr(SECRET), max_body_bytes=None)
        app = create_app(CONFIG, settings, client, on_event=handed_off.append)
        apps[redis_url] = Intake(TestClient(app, raise_server_exceptions=False), client, handed_off)
    running = apps[redis_url]
    running.handed_off.clear()
    return running


@pytest.mark.parametrize("entry", PARAMS)
def test_intake_acknowledges_and_records_the_example(intake: Intake, entry: dict[str, Any]) -> None:
    event_name, payload = entry["event"], entry["payload"]
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    delivery = str(uuid.uuid4())

    response = intake.post(event_name, delivery, body)

    assert response.status_code in (200, 202), response.text
    expected = normalize(event_name, delivery, payload)
    assert response.status_code == (200 if isinstance(expected, Ping) else 202)
    answer = response.json()
    assert answer["delivery_id"] == delivery
    if isinstance(expected, Ping):
        assert answer["status"] == "pong"
    elif isinstance(expected, Ignored):
        assert (answer["status"], answer["reason"]) == ("ignored", expected.reason)
    else:
        assert answer["status"] == "accepted"
        assert (answer["event"], answer["key"]) == (expected.kind, expected.key)
    handed_on = not isinstance(expected, Ping | Ignored)
    assert intake.handed_off == ([expected] if handed_on else [])
    stored = get_delivery(intake.client, delivery)
    assert stored is not None
    assert stored.body == body
    assert stored.event_name == event_name
    assert stored.outcome == ("ignored" if isinstance(expected, Ignored) else "accepted")
    assert stored.event_key == expected.key
