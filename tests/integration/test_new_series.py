"""`carry new`: a series directory a maintainer fills in, valid from the first minute (the
dashboard and `carry fixes` show it as waiting for import), that `carry import` then fills."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.series_loader import load_series
from tests.support.carry_import import check_statuses, do_import, feature, run_cli, snapshot, up

__all__ = ["feature", "up"]  # fixtures, used by name


def new(capsys: pytest.CaptureFixture[str], root: Path, *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, "new", *argv, "--patches-dir", str(root / "patches"))


def test_a_new_series_waits_for_import_and_import_fills_it(
    feature, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = new(capsys, tmp_path, "widget", "--fix", "widget-fix", "--release", "v1.0")
    assert (code, err) == (0, "")
    directory = tmp_path / "patches" / "widget"
    assert sorted(p.name for p in directory.iterdir()) == ["series", "widget-fix.md"]
    loaded = load_series(directory)  # valid as written: no problem to fix before importing
    assert loaded.is_awaiting_import and loaded.patch_names == ()
    (page,) = loaded.pages
    assert (page.name, page.releases, page.patches) == ("widget-fix", ("v1.0",), ())
    assert page.summary.startswith("TODO: one paragraph")  # the field comments are not in it
    page_text = (directory / "widget-fix.md").read_text()
    for field in ("Affects", "Releases", "Patches", "Upstream", "Test"):
        assert f"<!-- {field}:" in page_text  # each field says what it holds
    # What to do next, in the order it is done.
    assert "- id: widget" in out and "patches: widget" in out
    assert (
        f"carry import --series widget --patches-dir {tmp_path / 'patches'} --page widget-fix"
        in out
    )

    code, fixes, err = run_cli(capsys, "fixes", "--patches-dir", str(tmp_path / "patches"))
    assert code == 0, err
    assert "widget-fix" in fixes and "awaiting import" in fixes

    code, out, err = do_import(
        capsys,
        directory,
        tmp_path,
        "--repo",
        str(feature.path),
        "--range",
        "main..feature",
        "--page",
        "widget-fix",
    )
    assert code == 0, err
    loaded = load_series(directory)
    assert not loaded.is_awaiting_import and len(loaded.patch_names) == 2
    assert loaded.pages[0].files_for(loaded.patch_names[0]) == ("helper.py",)
    assert check_statuses(capsys, directory, feature.path, "main", tmp_path) == ["applies"] * 2


def test_an_imported_series_may_not_keep_an_empty_patches_field(tmp_path: Path, capsys) -> None:
    """Only a series waiting for import may leave Patches empty: once it has patches, a page
    that names none is a problem again (carry would not know which patch it describes)."""
    new(capsys, tmp_path, "widget", "--fix", "widget-fix", "--release", "v1.0")
    directory = tmp_path / "patches" / "widget"
    (directory / "series").write_text("")
    with pytest.raises(Exception, match="field 'Patches' is empty"):
        load_series(directory)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["widget", "--fix", "widget-fix", "--release", "v1.0"], "already exists"),
        (["Bad Id", "--fix", "widget-fix", "--release", "v1.0"], "bad series id 'Bad Id'"),
        (["other", "--fix", "Widget_Fix", "--release", "v1.0"], "bad fix name 'Widget_Fix'"),
        (["other", "--fix", "widget-fix", "--release", "v 1"], "bad release 'v 1'"),
    ],
)
def test_bad_names_and_an_existing_series_are_refused_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    new(capsys, tmp_path, "widget", "--fix", "widget-fix", "--release", "v1.0")
    before = {p.name: snapshot(p) for p in (tmp_path / "patches").iterdir()}
    code, out, err = new(capsys, tmp_path, *argv)
    assert (code, out) == (2, "") and message in err and err.count("\n") == 1, err
    assert {p.name: snapshot(p) for p in (tmp_path / "patches").iterdir()} == before
