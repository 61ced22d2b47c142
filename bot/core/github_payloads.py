"""GitHub webhook deliveries -> carry's events (bot.core.events). Pure.

`normalize()` turns one delivery into exactly one event. It is strict about the fields carry
uses (a missing or mistyped one raises PayloadError naming its path) and lenient about
everything else: unknown keys are ignored, null counts as missing for optional fields, and
timestamps may be epoch numbers or ISO-8601 strings.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

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
    MoveKind,
    Ping,
    PrState,
    PrStateChanged,
    RefDeleted,
    RepositoryMoved,
)

_SHA_RE = re.compile(r"^[0-9a-fA-F]{40}$")


class PayloadError(ValueError):
    """A delivery lacks, or mistypes, a field that carry needs. The message names its path."""


# --------------------------------------------------------------------------- payload access


class _Payload:
    """Typed access to a webhook payload by dotted path, raising PayloadError on bad input."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = data

    def get(self, path: str) -> Any:
        node: Any = self._data
        walked: list[str] = []
        for part in path.split("."):
            if node is None:
                return None
            if not isinstance(node, Mapping):
                raise PayloadError(f"{'.'.join(walked)}: expected an object")
            node = node.get(part)
            walked.append(part)
        return node

    def opt_str(self, path: str) -> str | None:
        value = self.get(path)
        if value is None:
            return None
        if not isinstance(value, str):
            raise PayloadError(f"{path}: expected a string, got {_type_name(value)}")
        return value

    def string(self, path: str) -> str:
        value = self.opt_str(path)
        if value is None:
            raise PayloadError(f"{path}: required field is missing")
        return value

    def opt_int(self, path: str) -> int | None:
        value = self.get(path)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise PayloadError(f"{path}: expected an integer, got {_type_name(value)}")
        return value

    def integer(self, path: str) -> int:
        value = self.opt_int(path)
        if value is None:
            raise PayloadError(f"{path}: required field is missing")
        return value

    def opt_bool(self, path: str) -> bool | None:
        value = self.get(path)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise PayloadError(f"{path}: expected true or false, got {_type_name(value)}")
        return value

    def sha(self, path: str) -> str:
        value = self.string(path)
        if not _SHA_RE.match(value):
            raise PayloadError(f"{path}: expected a 40-hex commit sha, got {value[:50]!r}")
        return value.lower()

    def opt_sha(self, path: str) -> str | None:
        return self.sha(path) if self.get(path) is not None else None

    def login(self, path: str) -> str | None:
        """A user's login; None when the user object is absent (e.g. a deleted account)."""
        return self.opt_str(f"{path}.login")

    def timestamp(self, path: str) -> datetime | None:
        value = self.get(path)
        try:
            return parse_timestamp(value)
        except ValueError as exc:
            raise PayloadError(f"{path}: {exc}") from None

    def array(self, path: str) -> list[Any]:
        value = self.get(path)
        if value is None:
            return []
        if not isinstance(value, list):
            raise PayloadError(f"{path}: expected a list, got {_type_name(value)}")
        return value


