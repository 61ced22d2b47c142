"""normalize(): every GitHub example payload -> its typed event; malformed -> PayloadError."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.core.events import (
    CiResultReceived,
    CommentCreated,
    Event,
    HeadMoved,
    Ignored,
    InstallationChanged,
    IssueEdited,
    Ping,
    PrStateChanged,
    RefDeleted,
    event_from_dict,
    event_to_dict,
)
from bot.core.github_payloads import PayloadError, normalize, parse_timestamp
from tests.support.paths import WEBHOOK_EXAMPLES

NOT_PAYLOADS = {"manifest.json", "validation.json"}
REPO = "Codertocat/Hello-World"
REPO_ID = 186853002  # repository.id: the same through a rename or transfer
PR_HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
DELIVERY = "72d3162e-cc78-11e3-81ab-4c9367dc0958"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((WEBHOOK_EXAMPLES / name).read_text())
    return data


def event_name_of(file_name: str) -> str:
    return file_name.split(".", 1)[0]


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _pr(state: Any, when: str, **extra: Any) -> PrStateChanged:
    return PrStateChanged(
        repo=REPO,
        repo_id=REPO_ID,
        number=2,
        state=state,
        head_sha=PR_HEAD,
        base_ref="master",
        actor="Codertocat",
        at=at(when),
        delivery_id=DELIVERY,
        **extra,
    )


def _check_run(action: str, completed: str) -> CiResultReceived:
    return CiResultReceived(
        ci_kind="check_run",
        action=action,
        repo=REPO,
        repo_id=REPO_ID,
        head_sha=PR_HEAD,
        name="Octocoders-linter",
        status="completed",
        conclusion="success",
        id=128620228,
        head_branch="changes",
        pull_requests=(2,),
        html_url="https://github.com/Codertocat/Hello-World/runs/128620228",
        completed_at=at(completed),
        delivery_id=DELIVERY,
    )


EXPECTED: dict[str, Event] = {
    "ping.json": Ping(
        zen="Anything added dilutes everything else.", hook_id=109948940, delivery_id=DELIVERY
    ),
    "ping.with-app_id.json": Ping(
        zen="Anything added dilutes everything else.", hook_id=109948940, delivery_id=DELIVERY
    ),
    "push.json": HeadMoved(
        repo=REPO,
        repo_id=REPO_ID,
        ref="refs/heads/master",
        before="0" * 40,
        after="6113728f27ae82c7b1a177c8d03f9e96e0adf246",
        actor="Codertocat",
        delivery_id=DELIVERY,
    ),
    "push.tag-deleted.json": RefDeleted(
        repo=REPO,
        repo_id=REPO_ID,
        ref="refs/tags/simple-tag",
        before="6113728f27ae82c7b1a177c8d03f9e96e0adf246",
        actor="Codertocat",
        delivery_id=DELIVERY,
    ),
    "pull_request.synchronize.json": HeadMoved(
        repo=REPO,
        repo_id=REPO_ID,
        ref="refs/pull/2/head",
        before="f95f852bd8fca8fcc58a9a2d6c842781e32a215e",
        after=PR_HEAD,
        actor="Codertocat",
        forced=True,
        delivery_id=DELIVERY,
    ),
    "pull_request.opened.json": _pr("open", "2019-05-15T15:20:33"),
    "pull_request.reopened.json": _pr("reopened", "2019-05-15T15:20:33"),
    "pull_request.edited.json": _pr("edited", "2019-05-15T15:20:33"),
    "pull_request.closed.json": _pr("closed_unmerged", "2019-05-15T15:21:18"),
    "pull_request.closed.merged.json": _pr(
        "merged",
        "2019-05-15T15:21:18",
        merge_commit_sha="c4295bd74fb0f4fda03689c3df3f2803b658fd85",
        merged_by="Codertocat",
    ),
    "issue_comment.created.json": Ignored(
        event_name="issue_comment",
        action="created",
        reason="issue_comment on an issue, not a pull request",
        delivery_id=DELIVERY,
    ),
    **{
        f"issues.{action}.json": Ignored(
            event_name="issues",
            action=action,
            reason=f"issues action {action!r} is not used by carry (only edits of its dashboard)",
            delivery_id=DELIVERY,
        )
        for action in ("opened", "closed", "reopened")
    },
    # octokit's example edits the title only (`changes` is empty): the body is as it was
    "issues.edited.json": IssueEdited(
        repo=REPO,
        repo_id=REPO_ID,
        number=1,
        actor="Codertocat",
        body="It looks like you accidently spelled 'commit' with two 't's.",
        previous_body=None,
        delivery_id=DELIVERY,
    ),
    "issue_comment.created.on-pull-request.json": CommentCreated(
        repo=REPO,
        repo_id=REPO_ID,
        number=1,
        on_pull_request=True,
        author="Codertocat",
        author_association="OWNER",
        body="You are totally right! I'll get this fixed right away.",
        comment_id=492700400,
        html_url="https://github.com/Codertocat/Hello-World/pull/1#issuecomment-492700400",
        delivery_id=DELIVERY,
    ),
    "check_run.completed.json": _check_run("completed", "2019-05-15T15:21:12"),
    "check_run.rerequested.json": _check_run("rerequested", "2019-05-15T15:21:45"),
    "check_run.rerequested.octokit.json": CiResultReceived(
        ci_kind="check_run",
        action="rerequested",
        repo="github/hello-world",
        repo_id=526,
        head_sha="d6fde92930d4715a2b49857d24b940956b26d2d3",
        name="randscape",
        status="completed",
        conclusion="neutral",
        id=4,
        head_branch="master",
        html_url="http://github.com/github/hello-world/runs/4",
        completed_at=at("2018-05-04T01:14:52"),
        delivery_id=DELIVERY,
    ),
    "check_suite.completed.json": CiResultReceived(
        ci_kind="check_suite",
        action="completed",
        repo=REPO,
        repo_id=REPO_ID,
        head_sha=PR_HEAD,
        name="octocoders-linter",
        status="completed",
        conclusion="success",
        id=118578147,
        head_branch="changes",
        pull_requests=(2,),
        completed_at=at("2019-05-15T15:21:14"),
        delivery_id=DELIVERY,
    ),
    "workflow_run.completed.json": CiResultReceived(
        ci_kind="workflow_run",
        action="completed",
        repo="octo-org/octo-repo",
        repo_id=300029405,
        head_sha="3484a3fb816e0859fd6e1cea078d76385ff50625",
        name="test",
        status="completed",
        conclusion="success",
        id=289782451,
        head_branch="master",
        pull_requests=(2,),
        html_url="https://github.com/octo-org/octo-repo/actions/runs/289782451",
        completed_at=at("2020-10-05T16:33:49"),
        delivery_id=DELIVERY,
    ),
    "installation.created.json": InstallationChanged(
        action="created",
        installation_id=957387,
        account="Codertocat",
        repos=("Codertocat/Hello-World",),
        delivery_id=DELIVERY,
    ),
}

EXPECTED_KEYS = {
    "push.json": f"head:{REPO}:refs/heads/master:6113728f27ae82c7b1a177c8d03f9e96e0adf246",
    "pull_request.synchronize.json": f"head:{REPO}:refs/pull/2/head:{PR_HEAD}",
    "pull_request.closed.merged.json": f"pr:{REPO}#2:merged:{PR_HEAD}",
    "pull_request.opened.json": f"pr:{REPO}#2:open:{PR_HEAD}",
    "pull_request.closed.json": f"pr:{REPO}#2:closed_unmerged:{PR_HEAD}@2019-05-15T15:21:18Z",
    "issue_comment.created.on-pull-request.json": f"comment:{REPO}:492700400",
    "check_run.completed.json": f"ci:check_run:{REPO}:128620228:1:completed:completed:success",
    "push.tag-deleted.json": (
        f"refdel:{REPO}:refs/tags/simple-tag:6113728f27ae82c7b1a177c8d03f9e96e0adf246"
    ),
}


def test_the_table_covers_every_example_payload() -> None:
    on_disk = {p.name for p in WEBHOOK_EXAMPLES.glob("*.json")} - NOT_PAYLOADS
    assert on_disk == set(EXPECTED)


@pytest.mark.parametrize("file_name", sorted(EXPECTED))
def test_example_payload_normalizes_to_expected_event(file_name: str) -> None:
    event = normalize(event_name_of(file_name), DELIVERY, load(file_name))
    assert event == EXPECTED[file_name]


@pytest.mark.parametrize("file_name", sorted(EXPECTED_KEYS))
def test_idempotency_keys(file_name: str) -> None:
    assert EXPECTED[file_name].key == EXPECTED_KEYS[file_name]


@pytest.mark.parametrize("file_name", sorted(EXPECTED))
def test_events_round_trip_through_json(file_name: str) -> None:
    event = EXPECTED[file_name]
    as_json = json.loads(json.dumps(event_to_dict(event)))
    assert as_json["kind"] == event.kind and as_json["key"] == event.key
    assert event_from_dict(as_json) == event


def test_opened_and_reopened_move_the_head_but_merges_do_not() -> None:
    moved = {name: e.moves_head for name, e in EXPECTED.items() if isinstance(e, PrStateChanged)}
    assert moved == {
        "pull_request.opened.json": True,
        "pull_request.reopened.json": True,
        "pull_request.edited.json": False,
        "pull_request.closed.json": False,
        "pull_request.closed.merged.json": False,
    }
    opened = EXPECTED["pull_request.opened.json"]
    assert isinstance(opened, PrStateChanged) and opened.head_ref == "refs/pull/2/head"


# --------------------------------------------------------------------------- leniency / variants


def _edit(payload: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    payload = copy.deepcopy(payload)
    *parents, last = path.split(".")
    node: Any = payload
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is _DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return payload


_DELETE = object()


def test_edited_base_is_base_edited_with_previous_base() -> None:
    payload = _edit(load("pull_request.edited.json"), "changes", {"base": {"ref": {"from": "v1"}}})
    event = normalize("pull_request", DELIVERY, payload)
    assert isinstance(event, PrStateChanged)
    assert (event.state, event.previous_base_ref) == ("base_edited", "v1")
    assert event.key == f"pr:{REPO}#2:base_edited:{PR_HEAD}:master@2019-05-15T15:20:33Z"


def test_null_counts_as_missing_and_unknown_keys_are_ignored() -> None:
    payload = _edit(load("pull_request.closed.merged.json"), "pull_request.merged_by", None)
    payload = _edit(payload, "pull_request.merge_commit_sha", None)
    payload = _edit(payload, "brand_new_field", {"anything": [1, 2]})
    payload = _edit(payload, "sender", None)
    event = normalize("pull_request", DELIVERY, payload)
    assert isinstance(event, PrStateChanged)
    assert (event.state, event.merged_by, event.merge_commit_sha, event.actor) == (
        "merged",
        None,
        None,
        None,
    )


def pr_state(payload: dict[str, Any]) -> PrStateChanged:
    event = normalize("pull_request", DELIVERY, payload)
    assert isinstance(event, PrStateChanged)
    return event


def test_closed_without_merged_flag_uses_merged_at() -> None:
    payload = _edit(load("pull_request.closed.merged.json"), "pull_request.merged", _DELETE)
    assert pr_state(payload).state == "merged"
    payload = _edit(load("pull_request.closed.json"), "pull_request.merged", None)
    assert pr_state(payload).state == "closed_unmerged"


@pytest.mark.parametrize(
    "value", [1557933678, 1557933678.0, "2019-05-15T15:21:18Z", "2019-05-15T17:21:18+02:00"]
)
def test_timestamps_accept_epoch_and_iso(value: Any) -> None:
    payload = _edit(load("pull_request.closed.merged.json"), "pull_request.merged_at", value)
    assert pr_state(payload).at == datetime(2019, 5, 15, 15, 21, 18, tzinfo=UTC)


def test_timestamp_parser_forms() -> None:
    assert parse_timestamp("2018-04-25 20:42:10") == datetime(2018, 4, 25, 20, 42, 10, tzinfo=UTC)
    assert parse_timestamp(None) is None and parse_timestamp("") is None
    with pytest.raises(ValueError, match="expected a timestamp"):
        parse_timestamp(True)


def test_push_sha_case_is_normalized() -> None:
    payload = _edit(load("push.json"), "after", "6113728F27AE82C7B1A177C8D03F9E96E0ADF246")
    event = normalize("push", DELIVERY, payload)
    assert (
        isinstance(event, HeadMoved) and event.after == "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
    )


def test_installation_repositories_lists_added_and_removed() -> None:
    payload = {
        "action": "added",
        "installation": {"id": 7, "account": {"login": "vllm-project"}},
        "repositories_added": [{"full_name": "vllm-project/vllm"}],
        "repositories_removed": [],
    }
    event = normalize("installation_repositories", DELIVERY, payload)
    assert event == InstallationChanged(
        action="added",
        installation_id=7,
        account="vllm-project",
        repos=("vllm-project/vllm",),
        delivery_id=DELIVERY,
    )


IGNORED = [
    ("star", {"action": "created"}, "created", "event 'star' is not used by carry"),
    ("release", {}, None, "event 'release' is not used by carry"),
    (
        "pull_request",
        {"action": "labeled"},
        "labeled",
        "pull_request action 'labeled' is not used by carry",
    ),
    (
        "issue_comment",
        {"action": "deleted"},
        "deleted",
        "issue_comment action 'deleted' is not used by carry (only new comments)",
    ),
    (
        "check_run",
        {"action": "created"},
        "created",
        "check_run action 'created' is not used by carry (only completed, rerequested)",
    ),
]


@pytest.mark.parametrize(("event_name", "payload", "action", "reason"), IGNORED)
def test_unused_events_are_ignored_with_a_reason(
    event_name: str, payload: Any, action: str | None, reason: str
) -> None:
    event = normalize(event_name, DELIVERY, payload)
    assert event == Ignored(
        event_name=event_name, action=action, reason=reason, delivery_id=DELIVERY
    )
    assert event.key == f"ignored:{event_name}:{DELIVERY}"


# --------------------------------------------------------------------------- malformed

MALFORMED = [
    ("pull_request.synchronize.json", "pull_request.head.sha", _DELETE,
     "pull_request.head.sha: required field is missing"),
    ("pull_request.synchronize.json", "before", None, "before: required field is missing"),
    ("pull_request.opened.json", "pull_request", "oops", "pull_request: expected an object"),
    ("pull_request.opened.json", "action", _DELETE, "action: required field is missing"),
    ("pull_request.closed.merged.json", "pull_request.number", "2",
     "pull_request.number: expected an integer, got a string"),
    ("pull_request.closed.merged.json", "pull_request.merged", "yes",
     "pull_request.merged: expected true or false, got a string"),
    ("pull_request.closed.merged.json", "pull_request.merged_at", "yesterday",
     "pull_request.merged_at: expected a timestamp, got 'yesterday'"),
    ("pull_request.edited.json", "pull_request.base.ref", 5,
     "pull_request.base.ref: expected a string, got a number"),
    ("push.json", "after", "xyz", "after: expected a 40-hex commit sha, got 'xyz'"),
    ("push.json", "repository.full_name", _DELETE, "repository.full_name: required field is missing"),
    ("push.json", "repository", None, "repository.full_name: required field is missing"),
    ("push.json", "ref", ["refs/heads/x"], "ref: expected a string, got a list"),
    ("issue_comment.created.on-pull-request.json", "comment.user", None,
     "comment.user.login: required field is missing"),
    ("issue_comment.created.on-pull-request.json", "comment.id", True,
     "comment.id: expected an integer, got a boolean"),
    ("issue_comment.created.on-pull-request.json", "issue.number", _DELETE,
     "issue.number: required field is missing"),
    ("check_run.completed.json", "check_run.head_sha", _DELETE,
     "check_run.head_sha: required field is missing"),
    ("check_suite.completed.json", "check_suite.pull_requests.0", {"id": 1},
     "check_suite.pull_requests[0].number: required field is missing"),
    ("workflow_run.completed.json", "workflow_run.status", _DELETE,
     "workflow_run.status: required field is missing"),
    ("installation.created.json", "installation.id", _DELETE,
     "installation.id: required field is missing"),
    ("installation.created.json", "repositories", {"full_name": "x/y"},
     "repositories: expected a list, got an object"),
]  # fmt: skip


@pytest.mark.parametrize(("file_name", "path", "value", "message"), MALFORMED)
def test_malformed_payload_names_the_path(
    file_name: str, path: str, value: Any, message: str
) -> None:
    payload = _edit(load(file_name), path, value)
    with pytest.raises(PayloadError) as caught:
        normalize(event_name_of(file_name), DELIVERY, payload)
    assert str(caught.value) == message


@pytest.mark.parametrize("payload", [[], "text", 3, None])
def test_payload_must_be_an_object(payload: Any) -> None:
    with pytest.raises(PayloadError, match=r"^payload: expected a JSON object"):
        normalize("push", DELIVERY, payload)
