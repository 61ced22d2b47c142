"""A job carries its series to the runner (bot/ci/spec.py TreeSpec.patches): exact
bytes through the broker's JSON, in the order the `series` file gives, or not at all."""

from __future__ import annotations

import json

from bot.ci.spec import TreeSpec
from workers.ci.github import carried_series

SPEC = TreeSpec(
    upstream_url="https://example.invalid/up.git",
    upstream_sha="1" * 40,
    downstream_url="https://example.invalid/down.git",
    downstream_ref="refs/heads/carry/s1",
    downstream_sha="2" * 40,
    patches_dir="patches/s1",
    series_digest="d" * 64,
    expected_tree="3" * 40,
)


def test_the_series_survives_the_brokers_json_byte_for_byte() -> None:
    crlf_and_latin1 = b"--- a/x\r\n+++ b/x\r\n@@ -1 +1 @@\r\n-caf\xe9\r\n+caf\xc3\xa9\r\n"
    spec = SPEC.with_series([("0002-b.patch", crlf_and_latin1), ("0001-a.patch", b"")])
    again = TreeSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec
    assert again.series() == (["0002-b.patch", "0001-a.patch"], [crlf_and_latin1, b""])


def test_a_job_without_the_series_says_so_and_an_empty_series_is_still_carried() -> None:
    assert TreeSpec.from_dict(json.loads(json.dumps(SPEC.to_dict()))).series() is None
    assert SPEC.with_series([]).series() == ([], [])


def test_the_carried_patches_are_the_series_files_in_its_order() -> None:
    files = {  # as git lists a directory: not the series' order
        "0010-b.patch": b"B",
        "0009-a.patch": b"A",
        "series": b"# comment\n0009-a.patch\n0010-b.patch\n",
        "0011-not-listed.patch": b"C",
        "the-fix.md": b"# page",
    }
    assert carried_series(files) == [("0009-a.patch", b"A"), ("0010-b.patch", b"B")]


def test_nothing_is_carried_when_the_series_cannot_be_read_whole() -> None:
    assert carried_series({}) is None
    assert carried_series({"series": b"0001-a.patch\n"}) is None  # the patch is missing