def _type_name(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    for kind, name in names.items():
        if isinstance(value, kind):
            return name
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__


def parse_timestamp(value: Any) -> datetime | None:
    """Epoch seconds (int/float), ISO-8601 (with Z or offset) or 'YYYY-MM-DD HH:MM:SS' (UTC)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError("expected a timestamp, got a boolean")
    if isinstance(value, int | float):
        try:
            return datetime.fromtimestamp(value, tz=UTC)
        except (OverflowError, OSError, ValueError):
            raise ValueError(f"expected a timestamp, got {str(value)[:40]}") from None
    if not isinstance(value, str):
        raise ValueError(f"expected a timestamp, got {_type_name(value)}")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"expected a timestamp, got {value[:40]!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# --------------------------------------------------------------------------- normalize


def normalize(event_name: str, delivery_id: str, payload: Any) -> Event:
    """One webhook delivery (X-GitHub-Event, X-GitHub-Delivery, parsed JSON body) -> one Event."""
    if not isinstance(payload, Mapping):
        raise PayloadError(f"payload: expected a JSON object, got {_type_name(payload)}")
    data = _Payload(payload)
    handler = _HANDLERS.get(event_name)
    if handler is None:
        return Ignored(
            event_name=event_name,
            action=_action_or_none(data),
            reason=f"event {event_name!r} is not used by carry",
            delivery_id=delivery_id,
        )
    return handler(data, delivery_id)


def _action_or_none(data: _Payload) -> str | None:
    value = data.get("action")
    return value if isinstance(value, str) else None


def _ignored(event_name: str, action: str | None, reason: str, delivery_id: str) -> Ignored:
    return Ignored(event_name=event_name, action=action, reason=reason, delivery_id=delivery_id)


def _ping(data: _Payload, delivery_id: str) -> Event:
    return Ping(zen=data.opt_str("zen"), hook_id=data.opt_int("hook_id"), delivery_id=delivery_id)


def _push(data: _Payload, delivery_id: str) -> Event:
    repo = data.string("repository.full_name")
    repo_id = data.opt_int("repository.id")
    ref = data.string("ref")
    before = data.sha("before")
    after = data.sha("after")
    actor = data.login("sender") or data.opt_str("pusher.name")
    if after == ZERO_SHA:
        return RefDeleted(
            repo=repo,
            repo_id=repo_id,
            ref=ref,
            before=before,
            actor=actor,
            delivery_id=delivery_id,
        )
    return HeadMoved(
        repo=repo,
        repo_id=repo_id,
        ref=ref,
        before=before,
        after=_pushed_commit(data, ref, after),
        actor=actor,
        forced=bool(data.opt_bool("forced")),
        delivery_id=delivery_id,
    )


def _pushed_commit(data: _Payload, ref: str, after: str) -> str:
    """The commit a push leaves `ref` at. For an annotated tag `after` is the tag object, and
    GitHub peels it for us in `head_commit` (the commit the tag points to): carry works on that
    commit, as the poller does, so one tag is one head whichever of them sees it first."""
    if not ref.startswith("refs/tags/"):
        return after
    peeled = data.opt_sha("head_commit.id")
    return peeled if peeled is not None else after


_PR_ACTIONS: dict[str, PrState] = {"opened": "open", "reopened": "reopened"}


def _pull_request(data: _Payload, delivery_id: str) -> Event:
    action = data.string("action")
    if action == "synchronize":
        return _pr_synchronize(data, delivery_id)
    if action == "closed":
        merged = data.opt_bool("pull_request.merged")
        if merged is None:  # some payload shapes omit it; merged_at is then the only signal
            merged = data.get("pull_request.merged_at") is not None
        return _pr_state(data, delivery_id, "merged" if merged else "closed_unmerged")
    if action == "edited":
        changes = data.get("changes")
        base_changed = isinstance(changes, Mapping) and changes.get("base") is not None
        return _pr_state(data, delivery_id, "base_edited" if base_changed else "edited")
    if action in _PR_ACTIONS:
        return _pr_state(data, delivery_id, _PR_ACTIONS[action])
    return _ignored(
        "pull_request", action, f"pull_request action {action!r} is not used by carry", delivery_id
    )


def _pr_number(data: _Payload) -> int:
    number = data.opt_int("pull_request.number")
    return number if number is not None else data.integer("number")


def _pr_synchronize(data: _Payload, delivery_id: str) -> HeadMoved:
    number = _pr_number(data)
    return HeadMoved(
        repo=data.string("repository.full_name"),
        repo_id=data.opt_int("repository.id"),
        ref=f"refs/pull/{number}/head",
        before=data.sha("before"),
        after=data.sha("pull_request.head.sha"),
        actor=data.login("sender"),
        # A PR head update may rewrite history; the payload does not say, so assume it can.
        forced=True,
        delivery_id=delivery_id,
    )


def _pr_state(data: _Payload, delivery_id: str, state: PrState) -> PrStateChanged:
    merged = state == "merged"
    if state == "merged":
        at = data.timestamp("pull_request.merged_at")
    elif state == "closed_unmerged":
        at = data.timestamp("pull_request.closed_at")
    else:
        at = data.timestamp("pull_request.updated_at")
    return PrStateChanged(
        repo=data.string("repository.full_name"),
        repo_id=data.opt_int("repository.id"),
        number=_pr_number(data),
        state=state,
        head_sha=data.sha("pull_request.head.sha"),
        base_ref=data.string("pull_request.base.ref"),
        merge_commit_sha=data.opt_sha("pull_request.merge_commit_sha") if merged else None,
        merged_by=data.login("pull_request.merged_by") if merged else None,
        actor=data.login("sender"),
        previous_base_ref=data.opt_str("changes.base.ref.from") if state == "base_edited" else None,
        at=at,
        delivery_id=delivery_id,
    )


def _issue_comment(data: _Payload, delivery_id: str) -> Event:
    action = data.string("action")
    if action != "created":
        reason = f"issue_comment action {action!r} is not used by carry (only new comments)"
        return _ignored("issue_comment", action, reason, delivery_id)
    if data.get("issue.pull_request") is None:
        reason = "issue_comment on an issue, not a pull request"
        return _ignored("issue_comment", action, reason, delivery_id)
    return CommentCreated(
        repo=data.string("repository.full_name"),
        repo_id=data.opt_int("repository.id"),
        number=data.integer("issue.number"),
        on_pull_request=True,
        author=data.string("comment.user.login"),
        author_association=data.opt_str("comment.author_association") or "NONE",
        body=data.opt_str("comment.body") or "",
        comment_id=data.integer("comment.id"),
        html_url=data.opt_str("comment.html_url"),
        delivery_id=delivery_id,
    )


def _issues(data: _Payload, delivery_id: str) -> Event:
    action = data.string("action")
    if action != "edited":
        reason = f"issues action {action!r} is not used by carry (only edits of its dashboard)"
        return _ignored("issues", action, reason, delivery_id)
    actor = data.login("sender")
    if actor is None:
        return _ignored("issues", action, "the edit names no sender", delivery_id)
    return IssueEdited(
        repo=data.string("repository.full_name"),
        repo_id=data.opt_int("repository.id"),
        number=data.integer("issue.number"),
        actor=actor,
        body=data.opt_str("issue.body") or "",
        previous_body=data.opt_str("changes.body.from"),
        delivery_id=delivery_id,
    )


_CI_ACTIONS = ("completed", "rerequested")


def _ci(ci_kind: CiKind) -> typing.Callable[[_Payload, str], Event]:
    def handle(data: _Payload, delivery_id: str) -> Event:
        action = data.string("action")
        if action not in _CI_ACTIONS:
            reason = (
                f"{ci_kind} action {action!r} is not used by carry (only completed, rerequested)"
            )
            return _ignored(ci_kind, action, reason, delivery_id)
        return _ci_result(data, ci_kind, action, delivery_id)

    return handle


def _ci_result(data: _Payload, ci_kind: CiKind, action: str, delivery_id: str) -> Event:
    root = ci_kind
    prs = []
    for index, pr in enumerate(data.array(f"{root}.pull_requests")):
        number = pr.get("number") if isinstance(pr, Mapping) else None
        if not isinstance(number, int) or isinstance(number, bool):
            raise PayloadError(f"{root}.pull_requests[{index}].number: required field is missing")
        prs.append(number)
    return CiResultReceived(
        ci_kind=ci_kind,
        action=action,
        repo=data.string("repository.full_name"),
        repo_id=data.opt_int("repository.id"),
        head_sha=data.sha(f"{root}.head_sha"),
        name=_ci_name(data, ci_kind),
        status=data.string(f"{root}.status"),
        conclusion=data.opt_str(f"{root}.conclusion"),
        id=data.integer(f"{root}.id"),
        external_id=data.opt_str(f"{root}.external_id") or None,
        attempt=data.opt_int(f"{root}.run_attempt") or 1,
        head_branch=_ci_head_branch(data, ci_kind),
        pull_requests=tuple(prs),
        html_url=data.opt_str(f"{root}.html_url"),
        completed_at=_ci_completed_at(data, ci_kind),
        delivery_id=delivery_id,
    )


def _ci_name(data: _Payload, ci_kind: CiKind) -> str:
    if ci_kind == "check_run":
        return data.string("check_run.name")
    if ci_kind == "workflow_run":
        # workflow_run.name may be empty; the workflow's own name is the stable one.
        return data.opt_str("workflow_run.name") or data.opt_str("workflow.name") or ""
    return data.opt_str("check_suite.app.slug") or data.opt_str("check_suite.app.name") or ""


def _ci_head_branch(data: _Payload, ci_kind: CiKind) -> str | None:
    if ci_kind == "check_run":
        return data.opt_str("check_run.check_suite.head_branch")
    return data.opt_str(f"{ci_kind}.head_branch")


def _ci_completed_at(data: _Payload, ci_kind: CiKind) -> datetime | None:
    if ci_kind == "check_run":
        return data.timestamp("check_run.completed_at")
    return data.timestamp(f"{ci_kind}.updated_at")


def _installation(data: _Payload, delivery_id: str) -> Event:
    action = data.string("action")
    return InstallationChanged(
        action=action,
        installation_id=data.integer("installation.id"),
        account=data.login("installation.account"),
        repos=_repo_names(data, "repositories"),
        delivery_id=delivery_id,
    )


def _installation_repositories(data: _Payload, delivery_id: str) -> Event:
    return InstallationChanged(
        action=data.string("action"),
        installation_id=data.integer("installation.id"),
        account=data.login("installation.account"),
        repos=_repo_names(data, "repositories_added"),
        repos_removed=_repo_names(data, "repositories_removed"),
        delivery_id=delivery_id,
    )


def _repo_names(data: _Payload, path: str) -> tuple[str, ...]:
    names = []
    for index, repo in enumerate(data.array(path)):
        name = repo.get("full_name") if isinstance(repo, Mapping) else None
        if not isinstance(name, str):
            raise PayloadError(f"{path}[{index}].full_name: required field is missing")
        names.append(name)
    return tuple(names)


def _repository(data: _Payload, delivery_id: str) -> Event:
    """`renamed`: changes.repository.name.from is the old name; `transferred`:
    changes.owner.from names the old owner (a user or an organization). Same id either way."""
    action = data.string("action")
    repo = data.string("repository.full_name")
    owner, _, name = repo.partition("/")
    moved: MoveKind
    if action == "renamed":
        moved, was = "renamed", f"{owner}/{data.string('changes.repository.name.from')}"
    elif action == "transferred":
        old_owner = data.login("changes.owner.from.user") or data.login(
            "changes.owner.from.organization"
        )
        if old_owner is None:
            raise PayloadError("changes.owner.from: names no user or organization")
        moved, was = "transferred", f"{old_owner}/{name}"
    else:
        reason = f"repository action {action!r} is not used by carry (only renamed, transferred)"
        return _ignored("repository", action, reason, delivery_id)
    return RepositoryMoved(
        action=moved,
        repo=repo,
        repo_id=data.integer("repository.id"),
        was=was,
        actor=data.login("sender"),
        delivery_id=delivery_id,
    )


_HANDLERS: dict[str, typing.Callable[[_Payload, str], Event]] = {
    "ping": _ping,
    "push": _push,
    "pull_request": _pull_request,
    "issue_comment": _issue_comment,
    "issues": _issues,
    "check_run": _ci("check_run"),
    "check_suite": _ci("check_suite"),
    "workflow_run": _ci("workflow_run"),
    "installation": _installation,
    "installation_repositories": _installation_repositories,
    "repository": _repository,
}
