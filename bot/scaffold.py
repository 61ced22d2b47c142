"""`carry new`: a series directory that is valid before it has patches.

It holds a `series` file that waits for `carry import` and one fix page whose HTML comments say
what each field holds. Everything is checked with the loader's own parsers before anything is
written, and an existing directory is never touched.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from bot.core.fixpage import FIX_NAME_RE, STATE_CHOICES, parse_fix_page
from bot.core.seriesfile import parse_series
from bot.series_loader import SERIES_FILE, SERIES_ID_RE


class ScaffoldRefused(Exception):
    """Nothing was written; the message says why, in one line."""


PAGE_TEMPLATE = """\
# {fix}

TODO: one paragraph that says what the fix does, for someone deciding whether to ship it.

<!-- Affects: who hits the bug: models, features, hardware, configurations. -->
<!-- Releases: the upstream releases this fix is carried on, separated by ','. -->
<!-- Patches: filled in by `carry import --page {fix}`: each patch and the files it
     touches, as '<NNNN-slug.patch>: <file>, <file>', patches separated by ';'. It may stay
     empty only while the series waits for its import. -->
<!-- Upstream: where the fix stands upstream, '<owner>/<repo>#<number> (<state>)' entries
     separated by ';', with <state> one of: {states} ('not-filed' alone when
     there is no upstream PR yet). carry updates the states it observes and appends to
     '## Upstream history'. -->
<!-- Test: the test that shows the bug, or 'none' and why. -->

| Field | Value |
|---|---|
| Affects | TODO |
| Releases | {releases} |
| Patches | |
| Upstream | not-filed |
| Test | TODO |

## Problem

TODO: the defect in the code, precisely enough to review the patch against.

## Symptom

TODO: what a user sees when it hits.

## Who is affected

TODO: which deployments hit it, and which do not.

## The fix

TODO: what the patches change, and why that is right.

## Verify

TODO: how the hardware check shows the fix works (and fails without it).
"""


def series_files(
    series_id: str, fix: str, releases: Sequence[str], patches_dir: str = "patches"
) -> dict[str, str]:
    """File name -> text of a new series; raises ScaffoldRefused naming its problems."""
    if not SERIES_ID_RE.match(series_id):
        raise ScaffoldRefused(
            f"bad series id '{series_id}' (expected lowercase letters, digits, '.-_')"
        )
    if not FIX_NAME_RE.match(fix):
        raise ScaffoldRefused(f"bad fix name '{fix}' (expected lowercase letters, digits and '-')")
    page = PAGE_TEMPLATE.format(fix=fix, releases=", ".join(releases), states=STATE_CHOICES)
    series = f"# awaiting-import: the patches of fix {fix}; run: {import_command(series_id, fix, patches_dir)}\n"
    _, problems = parse_fix_page(page, f"{fix}.md", expected_name=fix, patches_pending=True)
    problems += parse_series(series, SERIES_FILE)[1]
    if problems:
        raise ScaffoldRefused("; ".join(str(p) for p in problems))
    return {SERIES_FILE: series, f"{fix}.md": page}


def import_command(series_id: str, fix: str, patches_dir: str = "patches") -> str:
    where = f" --patches-dir {shlex.quote(patches_dir)}" if patches_dir != "patches" else ""
    return (
        f"carry import --series {shlex.quote(series_id)}{where} --page {shlex.quote(fix)} "
        "--range BASE..TIP --repo REPO"
    )


def write_series(patches_dir: Path, series_id: str, files: dict[str, str]) -> Path:
    directory = patches_dir / series_id
    try:
        patches_dir.mkdir(parents=True, exist_ok=True)
        directory.mkdir()
    except FileExistsError as err:
        raise ScaffoldRefused(
            f"{directory} already exists: carry new never writes into it"
        ) from err
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    return directory


def config_entry(series_id: str) -> str:
    """The `series:` entry of config/carry.yaml for the new directory."""
    return "\n".join(
        [
            f"  - id: {series_id}",
            "    upstream: <a key of upstreams>",
            "    base: {branch: main}  # or {tag: ...}, {tag_pattern: ...}, {pull: N}",
            f"    patches: {series_id}",
        ]
    )
