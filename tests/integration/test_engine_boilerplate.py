"""Containment judged on substantive code: lines every C file has (`return NGX_ERROR;`, an
`if (rc != NGX_OK) {`, a cleanup call) turning up elsewhere in the head are not evidence that
the head already has a patch's change, nor that the code a patch removes lives on elsewhere."""

from __future__ import annotations

import pytest

from bot.core.classify import Decision, Status
from harness.gitrepo import RepoBuilder
from tests.support.engine_checks import check, only, patches_of, signals

# A file full of the handful of lines nginx-style C repeats everywhere.
HANDLER = "".join(
    f"static ngx_int_t\nngx_step_{i}(ngx_http_request_t *r)\n{{\n"
    f"    rc = ngx_http_read_body_{i}(r);\n"
    "    if (rc != NGX_OK) {\n"
    f'        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0, "step {i}: %i", rc);\n'
    "        return NGX_ERROR;\n    }\n"
    "    ngx_pfree(r->pool, buf);\n"
    "    return NGX_OK;\n}\n\n"
    for i in range(1, 13)
)


@pytest.fixture
def up(make_repo) -> RepoBuilder:
    repo = make_repo("upstream")
    repo.commit("base", {"src/handler.c": HANDLER})
    return repo


def carried(up: RepoBuilder, tmp_path, files: dict) -> list:
    up.checkout("main", new_branch="fix")
    up.commit("Check the length (CVE)", files)
    patches = patches_of(up, "main..fix", tmp_path / "patches")
    up.checkout("main")
    return patches


def test_added_boilerplate_found_line_by_line_elsewhere_is_not_a_duplicate(up, tmp_path):
    """Each added line exists somewhere in the file, never as the block the patch adds."""
    fixed = HANDLER.replace(
        "    rc = ngx_http_read_body_7(r);\n",
        "    rc = ngx_http_read_body_7(r);\n"
        "    ngx_pfree(r->pool, buf);\n    if (rc != NGX_OK) {\n        return NGX_ERROR;\n",
        1,
    )
    patches = carried(up, tmp_path, {"src/handler.c": fixed})
    p = only(check(up, "main", patches, tmp_path))
    assert (p.status, p.decision) == (Status.APPLIES, Decision.KEEP)
    assert signals(p).get("added-lines-already-in-head", {}).get("duplicate") is not True


def test_an_added_block_the_head_has_elsewhere_is_still_a_duplicate(up, tmp_path):
    block = (
        "    if (len > NGX_HTTP_MAX_BODY) {\n"
        '        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0, "body too long");\n'
        "        return NGX_HTTP_REQUEST_ENTITY_TOO_LARGE;\n    }\n"
    )
    anchor = "    rc = ngx_http_read_body_3(r);\n"
    patches = carried(up, tmp_path, {"src/handler.c": HANDLER.replace(anchor, anchor + block)})
    other = "    rc = ngx_http_read_body_11(r);\n"
    up.commit(
        "upstream checks in step 11", {"src/handler.c": HANDLER.replace(other, other + block)}
    )
    p = only(check(up, "main", patches, tmp_path))
    assert (p.status, p.decision) == (Status.UPSTREAM_VERSION, Decision.REVIEW)
    assert signals(p)["added-lines-already-in-head"]["duplicate"] is True


def test_a_removal_whose_generic_lines_remain_elsewhere_reverse_applies_to_a_drop(up, tmp_path):
    """Upstream removed step 5's error check as the patch does; its generic lines live on in
    every other step, which is not the code having moved."""
    check_5 = (
        "    if (rc != NGX_OK) {\n"
        '        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0, "step 5: %i", rc);\n'
        "        return NGX_ERROR;\n    }\n"
    )
    removed = HANDLER.replace(
        "    rc = ngx_http_read_body_5(r);\n" + check_5, "    rc = ngx_http_read_body_5(r);\n", 1
    )
    assert removed != HANDLER
    base = up.head("main")
    patches = carried(up, tmp_path, {"src/handler.c": removed})
    up.commit("upstream drops the step 5 check", {"src/handler.c": removed})
    p = only(check(up, "main", patches, tmp_path, base=base))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP)
