"""Issue rules that need no hub state: request validation, GitHub's refusals and the
filters of GET /repos/{owner}/{repo}/issues. The tests cite where GitHub documents each."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from .errors import ApiError, validation_failed
from .state import Issue

DOC_CREATE = "https://docs.github.com/rest/issues/issues#create-an-issue"
DOC_UPDATE = "https://docs.github.com/rest/issues/issues#update-an-issue"
MAX_TITLE_CHARS = 256
STATES = ("open", "closed")
STATE_REASONS = ("completed", "not_planned", "duplicate", "reopened")
LIST_STATES = ("open", "closed", "all")
LIST_SORTS = ("created", "updated", "comments")
DIRECTIONS = ("asc", "desc")


def integration_refused(docs: str) -> ApiError:
    """An installation token whose App lacks `issues: write`."""
    return ApiError(
        403,
        "Resource not accessible by integration",
        documentation_url=docs,
        headers={"X-Accepted-GitHub-Permissions": "issues=write"},
    )


def edit_refused() -> ApiError:
    """Someone who is neither the issue's author nor a triager (or more) of the repository."""
    return ApiError(403, "Must have admin rights to Repository.", documentation_url=DOC_UPDATE)


def title_of(value: Any) -> str:
    """A valid title (integers are accepted, as the REST description allows), else 422."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        code = "missing_field" if value is None else "invalid"
        raise validation_failed("Issue", "title", code)
    title = str(value)
    if not title.strip():
        raise validation_failed("Issue", "title", "missing_field")
    if len(title) > MAX_TITLE_CHARS:
        message = f"title is too long (maximum is {MAX_TITLE_CHARS} characters)"
        raise ApiError(
            422,
            "Validation Failed",
            errors=[{"resource": "Issue", "code": "custom", "field": "title", "message": message}],
            documentation_url=DOC_CREATE,
        )
    return title


def body_of(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise validation_failed("Issue", "body", "invalid")
    return value


def label_names(value: Any) -> list[str]:
    """Names from a list of strings or {"name": ...} objects; an empty name is a 422."""
    if not isinstance(value, list):
        raise validation_failed("Issue", "labels", "invalid")
    names = []
    for item in value:
        name = item.get("name") if isinstance(item, dict) else item
        if not isinstance(name, str) or not name.strip():
            raise validation_failed("Label", "name", "missing_field")
        names.append(name.strip())
    return names


def assignee_logins(data: dict[str, Any]) -> tuple[str, list[str]] | None:
    """(field, logins) from `assignees`, or from the older single `assignee`; None when the
    request names neither."""
    if "assignees" in data and data["assignees"] is not None:
        raw, field = data["assignees"], "assignees"
        if not isinstance(raw, list):
            raise validation_failed("Issue", field, "invalid")
    elif "assignee" in data:
        raw, field = ([] if data["assignee"] is None else [data["assignee"]]), "assignee"
    else:
        return None
    logins = []
    for item in raw:
        login = item.get("login") if isinstance(item, dict) else item
        if not isinstance(login, str) or not login:
            raise validation_failed("Issue", field, "invalid", value=login)
        logins.append(login)
    return field, logins


def check_state(state: Any, reason: Any) -> None:
    if state is not None and state not in STATES:
        raise validation_failed("Issue", "state", "invalid")
    if reason is not None and reason not in STATE_REASONS:
        raise validation_failed("Issue", "state_reason", "invalid")


def check_milestone(value: Any) -> None:
    """The emulator keeps no milestones: any milestone but "none" names one that is missing."""
    if value not in (None, ""):
        raise validation_failed("Issue", "milestone", "invalid", value=value)


# -- GET /repos/{owner}/{repo}/issues ------------------------------------------------------------

Arg = Callable[[str], str | None]


def list_filter(arg: Arg, comments: Callable[[Issue], int]) -> Callable[[list[Issue]], list[Issue]]:
    """Validates the query of a list call; returns what selects and orders its issues."""
    state = arg("state") or "open"
    sort = arg("sort") or "created"
    direction = arg("direction") or "desc"
    for name, value, allowed in (
        ("state", state, LIST_STATES),
        ("sort", sort, LIST_SORTS),
        ("direction", direction, DIRECTIONS),
    ):
        if value not in allowed:
            raise validation_failed("Issue", name, "invalid")
    tests = [_by_state(state), *_by_people(arg), _by_labels(arg("labels")), _since(arg("since"))]
    tests.append(_by_milestone(arg("milestone")))
    key: Callable[[Issue], float] = {
        "created": lambda i: i.created_at,
        "updated": lambda i: i.updated_at,
        "comments": lambda i: float(comments(i)),
    }[sort]

    def select(issues: list[Issue]) -> list[Issue]:
        kept = [i for i in issues if all(test(i) for test in tests)]
        return sorted(kept, key=lambda i: (key(i), i.number), reverse=direction == "desc")

    return select


Test = Callable[[Issue], bool]


def _by_state(state: str) -> Test:
    return lambda i: state in ("all", i.state)


def _by_people(arg: Arg) -> list[Test]:
    tests: list[Test] = []
    creator = arg("creator")
    if creator:
        tests.append(lambda i: i.user.lower() == creator.lower())
    assignee = arg("assignee")
    if assignee == "none":
        tests.append(lambda i: not i.assignees)
    elif assignee == "*":
        tests.append(lambda i: bool(i.assignees))
    elif assignee:
        tests.append(lambda i: assignee.lower() in {a.lower() for a in i.assignees})
    return tests


def _by_labels(labels: str | None) -> Test:
    wanted = {n.strip().lower() for n in (labels or "").split(",") if n.strip()}
    return lambda i: wanted <= {n.lower() for n in i.labels}


def _since(since: str | None) -> Test:
    if not since:
        return lambda i: True
    try:
        cutoff = datetime.fromisoformat(since.replace("Z", "+00:00")).timestamp()
    except ValueError as exc:
        raise validation_failed("Issue", "since", "invalid") from exc
    return lambda i: i.updated_at >= cutoff


def _by_milestone(milestone: str | None) -> Test:
    # No issue has a milestone here: "none" keeps them all, "*" or a number none of them.
    return lambda i: milestone in (None, "", "none")
