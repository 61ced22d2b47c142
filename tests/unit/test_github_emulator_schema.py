"""The schema helpers of the GitHub emulator: they must reject what GitHub would not send."""

from __future__ import annotations

import json

import pytest

from tests.support.github_schema import (
    RestSchemas,
    SchemaMismatch,
    WebhookSchemas,
    openapi_to_jsonschema,
)
from tests.support.paths import WEBHOOK_EXAMPLES

PULL = "/repos/{owner}/{repo}/pulls/{pull_number}"


@pytest.fixture(scope="module")
def rest() -> RestSchemas:
    return RestSchemas()


def test_nullable_becomes_any_of_null() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "nullable": True}}}
    assert openapi_to_jsonschema(schema)["properties"]["a"] == {
        "anyOf": [{"type": "string"}, {"type": "null"}]
    }
    # a property literally called "nullable" is a schema, not the keyword
    named = {"properties": {"nullable": {"type": "boolean"}}}
    assert openapi_to_jsonschema(named) == named


def test_templates_resolve_from_concrete_paths(rest: RestSchemas) -> None:
    assert rest.template_for("GET", "/repos/a/b/commits/feature/x/check-runs") == (
        "/repos/{owner}/{repo}/commits/{ref}/check-runs"
    )
    assert (
        rest.template_for("GET", "/repos/a/b/git/ref/heads/a/b")
        == "/repos/{owner}/{repo}/git/ref/{ref}"
    )
    assert rest.template_for("GET", "/repos/a/b/compare/main...topic/x") == (
        "/repos/{owner}/{repo}/compare/{basehead}"
    )
    assert rest.template_for("GET", "/repos/a/b/branches/main") is None


def test_rest_validation_rejects_bad_bodies(rest: RestSchemas) -> None:
    with pytest.raises(SchemaMismatch, match="required"):
        rest.validate("GET", PULL, 200, {"url": "http://x"})
    with pytest.raises(SchemaMismatch, match="not documented"):
        rest.validate("GET", PULL, 201, {})
    with pytest.raises(SchemaMismatch, match=r"index\.json"):
        rest.validate("GET", "/repos/{owner}/{repo}/branches", 200, [])
    comment = {
        "id": 1,
        "node_id": "IC_1",
        "url": "http://127.0.0.1/repos/a/b/issues/comments/1",
        "html_url": "http://127.0.0.1/a/b/issues/1#issuecomment-1",
        "issue_url": "http://127.0.0.1/repos/a/b/issues/1",
        "user": None,
        "created_at": "yesterday",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    with pytest.raises(SchemaMismatch, match="date-time"):
        rest.validate("GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}", 200, comment)
    comment["created_at"] = "2026-01-01T00:00:00Z"
    assert rest.validate(
        "GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}", 200, comment
    ).documented


def test_undocumented_errors_must_still_be_error_objects(rest: RestSchemas) -> None:
    error = {"message": "Server Error", "documentation_url": "https://docs.github.com/rest"}
    checked = rest.validate("POST", "/repos/{owner}/{repo}/check-runs", 502, error)
    assert not checked.documented and checked.schema.endswith("basic-error")
    with pytest.raises(SchemaMismatch):
        rest.validate("POST", "/repos/{owner}/{repo}/check-runs", 502, {"message": 5})
    assert rest.validate("GET", PULL + "/merge", 404, None).schema == "no content"


def test_shared_webhook_examples_validate_and_extra_keys_do_not() -> None:
    schemas = WebhookSchemas()
    example = json.loads((WEBHOOK_EXAMPLES / "pull_request.opened.json").read_text())
    assert schemas.validate("pull_request", example) == "pull_request$opened"
    push = json.loads((WEBHOOK_EXAMPLES / "push.json").read_text())
    assert schemas.validate("push", push) == "push$event"
    example["pull_request"]["surprise"] = True
    with pytest.raises(SchemaMismatch, match="surprise"):
        schemas.validate("pull_request", example)
    with pytest.raises(SchemaMismatch, match="no octokit schema"):
        schemas.validate("check_run", {"action": "created"})
